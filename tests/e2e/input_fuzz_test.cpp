// Mutation fuzzing of every file a user hands Tilefire: a safetensors image, config.json, a checkpoint
// folder (config, index and shards together, run by the engine), a simulator device file and a traced
// step to fit one to. Each case starts from a valid file and makes a few seeded edits
// (tests/common/input_mutator.h). Whatever the edit, the reader either accepts the file, and what it
// returns then holds (tensors within the data section, a config that round-trips, finite predictions),
// or throws an InputError that names the file. Any other exception fails the case; a crash fails the test (the
// ASan variant, scripts/test-sanitizers, runs it too). TILEFIRE_FUZZ_SCALE=K runs K times as many cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "graph/weights.h"
#include "tests/common/input_mutator.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"
#include "tilefire/simulate.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// How many mutated files were read without an error (the rest were refused): a test that accepted none
// would check refusals alone.
void report_accepted(uint64_t accepted, uint64_t cases) {
  std::printf("%llu of %llu mutated files accepted\n", (unsigned long long)accepted, (unsigned long long)cases);
  EXPECT_GT(accepted, 0u) << "no mutation was accepted: the test checks only refusals";
}

// Runs one case: `read` must return or throw an InputError whose message names the input (holds one of
// `origins`). Returns whether the input was accepted (the caller then checks what was read).
bool expect_accepted_or_input_error(const std::vector<std::string>& origins, const std::string& what_was_done,
                                    const std::function<void()>& read) {
  try {
    read();
    return true;
  } catch (const InputError& error) {
    const std::string message = error.what();
    const bool named = std::any_of(origins.begin(), origins.end(),
                                   [&](const std::string& origin) { return message.find(origin) != std::string::npos; });
    EXPECT_TRUE(named) << "the message names none of " << ::testing::PrintToString(origins) << ": " << message
                       << "\nedits: " << what_was_done;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "not an InputError: " << error.what() << "\nedits: " << what_was_done;
  }
  return false;
}

// A model small enough that an image copies in microseconds: every kind of tensor, two dtypes.
ModelSpec small_spec() {
  ModelSpec spec = variant_spec(Variant::qwen3_qk_norm);
  spec.vocab = 40;
  spec.hidden = 32;
  spec.layers = 1;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 16;
  spec.ffn = 48;
  return spec;
}

// A safetensors image split into its header text and the rest.
std::vector<uint8_t> with_header(const std::string& header, const std::vector<uint8_t>& data, uint64_t stated_length) {
  std::vector<uint8_t> image;
  image.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) image.push_back(uint8_t(stated_length >> (8 * i)));
  image.insert(image.end(), header.begin(), header.end());
  image.insert(image.end(), data.begin(), data.end());
  return image;
}

TEST(InputFuzz, SafetensorsImages) {
  const ModelSpec spec = small_spec();
  const std::vector<uint8_t> valid = random_safetensors_image(spec, {DType::bf16, 7, 0});
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= uint64_t(valid[size_t(i)]) << (8 * i);
  const std::string header(valid.begin() + 8, valid.begin() + 8 + long(header_length));
  const std::vector<uint8_t> data(valid.begin() + 8 + long(header_length), valid.end());
  const json header_json = json::parse(header);
  uint64_t accepted = 0;
  const uint64_t cases = fuzz_case_count(4000);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    InputMutator mutate(seed);
    std::vector<uint8_t> image;
    switch (mutate.below(4)) {
      case 0: {  // the header's structure, its length restated
        const std::string text = mutate.mutate_json_text(header_json);
        image = with_header(text, data, text.size());
        break;
      }
      case 1: {  // the header's bytes, its length restated or (one time in four) left as it was
        const std::string text = mutate.mutate_bytes(header);
        image = with_header(text, data, mutate.one_in(4) ? header_length : text.size());
        break;
      }
      case 2: {  // the length field alone
        const uint64_t lengths[] = {0, 1, 7, header_length - 1, header_length + 1, header_length + 8, valid.size(),
                                    uint64_t(1) << 40, ~uint64_t(0), ~uint64_t(0) - 7, uint64_t(mutate.below(1u << 20))};
        const uint64_t stated = lengths[mutate.below(std::size(lengths))];
        image = with_header(header, data, stated);
        break;
      }
      default: {  // the data section cut or grown
        std::vector<uint8_t> body = data;
        body.resize(size_t(mutate.one_in(2) ? mutate.below(body.size()) : body.size() + 1 + mutate.below(64)));
        image = with_header(header, body, header_length);
        break;
      }
    }
    // The data section's size, as the image states its header length (the reader keeps the section where
    // it is, or copies it to an aligned buffer when the header leaves it misaligned for f32 loads).
    uint64_t stated_header = 0;
    for (int i = 0; i < 8 && size_t(i) < image.size(); ++i) stated_header |= uint64_t(image[size_t(i)]) << (8 * i);
    const uint64_t data_section = image.size() >= 8 && stated_header <= image.size() - 8 ? image.size() - 8 - stated_header : 0;
    std::unique_ptr<SafetensorsFile> file;
    const std::string edits = "seed " + std::to_string(seed) + ": " + mutate.describe();
    if (!expect_accepted_or_input_error({"fuzz.safetensors"}, edits,
                                        [&] { file = SafetensorsFile::from_bytes(std::move(image), "fuzz.safetensors"); }))
      continue;
    ++accepted;
    // What was accepted holds: each tensor's bytes are its shape's, all of them within one span no longer
    // than the data section, and readable (the sum goes to a volatile, so the reads stay for ASan to check).
    const uint8_t *lowest = nullptr, *highest = nullptr;
    for (const auto& [name, tensor] : file->tensors()) {
      ASSERT_EQ(tensor.nbytes, tensor.numel() * dtype_size(tensor.dtype)) << name << "; " << edits;
      const auto* bytes = static_cast<const uint8_t*>(tensor.data);
      if (!lowest || bytes < lowest) lowest = bytes;
      if (!highest || bytes + tensor.nbytes > highest) highest = bytes + tensor.nbytes;
      uint32_t sum = 0;
      for (uint64_t b = 0; b < tensor.nbytes; ++b) sum += bytes[b];
      volatile uint32_t kept = sum;
      (void)kept;
    }
    if (lowest) {
      ASSERT_LE(uint64_t(highest - lowest), data_section) << "the tensors span more than the data section; " << edits;
    }
    ModelSpec checked = spec;
    expect_accepted_or_input_error({"fuzz.safetensors"}, edits, [&] {
      WeightStore store = WeightStore::from_file(std::move(file));
      check_weights_against_spec(checked, store, "fuzz.safetensors");
    });
  }
  report_accepted(accepted, cases);
}

TEST(InputFuzz, ConfigFiles) {
  std::vector<json> valid;
  for (Variant v : {Variant::llama, Variant::llama3_rope, Variant::qwen2_bias, Variant::qwen3_qk_norm, Variant::tied, Variant::mistral, Variant::phi3, Variant::phi3_longrope, Variant::phi3_partial,
                    Variant::mistral_window, Variant::qwen2_window, Variant::smollm3, Variant::granite, Variant::gemma3, Variant::gemma2})
    valid.push_back(json::parse(to_hf_config_json(variant_spec(v))));
  for (const char* preset : {"llama-3.2-1b", "qwen3-8b"}) valid.push_back(json::parse(to_hf_config_json(preset_spec(preset))));
  uint64_t accepted = 0;
  const uint64_t cases = fuzz_case_count(4000);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    InputMutator mutate(seed);
    const json& base = valid[size_t(mutate.below(valid.size()))];
    const std::string text = mutate.one_in(4) ? mutate.mutate_bytes(base.dump(2)) : mutate.mutate_json_text(base);
    const std::string edits = "seed " + std::to_string(seed) + ": " + mutate.describe() + "\n" + text.substr(0, 2000);
    ModelSpec spec;
    if (!expect_accepted_or_input_error({"fuzz/config.json"}, edits, [&] { spec = parse_hf_config_text(text, "fuzz/config.json"); }))
      continue;
    ++accepted;
    // An accepted config is consistent, and says the same thing once written back.
    EXPECT_NO_THROW(validate_spec(spec, "fuzz/config.json")) << edits;
    ModelSpec again;
    ASSERT_NO_THROW(again = parse_hf_config_text(to_hf_config_json(spec), "written back")) << edits;
    EXPECT_EQ(again.arch, spec.arch) << edits;
    EXPECT_EQ(again.vocab, spec.vocab) << edits;
    EXPECT_EQ(again.hidden, spec.hidden) << edits;
    EXPECT_EQ(again.layers, spec.layers) << edits;
    EXPECT_EQ(again.heads, spec.heads) << edits;
    EXPECT_EQ(again.kv_heads, spec.kv_heads) << edits;
    EXPECT_EQ(again.head_dim, spec.head_dim) << edits;
    EXPECT_EQ(again.ffn, spec.ffn) << edits;
    EXPECT_EQ(again.tie_embeddings, spec.tie_embeddings) << edits;
    EXPECT_EQ(again.attention_scale(), spec.attention_scale()) << edits;
    EXPECT_EQ(again.embedding_multiplier, spec.embedding_multiplier) << edits;
    EXPECT_EQ(again.residual_multiplier, spec.residual_multiplier) << edits;
    EXPECT_EQ(again.logits_scaling, spec.logits_scaling) << edits;
    EXPECT_EQ(again.eos_tokens, spec.eos_tokens) << edits;
    EXPECT_FALSE(expected_tensors(spec).empty()) << edits;
  }
  report_accepted(accepted, cases);
}

// Every figure a device file has, each where a real device might have it.
json full_device_file() {
  return json{{"name", "fuzzed"},          {"workers", 8},          {"memory_gbs", 4800},
              {"flops", {{"bf16", 9.9e14}, {"f32", 6.7e13}}},      {"shared_memory_bytes", 232448},
              {"dispatch_ns", 100},        {"signal_ns", 500},      {"link_gbs", 450},
              {"link_latency_ns", 2000},   {"rotation_ns", 2},      {"exp_ns", 1},
              {"prefetch_bytes", 65536},   {"prefetch_tasks", 2},   {"prefetch_max_tokens", 4},
              {"worker_speed", {1.0, 1.1, 0.9, 1.0, 1.0, 1.2, 0.8, 1.0}},
              {"stall_ns", 100},           {"stall_every_ns", 100000}, {"input_rows_cached", true}};
}

// The report of an accepted simulation: finite, non-negative, the step no faster than its bound.
void expect_sane_report(const SimulateReport& report, const std::string& edits) {
  EXPECT_TRUE(std::isfinite(report.step_ms) && report.step_ms > 0) << report.step_ms << "; " << edits;
  EXPECT_TRUE(std::isfinite(report.bound_ms) && report.bound_ms >= 0) << report.bound_ms << "; " << edits;
  EXPECT_LE(report.bound_ms, report.step_ms * (1 + 1e-9)) << edits;
  EXPECT_TRUE(std::isfinite(report.bsp_ratio) && report.bsp_ratio > 0) << report.bsp_ratio << "; " << edits;
  EXPECT_TRUE(report.idle_share >= 0 && report.idle_share <= 1) << report.idle_share << "; " << edits;
  for (double idle : report.idle_ms) EXPECT_TRUE(std::isfinite(idle) && idle >= -1e-9) << idle << "; " << edits;
}

// `cases` mutations of `valid`, each written to `path` and simulated with the options `options_for`
// draws: an accepted one gives a sane report (and passes `check`), a refused one names one of `origins`.
void fuzz_simulated_file(const json& valid, const std::string& path, uint64_t cases, const std::vector<std::string>& origins,
                         const std::function<SimulateOptions(InputMutator&)>& options_for,
                         const std::function<void(const SimulateReport&, const std::string&)>& check) {
  uint64_t accepted = 0;
  for (uint64_t seed = 0; seed < cases; ++seed) {
    InputMutator mutate(seed);
    write_file_text(path, mutate.mutate_json_text(valid));
    const SimulateOptions options = options_for(mutate);
    const std::string edits = "seed " + std::to_string(seed) + ": " + mutate.describe();
    SimulateReport report;
    if (!expect_accepted_or_input_error(origins, edits, [&] { report = simulate_model(options); })) continue;
    ++accepted;
    expect_sane_report(report, edits);
    check(report, edits);
  }
  report_accepted(accepted, cases);
}

TEST(InputFuzz, DeviceFiles) {
  TempDir dir("fuzz-device");
  const std::string path = (dir.path() / "device.json").string();
  fuzz_simulated_file(
      full_device_file(), path, fuzz_case_count(1000), {"--device " + path, "on the device '"},
      [&](InputMutator& mutate) {
        SimulateOptions options;
        options.preset = "tiny";
        options.device = path;
        options.tp = mutate.one_in(3) ? 2 : 1;
        options.batch = uint32_t(1 + mutate.below(4));
        options.context = uint32_t(1 + mutate.below(600));
        return options;
      },
      [](const SimulateReport&, const std::string&) {});
}

TEST(InputFuzz, TracesToFitADeviceTo) {
  TempDir dir("fuzz-fit");  // not "trace": the check below looks for that word in the messages
  const std::string traced = (dir.path() / "step.json").string(), device = (dir.path() / "two.json").string(),
                    mutated = (dir.path() / "mutated.json").string();
  {
    EngineOptions options;  // the built-in sample: tiny in f32
    options.threads = 2;
    Engine engine(options);
    GenerateRequest request;
    request.prompt = {1, 2, 3, 4, 5, 6, 7, 8};
    request.max_new_tokens = 3;
    request.trace_path = traced;
    ASSERT_TRUE(engine.generate(request).trace_written);
  }
  write_file_text(device, R"({"name": "two-cores", "workers": 2, "memory_gbs": 20, "flops": 1e11, "dispatch_ns": 10, "signal_ns": 200})");
  SimulateOptions options;
  options.preset = "tiny";
  options.dtype = "f32";
  options.device = device;
  options.kv_splits = 1;
  options.context = 10;
  options.fit_trace_path = mutated;
  // The reader's refusals name the flag and the file; the fit's name the trace ("the trace has task 3
  // twice"), and one dtype refusal says "the traced step".
  fuzz_simulated_file(
      json::parse(read_file_text(traced)), mutated, fuzz_case_count(400), {"--fit-trace " + mutated, "the trace", "the traced step"},
      [&](InputMutator&) { return options; },
      [](const SimulateReport& report, const std::string& edits) {
        ASSERT_TRUE(report.fitted) << edits;
        EXPECT_TRUE(std::isfinite(report.traced_step_ms) && report.traced_step_ms > 0) << report.traced_step_ms << "; " << edits;
        EXPECT_TRUE(std::isfinite(report.fitted_step_ms) && report.fitted_step_ms > 0) << report.fitted_step_ms << "; " << edits;
        EXPECT_TRUE(std::isfinite(report.fitted_memory_gbs) && report.fitted_memory_gbs > 0) << edits;
        EXPECT_TRUE(std::isfinite(report.fitted_dispatch_ns) && report.fitted_dispatch_ns >= 0) << edits;
        EXPECT_TRUE(std::isfinite(report.fitted_signal_ns) && report.fitted_signal_ns >= 0) << edits;
      });
}

// A checkpoint folder as the engine opens it: config.json, the shards' index, a shard cut short.
TEST(InputFuzz, CheckpointFoldersRunOrAreRefused) {
  TempDir dir("fuzz-folder");
  const ModelSpec spec = small_spec();
  const fs::path valid = dir.path() / "valid";
  write_test_model(spec, valid, DType::bf16, 4096);  // shards of at most 4 KiB, and their index
  const json config = json::parse(read_file_text(valid / "config.json"));
  const json index = json::parse(read_file_text(valid / "model.safetensors.index.json"));
  std::vector<fs::path> shards;
  for (const auto& entry : fs::directory_iterator(valid))
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path().filename());
  std::sort(shards.begin(), shards.end());
  ASSERT_GT(shards.size(), 1u);
  uint64_t accepted = 0;
  const uint64_t cases = fuzz_case_count(200);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    InputMutator mutate(seed);
    const fs::path folder = dir.path() / "case";
    fs::remove_all(folder);
    fs::copy(valid, folder);
    switch (mutate.below(3)) {
      case 0: write_file_text(folder / "config.json", mutate.mutate_json_text(config)); break;
      case 1: write_file_text(folder / "model.safetensors.index.json", mutate.mutate_json_text(index)); break;
      default: {
        const fs::path shard = folder / shards[size_t(mutate.below(shards.size()))];
        fs::resize_file(shard, mutate.below(fs::file_size(shard)));
        break;
      }
    }
    const std::string edits = "seed " + std::to_string(seed) + ": " + mutate.describe();
    std::vector<int32_t> tokens;
    if (!expect_accepted_or_input_error({folder.string()}, edits, [&] {
          EngineOptions options;
          options.model_dir = folder.string();
          options.threads = 1;
          Engine engine(options);
          GenerateRequest request;
          request.prompt = {1, 2, 3};
          request.max_new_tokens = 2;
          request.stop_at_eos = false;
          tokens = engine.generate(request).tokens;
        }))
      continue;
    ++accepted;
    ASSERT_EQ(tokens.size(), 2u) << edits;
    for (int32_t token : tokens) EXPECT_TRUE(token >= 0 && uint32_t(token) < spec.vocab) << token << "; " << edits;
  }
  report_accepted(accepted, cases);
}

}  // namespace
}  // namespace tilefire::testing
