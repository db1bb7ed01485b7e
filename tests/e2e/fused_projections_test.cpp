// Phi-3's checkpoints (Phi3ForCausalLM): q, k and v stored as one qkv_proj and gate and up as one
// gate_up_proj, read as views of their rows. A Phi-3 checkpoint built from a Llama checkpoint's tensors runs
// bitwise as that checkpoint does (one rank and two); LongRoPE takes its short factors when the engine's
// context is within the pretrained one (the reference test covers the long ones); a fused tensor of the
// wrong shape is refused naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/common/compare.h"
#include "tests/common/reference_model.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

using ::testing::HasSubstr;

struct NamedBytes {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;  // f32
};

// A model.safetensors of f32 tensors, in the order given.
void write_f32_safetensors(const std::filesystem::path& path, const std::vector<NamedBytes>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const NamedBytes& tensor : tensors) {
    header[tensor.name] = {{"dtype", "F32"}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = text.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text;
  for (const NamedBytes& tensor : tensors) out.write(reinterpret_cast<const char*>(tensor.bytes.data()), std::streamsize(tensor.bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::vector<uint8_t> bytes_of(const WeightStore& weights, const std::string& name) {
  const TensorView* view = weights.find(name);
  if (view == nullptr) throw std::runtime_error("no tensor " + name);
  const auto* data = static_cast<const uint8_t*>(view->data);
  return std::vector<uint8_t>(data, data + view->nbytes);
}

// The Phi-3 checkpoint of `llama`'s tensors: each layer's q, k, v rows concatenated into qkv_proj and its
// gate and up rows into gate_up_proj, as transformers' Phi-3 slices them.
ModelSpec write_phi3_of(const LoadedModel& llama, const std::filesystem::path& folder) {
  ModelSpec phi3 = llama.spec;
  phi3.arch = Architecture::phi3;
  phi3.arch_name = "Phi3ForCausalLM";
  std::filesystem::create_directories(folder);
  std::vector<NamedBytes> tensors;
  for (const ExpectedTensor& expected : expected_tensors(phi3)) {
    const std::string& name = expected.name;
    auto parts_of = [&](const std::string& fused, std::vector<std::string> parts) {
      std::vector<uint8_t> bytes;
      for (const std::string& part : parts) {
        const std::vector<uint8_t> rows = bytes_of(llama.weights, name.substr(0, name.size() - fused.size()) + part);
        bytes.insert(bytes.end(), rows.begin(), rows.end());
      }
      return bytes;
    };
    std::vector<uint8_t> bytes;
    if (name.ends_with("self_attn.qkv_proj.weight")) {
      bytes = parts_of("self_attn.qkv_proj.weight", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"});
    } else if (name.ends_with("mlp.gate_up_proj.weight")) {
      bytes = parts_of("mlp.gate_up_proj.weight", {"mlp.gate_proj.weight", "mlp.up_proj.weight"});
    } else {
      bytes = bytes_of(llama.weights, name);
    }
    tensors.push_back({name, expected.shape, std::move(bytes)});
  }
  write_f32_safetensors(folder / "model.safetensors", tensors);
  write_file_text(folder / "config.json", to_hf_config_json(phi3));
  return phi3;
}

TEST(FusedProjections, APhi3CheckpointRunsBitwiseAsTheLlamaOneOfTheSameRows) {
  TempDir dir("fused-projections");
  const std::filesystem::path llama_folder = write_test_model(variant_spec(Variant::mistral), dir.path() / "llama");
  const LoadedModel llama = load_hf_model(llama_folder);
  write_phi3_of(llama, dir.path() / "phi3");
  LoadedModel phi3 = load_hf_model(dir.path() / "phi3");
  ASSERT_EQ(phi3.spec.arch, Architecture::phi3);
  // Checked again, as a caller holding the store may: the parts the first check added are not refused as unread.
  check_weights_against_spec(phi3.spec, phi3.weights, "again");
  // The parts are views of the fused rows, equal to the Llama checkpoint's tensors.
  for (const char* part : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                           "mlp.up_proj.weight"}) {
    const std::string name = "model.layers.1." + std::string(part);
    EXPECT_EQ(bytes_of(phi3.weights, name), bytes_of(llama.weights, name)) << name;
  }

  const std::vector<int32_t> prompt = {1, 17, 256, 3, 511, 42, 7};
  for (uint32_t tp : {1u, 2u}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    auto run = [&](const std::filesystem::path& folder) {
      EngineOptions options;
      options.model_dir = folder.string();
      options.threads = 2;
      options.tp = tp;
      Engine engine(options);
      std::vector<std::vector<float>> logits{engine.prefill(prompt)};
      for (int32_t token : {5, 300, 9, 77}) logits.push_back(engine.decode(token));
      return logits;
    };
    EXPECT_EQ(run(dir.path() / "phi3"), run(llama_folder));
  }
}

// Within the pretrained context LongRoPE takes the short factors (transformers' choice for every
// sequence that fits in it): the engine with 64 positions against the reference told so, and not equal to
// the engine past it.
TEST(FusedProjections, LongRopeWithinThePretrainedContextTakesTheShortFactors) {
  TempDir dir("longrope-short");
  const ModelSpec spec = variant_spec(Variant::phi3_longrope);
  ASSERT_EQ(spec.rope_scaling.original_max_position, 64u);
  write_test_model(spec, dir.path());
  const LoadedModel loaded = load_hf_model(dir.path());
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<std::vector<float>> logits;
  for (uint32_t context : {64u, 65u}) {
    SCOPED_TRACE("context " + std::to_string(context));
    EngineOptions options;
    options.model_dir = dir.path().string();
    options.threads = 2;
    options.max_context = context;
    Engine engine(options);
    ReferenceModel reference(loaded.spec, loaded.weights, context);
    logits.push_back(engine.prefill(prompt));
    expect_logits_match_reference(logits.back(), reference.forward(prompt), "prefill");
    int32_t token = 11;
    for (int step = 0; step < 4; ++step) {
      const std::vector<double> expected = reference.forward({token});
      expect_logits_match_reference(engine.decode(token), expected, "decode step " + std::to_string(step));
      token = int32_t(std::max_element(expected.begin(), expected.end()) - expected.begin());
    }
  }
  EXPECT_GT(relative_l2_error(logits[0], logits[1]), 1e-3) << "the short and long factors gave the same logits";
}

TEST(FusedProjections, AFusedTensorOfTheWrongShapeIsRefusedNamingIt) {
  TempDir dir("fused-wrong-shape");
  ModelSpec spec = variant_spec(Variant::phi3);  // 8 query heads, 4 KV heads of 32
  write_test_model(spec, dir.path());
  spec.kv_heads = 2;  // the config now implies a qkv_proj of (8 + 2 * 2) * 32 rows
  write_file_text(dir.path() / "config.json", to_hf_config_json(spec));
  const std::string message = message_of<InputError>([&] { load_hf_model(dir.path()); });
  EXPECT_THAT(message, HasSubstr("tensor 'model.layers.0.self_attn.qkv_proj.weight'"));
  EXPECT_THAT(message, HasSubstr("has shape [512, 256], but config.json implies [384, 256]"));

  // A Phi-3 checkpoint that also holds an unfused part: which would be read?
  TempDir both("fused-and-part");
  const ModelSpec phi3 = variant_spec(Variant::phi3);
  write_test_model(phi3, both.path() / "fused");
  const LoadedModel loaded = load_hf_model(both.path() / "fused");
  std::vector<NamedBytes> tensors;
  for (const ExpectedTensor& expected : expected_tensors(phi3))
    tensors.push_back({expected.name, expected.shape, bytes_of(loaded.weights, expected.name)});
  tensors.push_back({"model.layers.0.self_attn.q_proj.weight", {phi3.q_dim(), phi3.hidden},
                     bytes_of(loaded.weights, "model.layers.0.self_attn.q_proj.weight")});
  const std::filesystem::path extra = both.path() / "extra";  // not over the file `loaded` maps
  std::filesystem::create_directories(extra);
  write_f32_safetensors(extra / "model.safetensors", tensors);
  write_file_text(extra / "config.json", to_hf_config_json(phi3));
  EXPECT_THAT(message_of<InputError>([&] { load_hf_model(extra); }),
              HasSubstr("holds 'model.layers.0.self_attn.q_proj.weight'"));
}

}  // namespace
}  // namespace tilefire::testing
