// Safetensors and checkpoint loading: random checkpoints round trip bit for bit (single file and shards,
// f32/bf16/f16), generation is deterministic, and every malformed file or checkpoint gives an InputError
// that names the file and the tensor.
#include "graph/weights.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/compare.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

namespace tilefire {
namespace {

// The message of the InputError that `action` throws.
std::string input_error_of(const std::function<void()>& action) { return testing::message_of<InputError>(action); }

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("tilefire_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
    fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path;
  }
  fs::path write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    return path;
  }
  static std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path dir_;
};

// length + header text + `data_bytes` bytes of data (values 0, 1, 2, ...).
std::vector<uint8_t> raw_image(const std::string& header, size_t data_bytes) {
  // Sized once and filled in place (vector::insert here trips GCC 12's false -Warray-bounds).
  std::vector<uint8_t> bytes(8 + header.size() + data_bytes);
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  for (size_t i = 0; i < data_bytes; ++i) bytes[8 + header.size() + i] = uint8_t(i);
  return bytes;
}

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
};

// A well-formed image of zero-filled tensors, for checks against a spec.
std::vector<uint8_t> zero_image(const std::vector<TensorSpec>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const TensorSpec& tensor : tensors) {
    uint64_t bytes = dtype_size(tensor.dtype);
    for (uint64_t dim : tensor.shape) bytes *= dim;
    header[tensor.name] = {{"dtype", std::string(safetensors_dtype_name(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> image = raw_image(text, 0);
  image.resize(image.size() + offset, 0);
  return image;
}

std::vector<TensorSpec> tensors_of(const ModelSpec& spec, DType dtype) {
  std::vector<TensorSpec> out;
  for (const ExpectedTensor& tensor : expected_tensors(spec)) out.push_back({tensor.name, dtype, tensor.shape});
  return out;
}

// Every expected tensor of `loaded` has exactly the bytes of the in-memory image of the same spec and seed.
void expect_weights_equal_image(const WeightStore& loaded, const ModelSpec& spec, const RandomWeightOptions& options) {
  auto image = SafetensorsFile::from_bytes(random_safetensors_image(spec, options), "image");
  for (const ExpectedTensor& expected : expected_tensors(spec)) {
    SCOPED_TRACE(expected.name);
    const TensorView& got = loaded.require(expected.name, expected.shape);
    const TensorView& want = image->tensors().at(expected.name);
    EXPECT_EQ(got.dtype, options.dtype);
    ASSERT_EQ(got.nbytes, want.nbytes);
    EXPECT_EQ(std::memcmp(got.data, want.data, got.nbytes), 0);
  }
}

ModelSpec qwen3_tiny() {
  ModelSpec spec = preset_spec("tiny");
  spec.arch = Architecture::qwen3;
  spec.arch_name = "Qwen3ForCausalLM";
  spec.qk_norm = true;
  spec.tie_embeddings = true;
  return spec;
}

ModelSpec qwen2_tiny() {
  ModelSpec spec = preset_spec("tiny");
  spec.arch = Architecture::qwen2;
  spec.arch_name = "Qwen2ForCausalLM";
  spec.qkv_bias = true;
  spec.layers = 2;
  return spec;
}

TEST_F(SafetensorsTest, SingleFileF32RoundTripIsBitwise) {
  ModelSpec spec = preset_spec("tiny");
  RandomWeightOptions options{DType::f32, 7, 0};
  write_random_hf_folder(spec, options, dir_);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  // The streamed file is byte for byte the in-memory image.
  std::vector<uint8_t> image = random_safetensors_image(spec, options);
  std::string file_text = read_text(dir_ / "model.safetensors");
  ASSERT_EQ(file_text.size(), image.size());
  EXPECT_EQ(std::memcmp(file_text.data(), image.data(), image.size()), 0);

  LoadedModel model = load_hf_model(dir_);
  EXPECT_EQ(model.origin, dir_.string());
  EXPECT_EQ(model.spec.dtype, DType::f32);
  EXPECT_EQ(model.weights.size(), expected_tensors(spec).size());
  expect_weights_equal_image(model.weights, spec, options);
}

TEST_F(SafetensorsTest, ShardedBf16RoundTripIsBitwise) {
  ModelSpec spec = preset_spec("tiny");
  RandomWeightOptions options{DType::bf16, 11, 1 << 20};
  write_random_hf_folder(spec, options, dir_);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  json index = json::parse(read_text(dir_ / "model.safetensors.index.json"));
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  EXPECT_GE(shards.size(), 3u);
  EXPECT_EQ(shards.count("model-00001-of-" + std::string(5 - std::to_string(shards.size()).size(), '0') +
                         std::to_string(shards.size()) + ".safetensors"),
            1u);
  uint64_t total = 0;
  for (const ExpectedTensor& tensor : expected_tensors(spec)) total += 2 * tensor.shape[0] * (tensor.shape.size() > 1 ? tensor.shape[1] : 1);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);

  LoadedModel model = load_hf_model(dir_);
  EXPECT_EQ(model.spec.dtype, DType::bf16);
  expect_weights_equal_image(model.weights, spec, options);
}

TEST_F(SafetensorsTest, QwenVariantsAndF16RoundTrip) {
  for (const ModelSpec& spec : {qwen3_tiny(), qwen2_tiny()}) {
    SCOPED_TRACE(spec.arch_name);
    fs::path folder = dir_ / spec.arch_name;
    RandomWeightOptions options{DType::f16, 3, 300000};
    write_random_hf_folder(spec, options, folder);
    LoadedModel model = load_hf_model(folder);
    EXPECT_EQ(model.spec.arch, spec.arch);
    EXPECT_EQ(model.spec.qk_norm, spec.qk_norm);
    EXPECT_EQ(model.spec.qkv_bias, spec.qkv_bias);
    EXPECT_EQ(model.spec.dtype, DType::f16);
    expect_weights_equal_image(model.weights, spec, options);
  }
  bool has_qnorm = false, has_bias = false, tied_has_lm_head = false;
  for (const auto& t : expected_tensors(qwen3_tiny())) {
    has_qnorm |= t.name == "model.layers.0.self_attn.q_norm.weight";
    tied_has_lm_head |= t.name == "lm_head.weight";
  }
  for (const auto& t : expected_tensors(qwen2_tiny())) has_bias |= t.name == "model.layers.1.self_attn.v_proj.bias";
  EXPECT_TRUE(has_qnorm);
  EXPECT_TRUE(has_bias);
  EXPECT_FALSE(tied_has_lm_head);
}

TEST_F(SafetensorsTest, GenerationIsDeterministicAndSeedDependent) {
  ModelSpec spec = preset_spec("tiny");
  EXPECT_EQ(random_safetensors_image(spec, {DType::f32, 1, 0}), random_safetensors_image(spec, {DType::f32, 1, 0}));
  EXPECT_NE(random_safetensors_image(spec, {DType::f32, 1, 0}), random_safetensors_image(spec, {DType::f32, 2, 0}));
  EXPECT_EQ(random_safetensors_image(spec, {DType::bf16, 5, 0}), random_safetensors_image(spec, {DType::bf16, 5, 0}));

  // A tensor's values depend on its name and the seed only, not on the other tensors.
  ModelSpec shallow = spec;
  shallow.layers = 1;
  auto full = SafetensorsFile::from_bytes(random_safetensors_image(spec, {DType::f32, 1, 0}), "full");
  auto part = SafetensorsFile::from_bytes(random_safetensors_image(shallow, {DType::f32, 1, 0}), "part");
  const TensorView& a = full->tensors().at("model.layers.0.mlp.down_proj.weight");
  const TensorView& b = part->tensors().at("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
}

TEST_F(SafetensorsTest, RandomWeightsHaveTheIntendedScales) {
  LoadedModel model = builtin_sample_model();
  EXPECT_EQ(model.origin, "built-in sample (tiny)");
  EXPECT_EQ(model.spec.vocab, 512u);
  EXPECT_EQ(model.spec.dtype, DType::f32);
  auto rms_of = [](const TensorView& view, float offset) {
    double sum = 0;
    for (uint64_t i = 0; i < view.numel(); ++i) {
      double v = load_as_f32(view.data, view.dtype, i) - offset;
      sum += v * v;
    }
    return std::sqrt(sum / double(view.numel()));
  };
  EXPECT_NEAR(rms_of(*model.weights.find("model.embed_tokens.weight"), 0), 1.0, 0.01);
  EXPECT_NEAR(rms_of(*model.weights.find("model.layers.2.self_attn.q_proj.weight"), 0), 0.02, 0.001);
  EXPECT_NEAR(rms_of(*model.weights.find("lm_head.weight"), 0), 1.0 / 16.0, 0.002);
  const TensorView& norm = *model.weights.find("model.layers.1.input_layernorm.weight");
  for (uint64_t i = 0; i < norm.numel(); ++i) {
    float v = load_as_f32(norm.data, norm.dtype, i);
    EXPECT_TRUE(v >= 0.9f && v <= 1.1f) << v;
  }
  EXPECT_NEAR(rms_of(norm, 1.0f), 0.1 / std::sqrt(3.0), 0.01);
}

TEST_F(SafetensorsTest, UnalignedHeaderLengthStillLoads) {
  // Header length 5 + padding to an odd size: the data section starts misaligned for f32.
  std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  if (header.size() % 2 == 0) header += " ";
  std::vector<uint8_t> image = raw_image(header, 0);
  float values[2] = {1.5f, -2.25f};
  image.insert(image.end(), reinterpret_cast<uint8_t*>(values), reinterpret_cast<uint8_t*>(values) + 8);
  auto file = SafetensorsFile::open(write_file("odd.safetensors", image));
  const TensorView& x = file->tensors().at("x");
  EXPECT_EQ(load_as_f32(x.data, x.dtype, 0), 1.5f);
  EXPECT_EQ(load_as_f32(x.data, x.dtype, 1), -2.25f);
  auto owned = SafetensorsFile::from_bytes(image, "odd image");
  EXPECT_EQ(load_as_f32(owned->tensors().at("x").data, DType::f32, 1), -2.25f);
}

struct BadImage {
  const char* label;
  std::vector<uint8_t> bytes;
  std::vector<std::string> message_parts;
};

TEST_F(SafetensorsTest, EveryMalformedFileNamesFileAndTensor) {
  auto entry = [](const std::string& body) { return "{\"w\":" + body + "}"; };
  std::vector<uint8_t> short_file = {1, 2, 3, 4, 5};
  std::vector<uint8_t> long_header(8 + 10, ' ');
  uint64_t claimed = 1000;
  std::memcpy(long_header.data(), &claimed, 8);
  const std::vector<BadImage> cases = {
      {"shorter than 8 bytes", short_file, {"5 bytes", "8-byte header length"}},
      {"header length beyond EOF", long_header, {"truncated", "1000"}},
      {"bad JSON", raw_image("{\"w\": {\"dtype\": ", 0), {"not valid JSON"}},
      {"header not an object", raw_image("[1,2,3]", 0), {"JSON object"}},
      {"unknown dtype", raw_image(entry(R"({"dtype":"I64","shape":[2],"data_offsets":[0,16]})"), 16),
       {"tensor 'w'", "unsupported dtype 'I64'"}},
      {"no dtype", raw_image(entry(R"({"shape":[2],"data_offsets":[0,8]})"), 8), {"tensor 'w'", "'dtype'"}},
      {"no shape", raw_image(entry(R"({"dtype":"F32","data_offsets":[0,8]})"), 8), {"tensor 'w'", "'shape'"}},
      {"no offsets", raw_image(entry(R"({"dtype":"F32","shape":[2]})"), 8), {"tensor 'w'", "'data_offsets'"}},
      {"shape not a list", raw_image(entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})"), 8),
       {"tensor 'w'", "'shape'"}},
      {"negative dim", raw_image(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), 8),
       {"tensor 'w'", "shape"}},
      {"dtype not a string", raw_image(entry(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), 8),
       {"tensor 'w'", "'dtype'"}},
      {"offsets one number", raw_image(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[8]})"), 8),
       {"tensor 'w'", "data_offsets"}},
      {"end before begin", raw_image(entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"), 8),
       {"tensor 'w'", "before begin"}},
      {"beyond data", raw_image(entry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), 12),
       {"truncated: tensor 'w' needs bytes up to 16 but the data section has 12"}},
      {"size mismatch", raw_image(entry(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})"), 16),
       {"tensor 'w'", "12 bytes", "needs 16"}},
      // Offsets far past the file are a wrong header, not a short file: the span is named.
      {"absurd offsets", raw_image(entry(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,1000000000000000]})"), 16),
       {"tensor 'w'", "span 1000000000000000 bytes", "needs 16"}},
      {"overlap",
       raw_image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                 R"("b":{"dtype":"F16","shape":[4],"data_offsets":[8,16]}})",
                 16),
       {"'a'", "'b'", "overlap"}},
      {"metadata not strings", raw_image(R"({"__metadata__":{"n":1}})", 0), {"__metadata__"}},
      // One name twice: which entry is meant? (The JSON library would keep the last silently.)
      {"a tensor twice",
       raw_image(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       {"the key 'w' is given twice"}},
  };
  for (const BadImage& bad : cases) {
    SCOPED_TRACE(bad.label);
    fs::path path = write_file("bad.safetensors", bad.bytes);
    std::string message = input_error_of([&] { SafetensorsFile::open(path); });
    EXPECT_THAT(message, HasSubstr(path.string() + ": "));
    for (const std::string& part : bad.message_parts) EXPECT_THAT(message, HasSubstr(part));
    // The in-memory path validates identically.
    message = input_error_of([&] { SafetensorsFile::from_bytes(bad.bytes, "image of " + std::string(bad.label)); });
    EXPECT_THAT(message, HasSubstr("image of "));
    for (const std::string& part : bad.message_parts) EXPECT_THAT(message, HasSubstr(part));
  }
}

TEST_F(SafetensorsTest, MissingFileAndEmptyFolder) {
  std::string message = input_error_of([&] { SafetensorsFile::open(dir_ / "nope.safetensors"); });
  EXPECT_THAT(message, HasSubstr((dir_ / "nope.safetensors").string()));
  EXPECT_THAT(message, HasSubstr("No such file"));
  message = input_error_of([&] { WeightStore::open_folder(dir_); });
  EXPECT_THAT(message, HasSubstr(dir_.string() + ": no model.safetensors or model.safetensors.index.json"));
  message = input_error_of([&] { load_hf_model(dir_); });
  EXPECT_THAT(message, HasSubstr("config.json"));
}

TEST_F(SafetensorsTest, TruncatedRealFileNamesLastTensor) {
  ModelSpec spec = preset_spec("tiny");
  write_random_hf_folder(spec, {DType::bf16, 0, 0}, dir_);
  fs::path file = dir_ / "model.safetensors";
  const uint64_t size = fs::file_size(file);
  fs::resize_file(file, size - 100);
  std::string message = input_error_of([&] { load_hf_model(dir_); });
  EXPECT_THAT(message, HasSubstr(file.string()));
  EXPECT_THAT(message, HasSubstr("truncated: tensor 'lm_head.weight' needs bytes up to"));
}

TEST_F(SafetensorsTest, MissingTensorWrongShapeAndMixedDtypes) {
  ModelSpec spec = preset_spec("tiny");
  std::vector<TensorSpec> tensors = tensors_of(spec, DType::bf16);

  std::vector<TensorSpec> missing = tensors;
  std::erase_if(missing, [](const TensorSpec& t) { return t.name == "model.layers.3.mlp.up_proj.weight"; });
  WeightStore store = WeightStore::from_file(SafetensorsFile::from_bytes(zero_image(missing), "ckpt"));
  std::string message = input_error_of([&] { check_weights_against_spec(spec, store, "ckpt-folder"); });
  EXPECT_THAT(message, HasSubstr("ckpt-folder: missing tensor 'model.layers.3.mlp.up_proj.weight' "
                                 "(expected shape [688, 256])"));
  message = input_error_of([&] { store.require("model.layers.3.mlp.up_proj.weight", {688, 256}); });
  EXPECT_THAT(message, HasSubstr("missing tensor 'model.layers.3.mlp.up_proj.weight'"));

  std::vector<TensorSpec> mixed = tensors;
  mixed[5].dtype = DType::f32;  // a layer-0 matrix (o_proj)
  ASSERT_EQ(mixed[5].name, "model.layers.0.self_attn.o_proj.weight");
  store = WeightStore::from_file(SafetensorsFile::from_bytes(zero_image(mixed), "ckpt"));
  message = input_error_of([&] { check_weights_against_spec(spec, store, "ckpt-folder"); });
  EXPECT_THAT(message, HasSubstr("'model.layers.0.self_attn.o_proj.weight' is F32"));
  EXPECT_THAT(message, HasSubstr("'model.embed_tokens.weight' is BF16"));

  // Norm vectors in f32 beside bf16 matrices are fine; a tied checkpoint's extra lm_head is ignored.
  std::vector<TensorSpec> f32_norms = tensors;
  for (TensorSpec& t : f32_norms) {
    if (t.shape.size() == 1) t.dtype = DType::f32;
  }
  store = WeightStore::from_file(SafetensorsFile::from_bytes(zero_image(f32_norms), "ckpt"));
  ModelSpec tied = spec;
  tied.tie_embeddings = true;
  ModelSpec checked = tied;
  EXPECT_NO_THROW(check_weights_against_spec(checked, store, "ckpt"));
  EXPECT_EQ(checked.dtype, DType::bf16);

  message = input_error_of([&] { store.require("model.norm.weight", {255}); });
  EXPECT_THAT(message, HasSubstr("'model.norm.weight' has shape [256], expected [255]"));
  EXPECT_EQ(store.find("no.such.tensor"), nullptr);
}

TEST_F(SafetensorsTest, ConfigDisagreeingWithWeights) {
  ModelSpec spec = preset_spec("tiny");
  write_random_hf_folder(spec, {DType::bf16, 0, 0}, dir_);
  // A config claiming float32 over bf16 weights: the stored dtype wins.
  json config = json::parse(read_text(dir_ / "config.json"));
  config["torch_dtype"] = "float32";
  write_text(dir_ / "config.json", config.dump());
  EXPECT_EQ(load_hf_model(dir_).spec.dtype, DType::bf16);
  // A config whose FFN width is not what the weights hold.
  config["intermediate_size"] = 700;
  write_text(dir_ / "config.json", config.dump());
  std::string message = input_error_of([&] { load_hf_model(dir_); });
  EXPECT_THAT(message, HasSubstr(dir_.string()));
  EXPECT_THAT(message, HasSubstr("'model.layers.0.mlp.gate_proj.weight'"));
  EXPECT_THAT(message, HasSubstr("[688, 256]"));
  EXPECT_THAT(message, HasSubstr("[700, 256]"));
}

TEST_F(SafetensorsTest, BadIndexes) {
  ModelSpec spec = preset_spec("tiny");
  write_random_hf_folder(spec, {DType::bf16, 0, 1 << 20}, dir_);
  const fs::path index_path = dir_ / "model.safetensors.index.json";
  const json index = json::parse(read_text(index_path));
  const std::string second_shard = index["weight_map"]["model.norm.weight"].get<std::string>();
  const std::string first_shard = index["weight_map"]["model.embed_tokens.weight"].get<std::string>();
  ASSERT_NE(first_shard, second_shard);

  // The index places a tensor in a shard that does not hold it.
  json misplaced = index;
  misplaced["weight_map"]["model.norm.weight"] = first_shard;
  write_text(index_path, misplaced.dump());
  std::string message = input_error_of([&] { WeightStore::open_folder(dir_); });
  EXPECT_THAT(message, HasSubstr(index_path.string()));
  EXPECT_THAT(message, HasSubstr("'model.norm.weight'"));

  // The same tensor in two shards.
  fs::copy_file(dir_ / first_shard, dir_ / "copy.safetensors");
  json duplicated = index;
  duplicated["weight_map"]["extra"] = "copy.safetensors";
  write_text(index_path, duplicated.dump());
  message = input_error_of([&] { WeightStore::open_folder(dir_); });
  EXPECT_THAT(message, HasSubstr("'model.embed_tokens.weight' appears in both"));

  // One tensor listed twice in the weight map, with two shards: which is meant?
  std::string twice = index.dump();
  const std::string entry = "\"model.norm.weight\":";
  twice.insert(twice.find(entry), entry + "\"" + first_shard + "\",");
  write_text(index_path, twice);
  message = input_error_of([&] { WeightStore::open_folder(dir_); });
  EXPECT_THAT(message, HasSubstr(index_path.string()));
  EXPECT_THAT(message, HasSubstr("the key 'model.norm.weight' is given twice"));

  // A shard escaping the folder, and a malformed index.
  json escaping = index;
  escaping["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  write_text(index_path, escaping.dump());
  EXPECT_THAT(input_error_of([&] { WeightStore::open_folder(dir_); }), HasSubstr("plain file names"));
  write_text(index_path, "{\"weight_map\": [");
  message = input_error_of([&] { WeightStore::open_folder(dir_); });
  EXPECT_THAT(message, HasSubstr(index_path.string() + ": not valid JSON"));
  write_text(index_path, "{\"metadata\": {}}");
  EXPECT_THAT(input_error_of([&] { WeightStore::open_folder(dir_); }), HasSubstr("'weight_map'"));

  // The index names a shard that is gone.
  write_text(index_path, index.dump());
  EXPECT_NO_THROW(WeightStore::open_folder(dir_));
  fs::remove(dir_ / second_shard);
  message = input_error_of([&] { load_hf_model(dir_); });
  EXPECT_THAT(message, HasSubstr(index_path.string()));
  EXPECT_THAT(message, HasSubstr(second_shard));
  EXPECT_THAT(message, HasSubstr("No such file"));
}

// stored_tensor_names (what the planning tools read): the names from the header or the index alone, and
// the files a load refuses refused as the load refuses them, a FIFO among them (not waited on).
TEST_F(SafetensorsTest, StoredTensorNamesReadTheHeaderOrTheIndexAlone) {
  const std::vector<uint8_t> image = zero_image({{"model.norm.weight", DType::f32, {4}}, {"lm_head.weight", DType::f32, {2, 4}}});
  write_file("model.safetensors", image);
  std::vector<std::string> names = stored_tensor_names(dir_);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"lm_head.weight", "model.norm.weight"}));
  // A header length past the file, or past the format's 100 MB.
  std::vector<uint8_t> damaged = image;
  const uint64_t too_long = 1ull << 40;
  std::memcpy(damaged.data(), &too_long, 8);
  write_file("model.safetensors", damaged);
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("model.safetensors: truncated or damaged: the header length says"));
  write_file("model.safetensors", {1, 2, 3});
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("too short for the 8-byte header length"));
  fs::remove(dir_ / "model.safetensors");
  fs::create_directory(dir_ / "model.safetensors");
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("model.safetensors: not a regular file"));
  fs::remove(dir_ / "model.safetensors");
  ASSERT_EQ(::mkfifo((dir_ / "model.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("model.safetensors: not a regular file"));
  fs::remove(dir_ / "model.safetensors");

  // The index: its names, whether or not the shards are there; a weight_map a load would refuse, refused.
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(stored_tensor_names(dir_), std::vector<std::string>{"model.norm.weight"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {}})");
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("key 'weight_map' lists no tensors"));
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": 3}})");
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("weight_map entry for 'model.norm.weight' must be a file name"));
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}})");
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("shards must be plain file names inside the folder"));
  fs::remove(dir_ / "model.safetensors.index.json");
  EXPECT_THAT(input_error_of([&] { stored_tensor_names(dir_); }), HasSubstr("no model.safetensors or model.safetensors.index.json"));
}

}  // namespace
}  // namespace tilefire
