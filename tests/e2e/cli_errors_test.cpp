// Every wrong input a user can give `tilefire`: a damaged checkpoint, a bad config.json, bad flags. Each
// must end with exit status 2 and one line on stderr, `tilefire <cmd>: error: <message>`, that names the
// file / tensor / key / flag and what was expected, and nothing on stdout.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <limits>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "tests/common/cli_runner.h"
#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Status 2, one `tilefire <cmd>: error: ...` line naming every needle, nothing on stdout, no crash.
void expect_input_error(const RunResult& r, const std::string& command, std::initializer_list<std::string> needles) {
  SCOPED_TRACE(describe(r));
  EXPECT_NE(r.status, 134) << "aborted";
  EXPECT_NE(r.status, 139) << "segfault";
  EXPECT_NE(r.status, 124) << "timed out";
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(r.out.empty()) << "an error should print nothing on stdout";
  const std::string prefix = command.empty() ? "tilefire: error: " : "tilefire " + command + ": error: ";
  EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << "stderr should start with '" << prefix << "'";
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.back(), '\n');
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "the message should be a single line";
  EXPECT_EQ(r.err.find("error: tilefire"), std::string::npos) << "the command is named twice";
  EXPECT_GT(r.err.size(), prefix.size() + 10) << "the message says nothing";
  for (const std::string& needle : needles) EXPECT_NE(r.err.find(needle), std::string::npos) << "missing '" << needle << "'";
}

// ---- a small safetensors reader/writer, so tests can damage files precisely --------------------------

struct Safetensors {
  json header;       // tensor entries (and __metadata__)
  std::string data;  // the data section
};

Safetensors read_safetensors(const fs::path& path) {
  const std::string bytes = read_file_text(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

void write_safetensors(const fs::path& path, const Safetensors& file) {
  std::string header = file.header.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned
  const uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  write_file_text(path, bytes + header + file.data);
}

// ---- fixture: one generated tiny model, copied fresh for every test -----------------------------------

class CliErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = new TempDir("cli-errors-base");
    RunResult r = run_cli({"gen-model", "--preset", "tiny", "--out", (base_->path() / "tiny").string()});
    ASSERT_EQ(r.status, 0) << describe(r);
    r = run_cli({"gen-model", "--preset", "tiny", "--out", (base_->path() / "sharded").string(), "--shard-mb", "1"});
    ASSERT_EQ(r.status, 0) << describe(r);
  }
  static void TearDownTestSuite() {
    delete base_;
    base_ = nullptr;
  }

  // A fresh copy of the generated model (`tiny` or `sharded`).
  fs::path fresh(const std::string& which = "tiny") {
    fs::path dir = scratch_.path() / (which + std::to_string(copies_++));
    fs::copy(base_->path() / which, dir, fs::copy_options::recursive);
    return dir;
  }
  static json read_config(const fs::path& dir) { return json::parse(read_file_text(dir / "config.json")); }
  static void write_config(const fs::path& dir, const json& config) {
    write_file_text(dir / "config.json", config.dump(2));
  }
  static RunResult run_model(const fs::path& dir) {
    return run_cli({"run", "--model", dir.string(), "--max-new-tokens", "2", "--threads", "2"});
  }

  static TempDir* base_;
  TempDir scratch_{"cli-errors"};
  int copies_ = 0;
};

TempDir* CliErrors::base_ = nullptr;

// ---- safetensors problems -----------------------------------------------------------------------------

TEST_F(CliErrors, SafetensorsMissing) {
  fs::path dir = fresh();
  fs::remove(dir / "model.safetensors");
  expect_input_error(run_model(dir), "run", {dir.string(), "model.safetensors"});
}

TEST_F(CliErrors, SafetensorsTruncatedNamesFileAndTensor) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  // The tensor whose bytes end last is the one a short cut leaves incomplete.
  Safetensors st = read_safetensors(file);
  std::string last;
  uint64_t last_end = 0;
  for (const auto& [name, entry] : st.header.items()) {
    if (name != "__metadata__" && entry["data_offsets"][1].get<uint64_t>() > last_end) {
      last_end = entry["data_offsets"][1].get<uint64_t>();
      last = name;
    }
  }
  fs::resize_file(file, fs::file_size(file) - 100);
  expect_input_error(run_model(dir), "run", {"truncated", file.string(), "'" + last + "'"});
  // Cut in half: still "truncated", still a tensor named.
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_input_error(run_model(dir), "run", {"truncated", file.string(), "tensor '"});
}

TEST_F(CliErrors, SafetensorsShorterThan8Bytes) {
  fs::path dir = fresh();
  write_file_text(dir / "model.safetensors", "abcde");
  expect_input_error(run_model(dir), "run", {(dir / "model.safetensors").string(), "5 bytes", "8-byte"});
  write_file_text(dir / "model.safetensors", "");
  expect_input_error(run_model(dir), "run", {(dir / "model.safetensors").string(), "0 bytes"});
}

TEST_F(CliErrors, SafetensorsHeaderLengthLargerThanFile) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  std::string bytes = read_file_text(file);
  const uint64_t huge = 1000000000;
  std::memcpy(bytes.data(), &huge, 8);
  write_file_text(file, bytes);
  expect_input_error(run_model(dir), "run", {file.string(), "header length", "1000000000"});
}

// Bytes that belong to no tensor: every tensor would be read from the wrong place. Two stray bytes
// between the header and the data (as a header length two short would leave), and bytes appended.
TEST_F(CliErrors, SafetensorsDataNotIndexedInFull) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  const std::string bytes = read_file_text(file);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  write_file_text(file, bytes.substr(0, 8 + header_length) + "  " + bytes.substr(8 + header_length));
  expect_input_error(run_model(dir), "run", {file.string(), "tensors end at", "header length"});
  write_file_text(file, bytes + std::string(100, '\0'));
  expect_input_error(run_model(dir), "run", {file.string(), "tensors end at", "appended"});
}

// A FIFO in place of the checkpoint or its config would block the read: refused at once instead.
TEST_F(CliErrors, NotARegularFile) {
  for (const char* name : {"model.safetensors", "config.json"}) {
    SCOPED_TRACE(name);
    fs::path dir = fresh();
    fs::remove(dir / name);
    ASSERT_EQ(::mkfifo((dir / name).c_str(), 0600), 0);
    expect_input_error(run_model(dir), "run", {(dir / name).string(), "not a regular file"});
  }
}

// A folder with both a single file and an index is read from the single file, as transformers does: a
// broken index beside a good model.safetensors does not matter.
TEST_F(CliErrors, SingleFileBeforeIndex) {
  fs::path dir = fresh();
  write_file_text(dir / "model.safetensors.index.json", "not json");
  RunResult r = run_model(dir);
  EXPECT_EQ(r.status, 0) << describe(r);
}

TEST_F(CliErrors, SafetensorsHeaderNotJson) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  std::string bytes = read_file_text(file);
  bytes[8] = 'x';
  write_file_text(file, bytes);
  expect_input_error(run_model(dir), "run", {file.string(), "header", "not valid JSON"});
}

TEST_F(CliErrors, SafetensorsDataOffsetsDisagreeWithShape) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  Safetensors st = read_safetensors(file);
  st.header["model.norm.weight"]["data_offsets"][1] = st.header["model.norm.weight"]["data_offsets"][1].get<uint64_t>() - 4;
  write_safetensors(file, st);
  expect_input_error(run_model(dir), "run", {file.string(), "'model.norm.weight'", "data_offsets", "1020", "[256]", "1024"});

  st = read_safetensors(file);
  st.header["model.norm.weight"]["data_offsets"][1] = st.header["model.norm.weight"]["data_offsets"][1].get<uint64_t>() + 4;
  st.header["model.norm.weight"]["shape"] = {255};
  write_safetensors(file, st);
  expect_input_error(run_model(dir), "run", {file.string(), "'model.norm.weight'", "[255]", "1020", "1024"});
}

TEST_F(CliErrors, SafetensorsHeaderNotAnObjectOrMisaligned) {
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  Safetensors st = read_safetensors(file);
  const json original = st.header;
  st.header = json::array({1, 2});
  write_safetensors(file, st);
  expect_input_error(run_model(dir), "run", {file.string(), "header must be a JSON object"});
  st.header = original;
  st.header["model.norm.weight"]["data_offsets"] = {2, 1026};
  write_safetensors(file, st);
  expect_input_error(run_model(dir), "run", {file.string(), "'model.norm.weight'", "begin 2", "4-byte"});
}

TEST_F(CliErrors, SafetensorsUnknownDtype) {
  for (const char* dtype : {"F64", "I8"}) {
    fs::path dir = fresh();
    const fs::path file = dir / "model.safetensors";
    Safetensors st = read_safetensors(file);
    st.header["model.norm.weight"]["dtype"] = dtype;
    write_safetensors(file, st);
    expect_input_error(run_model(dir), "run", {file.string(), "'model.norm.weight'", std::string("'") + dtype + "'", "F32", "BF16"});
  }
}

// Non-finite weights: a NaN in a norm vector is found when it is converted at load and named; a NaN in a
// matrix (too large to scan on every load) surfaces as NaN logits, an input error naming the model.
TEST_F(CliErrors, NonFiniteWeights) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  {
    fs::path dir = fresh();
    const fs::path file = dir / "model.safetensors";
    Safetensors st = read_safetensors(file);
    const uint64_t offset = st.header["model.norm.weight"]["data_offsets"][0].get<uint64_t>();
    std::memcpy(st.data.data() + offset + 4 * 3, &nan, 4);
    write_safetensors(file, st);
    expect_input_error(run_model(dir), "run", {"'model.norm.weight'", "non-finite", "element 3"});
  }
  {
    fs::path dir = fresh();
    const fs::path file = dir / "model.safetensors";
    Safetensors st = read_safetensors(file);
    const uint64_t offset = st.header["model.layers.1.mlp.down_proj.weight"]["data_offsets"][0].get<uint64_t>();
    std::memcpy(st.data.data() + offset, &nan, 4);
    write_safetensors(file, st);
    expect_input_error(run_model(dir), "run", {dir.string(), "NaN logits"});
  }
}

TEST_F(CliErrors, TensorShapeDisagreesWithConfig) {
  fs::path dir = fresh();
  json config = read_config(dir);
  config["hidden_size"] = 128;
  write_config(dir, config);
  expect_input_error(run_model(dir), "run",
                     {"'model.embed_tokens.weight'", "model.safetensors", "[512, 256]", "[512, 128]", "config.json"});

  dir = fresh();
  config = read_config(dir);
  config["intermediate_size"] = 512;
  write_config(dir, config);
  expect_input_error(run_model(dir), "run", {"'model.layers.0.mlp.gate_proj.weight'", "[688, 256]", "[512, 256]"});
}

TEST_F(CliErrors, MissingTensor) {
  // The checkpoint lacks one tensor (its bytes are there under another name: the data section stays
  // indexed in full, as the format requires).
  fs::path dir = fresh();
  const fs::path file = dir / "model.safetensors";
  Safetensors st = read_safetensors(file);
  st.header["unused.down_proj.weight"] = st.header["model.layers.2.mlp.down_proj.weight"];
  ASSERT_EQ(st.header.erase("model.layers.2.mlp.down_proj.weight"), 1u);
  write_safetensors(file, st);
  expect_input_error(run_model(dir), "run", {dir.string(), "missing tensor 'model.layers.2.mlp.down_proj.weight'", "[256, 688]"});

  // config.json asks for a fifth layer the checkpoint (4 layers) does not have.
  dir = fresh();
  json config = read_config(dir);
  config["num_hidden_layers"] = 5;
  write_config(dir, config);
  expect_input_error(run_model(dir), "run", {dir.string(), "missing tensor 'model.layers.4."});
}

TEST_F(CliErrors, ShardedIndexNamesMissingShard) {
  fs::path dir = fresh("sharded");
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  const json index = json::parse(read_file_text(dir / "model.safetensors.index.json"));
  std::string shard, tensor;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (file.get<std::string>().find("-00002-") != std::string::npos) {
      shard = file.get<std::string>();
      tensor = name;
      break;
    }
  }
  ASSERT_FALSE(shard.empty()) << "gen-model --shard-mb 1 should write at least two shards";
  fs::remove(dir / shard);
  expect_input_error(run_model(dir), "run", {"model.safetensors.index.json", "'" + shard + "'", "No such file"});
}

// ---- config.json problems -----------------------------------------------------------------------------

TEST_F(CliErrors, ConfigMissing) {
  fs::path dir = fresh();
  fs::remove(dir / "config.json");
  expect_input_error(run_model(dir), "run", {(dir / "config.json").string(), "cannot open"});
}

TEST_F(CliErrors, ModelIsNotAFolder) {
  fs::path dir = fresh();
  expect_input_error(run_model(dir / "model.safetensors"), "run", {(dir / "model.safetensors").string(), "not a folder"});
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  expect_input_error(run_model(dir), "run", {(dir / "config.json").string(), "is a folder"});
}

TEST_F(CliErrors, ConfigNotJson) {
  fs::path dir = fresh();
  write_file_text(dir / "config.json", "{\"hidden_size\": ");
  expect_input_error(run_model(dir), "run", {(dir / "config.json").string(), "not valid JSON"});
}

struct ConfigCase {
  const char* name;
  const char* patch;  // merged into config.json (JSON merge patch: null deletes a key)
  std::vector<std::string> needles;
};

TEST_F(CliErrors, ConfigBadValues) {
  const ConfigCase cases[] = {
      {"unknown architecture", R"({"architectures": ["GPT2LMHeadModel"]})",
       {"unknown architecture 'GPT2LMHeadModel'", "LlamaForCausalLM"}},
      {"unknown torch_dtype", R"({"torch_dtype": "float8"})", {"'torch_dtype'", "'float8'", "bfloat16"}},
      {"missing key", R"({"hidden_size": null})", {"missing required key 'hidden_size'"}},
      {"wrong type", R"({"hidden_size": "big"})", {"'hidden_size'", "positive integer", "\"big\""}},
      {"negative size", R"({"intermediate_size": -5})", {"'intermediate_size'", "positive integer", "-5"}},
      {"rope_scaling type", R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
       {"'rope_scaling'", "'yarn'", "llama3"}},
      {"architectures not a list", R"({"architectures": "LlamaForCausalLM"})", {"'architectures'", "list"}},
      {"another activation", R"({"hidden_act": "gelu"})", {"'hidden_act'", "'gelu'", "silu"}},
      // Sizes past any published model are refused at once, not after minutes of per-layer work.
      {"a billion layers", R"({"num_hidden_layers": 1000000000})", {"'num_hidden_layers'", "1000000000", "1024"}},
      {"huge FFN", R"({"intermediate_size": 2147483647})", {"'intermediate_size'", "2147483647"}},
      {"MLP biases", R"({"mlp_bias": true})", {"'mlp_bias'", "no biases"}},
      // transformers would rotate half of each head; Tilefire rotates all of it (it ran, wrong).
      {"partial RoPE", R"({"partial_rotary_factor": 0.5})", {"'partial_rotary_factor' is not 1", "LlamaForCausalLM rotates whole heads"}},
  };
  for (const ConfigCase& c : cases) {
    SCOPED_TRACE(c.name);
    fs::path dir = fresh();
    json config = read_config(dir);
    config.merge_patch(json::parse(c.patch));
    write_config(dir, config);
    RunResult r = run_model(dir);
    expect_input_error(r, "run", {(dir / "config.json").string()});
    for (const std::string& needle : c.needles) EXPECT_NE(r.err.find(needle), std::string::npos) << needle << "\n" << r.err;
  }
}

// A number no double holds is bad JSON, named as such with the file, in every JSON the loader reads (not
// an internal error naming no file).
TEST_F(CliErrors, JsonNumberPastADouble) {
  fs::path dir = fresh();
  std::string config = read_file_text(dir / "config.json");
  const size_t theta = config.find("\"rope_theta\"");
  ASSERT_NE(theta, std::string::npos);
  config.replace(config.find(':', theta) + 1, config.find_first_of(",}", theta) - config.find(':', theta) - 1, " 1e400");
  write_file_text(dir / "config.json", config);
  RunResult r = run_model(dir);
  expect_input_error(r, "run", {(dir / "config.json").string(), "not valid JSON", "1e400"});
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << "the JSON library's own exception name leaked";

  fs::path sharded = fresh("sharded");
  write_file_text(sharded / "model.safetensors.index.json", "{\"metadata\": {\"total_size\": 1e999}, \"weight_map\": {}}");
  expect_input_error(run_model(sharded), "run", {"model.safetensors.index.json", "not valid JSON", "1e999"});
}

// Every tensor of a checkpoint is read, or refused: a tensor the model would not read (a bias config.json
// does not announce, another architecture's norm, anything unknown) would leave the logits wrong with
// exit 0. Old rotary_emb.inv_freq buffers are left, as transformers leaves them.
TEST_F(CliErrors, CheckpointTensorsTheModelWouldNotRead) {
  struct Extra {
    const char* name;
    std::vector<std::string> needles;
  };
  const Extra extras[] = {
      {"model.layers.0.self_attn.q_proj.bias", {"attention_bias is false"}},
      {"model.layers.1.self_attn.o_proj.bias", {"output-projection bias"}},
      {"model.layers.0.mlp.gate_proj.bias", {"MLP bias"}},
      {"model.layers.0.self_attn.q_norm.weight", {"query/key norm", "LlamaForCausalLM"}},
      {"model.extra.weight", {"does not read"}},
  };
  for (const Extra& extra : extras) {
    SCOPED_TRACE(extra.name);
    fs::path dir = fresh();
    Safetensors file = read_safetensors(dir / "model.safetensors");
    const uint64_t end = file.data.size();
    file.header[extra.name] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {end, end + 16}}};
    file.data.append(16, '\0');
    write_safetensors(dir / "model.safetensors", file);
    RunResult r = run_model(dir);
    expect_input_error(r, "run", {std::string("'") + extra.name + "'", "refusing"});
    for (const std::string& needle : extra.needles) EXPECT_NE(r.err.find(needle), std::string::npos) << needle << "\n" << r.err;
  }
  fs::path dir = fresh();
  Safetensors file = read_safetensors(dir / "model.safetensors");
  const uint64_t end = file.data.size();
  file.header["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {end, end + 16}}};
  file.data.append(16, '\0');
  write_safetensors(dir / "model.safetensors", file);
  RunResult r = run_model(dir);
  EXPECT_EQ(r.status, 0) << describe(r);
}

// A config.json with fewer layers than the checkpoint would run a truncated model.
TEST_F(CliErrors, CheckpointHasLayersPastTheConfig) {
  fs::path dir = fresh();
  json config = read_config(dir);
  const uint32_t layers = config["num_hidden_layers"].get<uint32_t>();
  config["num_hidden_layers"] = layers - 1;
  write_config(dir, config);
  expect_input_error(run_model(dir), "run", {"model.layers." + std::to_string(layers - 1) + ".", "num_hidden_layers " + std::to_string(layers - 1)});
}

// A sliding window does not cap the context: a Mistral model whose window is 4 positions runs a 6-token
// prompt (positions past the window slide) and its model line names the window; a Llama one ignores the
// key, as transformers does (its tokens are those of the config without it).
TEST_F(CliErrors, ASlidingWindowDoesNotCapTheContext) {
  fs::path dir = fresh();
  const std::vector<std::string> args = {"run", "--model", dir.string(), "--prompt-tokens", "1,2,3,4,5,6", "--max-new-tokens", "3",
                                         "--threads", "2"};
  const RunResult plain = run_cli(args);
  ASSERT_EQ(plain.status, 0) << describe(plain);
  json config = read_config(dir);
  config["sliding_window"] = 4;
  write_config(dir, config);
  const RunResult llama = run_cli(args);
  ASSERT_EQ(llama.status, 0) << describe(llama);
  // The text: the line after the model's (the timing lines below it vary).
  auto text_of = [](const std::string& out) {
    const size_t first = out.find('\n');
    return out.substr(first + 1, out.find('\n', first + 1) - first - 1);
  };
  EXPECT_EQ(text_of(llama.out), text_of(plain.out));
  EXPECT_FALSE(text_of(plain.out).empty());
  config["architectures"] = {"MistralForCausalLM"};
  config["model_type"] = "mistral";
  write_config(dir, config);
  const RunResult mistral = run_cli(args);
  EXPECT_EQ(mistral.status, 0) << describe(mistral);
  // The model line says so (and the Llama one does not).
  EXPECT_NE(mistral.out.find("(MistralForCausalLM, f32, 4 layers, sliding window 4)"), std::string::npos) << describe(mistral);
  EXPECT_EQ(llama.out.find("sliding window"), std::string::npos) << describe(llama);
}

// ---- flags --------------------------------------------------------------------------------------------

struct FlagCase {
  std::vector<std::string> args;
  std::string command;  // "" for the top-level `tilefire: error:`
  std::vector<std::string> needles;
};

void check_flag_cases(const std::vector<FlagCase>& cases) {
  for (const FlagCase& c : cases) {
    RunResult r = run_cli(c.args);
    SCOPED_TRACE(r.command);
    expect_input_error(r, c.command, {});
    for (const std::string& needle : c.needles) EXPECT_NE(r.err.find(needle), std::string::npos) << needle << "\n" << r.err;
  }
}

TEST(CliFlags, RunBadFlagsAndValues) {
  check_flag_cases({
      {{"run", "--frobnicate"}, "run", {"unknown flag '--frobnicate'", "--help"}},
      {{"run", "stray"}, "run", {"unknown argument 'stray'"}},
      {{"run", "--max-new-tokens"}, "run", {"--max-new-tokens", "needs a value"}},
      {{"run", "--json=1"}, "run", {"--json", "takes no value"}},
      {{"run", "--temperature", "-1"}, "run", {"--temperature", "[0, 100]", "'-1'"}},
      {{"run", "--temperature", "abc"}, "run", {"--temperature", "'abc'"}},
      {{"run", "--temperature", "nan"}, "run", {"--temperature", "'nan'"}},
      {{"run", "--top-p", "0"}, "run", {"--top-p", "'0'"}},
      {{"run", "--top-p", "1.5"}, "run", {"--top-p", "'1.5'"}},
      {{"run", "--top-k", "-1"}, "run", {"--top-k", "'-1'"}},
      {{"run", "--min-p", "2"}, "run", {"--min-p", "[0, 1]", "'2'"}},
      {{"run", "--presence-penalty", "3"}, "run", {"--presence-penalty", "[-2, 2]", "'3'"}},
      {{"run", "--frequency-penalty", "-2.5"}, "run", {"--frequency-penalty", "'-2.5'"}},
      {{"run", "--repetition-penalty", "0"}, "run", {"--repetition-penalty", "'0'"}},
      {{"run", "--logit-bias", "5"}, "run", {"--logit-bias expects TOKEN=BIAS pairs", "got '5'"}},
      {{"run", "--logit-bias", "5=2,x=1"}, "run", {"--logit-bias", "got the token 'x'"}},
      {{"run", "--logit-bias", "5=101"}, "run", {"--logit-bias", "got the bias '101'"}},
      {{"run", "--logit-bias", "9999=1"}, "run", {"--logit-bias", "names token 9999, outside the vocabulary of 512"}},
      {{"chat", "--model", "/tmp", "--min-p", "-1"}, "chat", {"--min-p", "'-1'"}},
      {{"run", "--threads", "0"}, "run", {"--threads", "[1, 256]", "'0'"}},
      {{"run", "--threads", "999"}, "run", {"--threads", "'999'"}},
      {{"run", "--prefill-chunk", "0"}, "run", {"--prefill-chunk", "[1, 128]", "'0'"}},
      {{"run", "--tp-timeout-ms", "100"}, "run", {"--tp-timeout-ms applies to --tp N of 2 or more"}},
      {{"bench", "--preset", "tiny", "--tp-timeout-ms", "100"}, "bench", {"--tp-timeout-ms applies to --tp N of 2 or more"}},
      {{"chat", "--model", "/nonexistent-tilefire-model"}, "chat", {"/nonexistent-tilefire-model: no such folder"}},
      {{"serve", "--chat-template", "/nonexistent-template.jinja"}, "serve", {"--chat-template: /nonexistent-template.jinja"}},
      {{"plan", "--model", "/tmp", "--preset", "tiny", "--tp", "2"}, "plan", {"give --model DIR or --preset NAME, not both"}},
      {{"inspect", "--model", "/tmp", "--preset", "tiny"}, "inspect", {"not both"}},
      {{"simulate", "--model", "/tmp", "--preset", "tiny"}, "simulate", {"not both"}},
      {{"simulate", "--preset", "tiny", "--threads", "2"}, "simulate", {"--threads applies to --device cpu"}},
      {{"serve", "--prefill-chunk", "129"}, "serve", {"--prefill-chunk", "'129'"}},
      {{"run", "--max-new-tokens", "-3"}, "run", {"--max-new-tokens", "integer", "'-3'"}},
      {{"run", "--max-new-tokens", "4x"}, "run", {"--max-new-tokens", "'4x'"}},
      {{"run", "--schedule", "fast"}, "run", {"--schedule", "dataflow or bsp", "'fast'"}},
      {{"run", "--policy", "lifo"}, "run", {"--policy", "'lifo'", "balanced", "critical-path"}},
      {{"run", "--prompt-tokens", "1,x,3"}, "run", {"--prompt-tokens", "'1,x,3'"}},
      {{"run", "--prompt-tokens", "1,,3"}, "run", {"--prompt-tokens", "'1,,3'"}},
      {{"run", "--prompt-tokens", "1,+2"}, "run", {"--prompt-tokens", "'1,+2'"}},
      {{"run", "--prompt-tokens", "1, -2"}, "run", {"--prompt-tokens", "'1, -2'"}},
      {{"run", "--prompt-tokens", "1 2"}, "run", {"--prompt-tokens", "'1 2'"}},
      {{"run", "--prompt-tokens", "99999"}, "run", {"99999", "vocabulary", "512"}},
      {{"run", "--prompt", ""}, "run", {"--prompt", "needs a value"}},
      {{"run", "--seed", "abc"}, "run", {"--seed", "'abc'"}},
      {{"run", "--logprobs", "1000000"}, "run", {"--logprobs", "'1000000'"}},
      {{"run", "--logprobs", "600"}, "run", {"--logprobs", "600", "512"}},
      {{"run", "--prompt", "hi", "--prompt-tokens", "1,2"}, "run", {"--prompt", "--prompt-tokens", "not both"}},
      {{"run", "--max-context", "4", "--prompt-tokens", "1,2,3,4,5"}, "run", {"5 tokens", "4", "--max-context"}},
      {{"run", "--max-context", "99999"}, "run", {"--max-context", "99999", "1024"}},
      {{"run", "--max-context", "32", "--kv-splits", "33"}, "run", {"--kv-splits", "33", "context of 32"}},
      // A valued flag followed by another flag forgot its value (the next flag is not taken for it).
      {{"run", "--model", "--max-new-tokens", "2"}, "run", {"--model needs a value", "--max-new-tokens", "--model=--max-new-tokens"}},
      {{"run", "--prompt", "--json"}, "run", {"--prompt needs a value", "--json"}},
      {{"run", "--model", "/nonexistent"}, "run", {"/nonexistent", "cannot open model folder", "config.json"}},
      {{"run", "--max-new-tokens", "1", "--trace", "/nonexistent/dir/trace.json"}, "run",
       {"--trace", "/nonexistent/dir/trace.json"}},
  });
}

// The backend flags: values, and flags of one backend given to the other. Where no GPU can run the
// megakernel (every CI machine), --backend cuda says why and exits 2.
// What a command prints must reach its destination: a standard output on a full disk (/dev/full) or
// closed fails the command naming it, not status 0 with the output lost; so does a --dot file there.
TEST(CliFlags, OutputThatCannotBeWrittenIsAnError) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  TempDir dir("cli-full");
  const std::string err = (dir.path() / "err").string();
  for (const std::string redirect : {">/dev/full", ">&-"}) {
    const std::string command = std::string(TILEFIRE_CLI_PATH) + " plan --preset tiny --tp 2 " + redirect + " 2>" + err;
    const int raw = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 1) << command << ": " << raw;
    EXPECT_NE(read_file_text(err).find("tilefire plan: error: writing the standard output failed"), std::string::npos)
        << command << ": " << read_file_text(err);
  }
  const RunResult dot = run_cli({"inspect", "--preset", "tiny", "--dot", "/dev/full"});
  EXPECT_EQ(dot.status, 2) << describe(dot);
  EXPECT_NE(dot.err.find("--dot: failed writing '/dev/full'"), std::string::npos) << dot.err;
}

TEST(CliFlags, BackendFlags) {
  std::vector<FlagCase> cases{
      {{"run", "--backend", "tpu"}, "run", {"--backend", "cpu or cuda", "'tpu'"}},
      {{"run", "--ctas", "4"}, "run", {"--ctas", "--backend cuda"}},
      {{"run", "--resident"}, "run", {"--resident", "--backend cuda"}},
      {{"bench", "--watchdog-ms", "10"}, "bench", {"--watchdog-ms", "--backend cuda"}},
      {{"run", "--backend", "cuda", "--threads", "2"}, "run", {"--threads", "--ctas"}},
      {{"run", "--backend", "cuda", "--ctas", "0"}, "run", {"--ctas", "'0'"}},
      {{"run", "--backend", "cuda", "--watchdog-ms", "x"}, "run", {"--watchdog-ms", "'x'"}},
      {{"run", "--step-deadline-ms", "100"}, "run", {"--step-deadline-ms applies to --backend cuda"}},
      {{"run", "--backend", "cuda", "--step-deadline-ms", "0"}, "run", {"--step-deadline-ms", "'0'"}},
      {{"run", "--backend", "cuda", "--stress-delay-us", "10"}, "run", {"--stress-delay-us applies to --backend cpu"}},
      {{"serve", "--stress-delay-us", "0"}, "serve", {"--stress-delay-us", "'0'"}},
      {{"run", "--stress-delay-us", "1000001"}, "run", {"--stress-delay-us", "'1000001'"}},
      {{"bench", "--stress-delay-us", "10"}, "bench", {"--stress-delay-us does not apply to bench"}},
      {{"run", "--tp", "3"}, "run", {"--tp 3", "8 query heads over 3 ranks"}},
      {{"run", "--tp", "0"}, "run", {"--tp", "'0'"}},
      {{"run", "--tp", "2", "--policy", "dynamic"}, "run", {"--policy dynamic cannot run with --tp"}},
      {{"run", "--tp", "2", "--backend", "cuda", "--resident"}, "run", {"--resident cannot run with --tp"}},
      {{"run", "--tp", "3", "--backend", "cuda"}, "run", {"--tp 3", "8 query heads over 3 ranks"}},
  };
  if (const std::string reason = CudaExecutor::unavailable_reason(); !reason.empty()) {
    cases.push_back({{"run", "--backend", "cuda", "--tp", "2"}, "run", {"--backend cuda", reason}});
    cases.push_back({{"run", "--backend", "cuda"}, "run", {"--backend cuda", reason}});
    cases.push_back({{"bench", "--backend", "cuda", "--preset", "tiny"}, "bench", {"--backend cuda", reason}});
  }
  check_flag_cases(cases);
}

TEST(CliFlags, PlanRefusesWithTheReason) {
  check_flag_cases({
      {{"plan", "--preset", "llama-3.1-8b", "--tp", "3"}, "plan", {"--tp 3", "32 query heads over 3 ranks", "remainder of 2"}},
      {{"plan", "--preset", "llama-3.1-8b", "--tp", "64"}, "plan", {"--tp 64", "32 query heads"}},
      {{"plan", "--tp", "2"}, "plan", {"--model DIR or --preset NAME"}},
      {{"plan", "--preset", "tiny"}, "plan", {"--tp N is required"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "80XB"}, "plan", {"--gpu-mem", "'80XB'", "80GiB"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "-1GiB"}, "plan", {"--gpu-mem", "'-1GiB'"}},
      {{"plan", "--model", "/nonexistent", "--tp", "2"}, "plan", {"/nonexistent", "config.json"}},
      {{"plan", "--preset", "huge", "--tp", "2"}, "plan", {"unknown preset 'huge'"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "1.5"}, "plan", {"--gpu-mem", "'1.5'", "unit"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "0x10GiB"}, "plan", {"--gpu-mem", "'0x10GiB'"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "1e-9GiB"}, "plan", {"--gpu-mem", "1MiB or more"}},
      {{"plan", "--preset", "tiny", "--tp", "2", "--kv-tokens", "4096"}, "plan", {"--kv-tokens 4096", "model's 1024"}},
      {{"plan", "--preset", "", "--tp", "2"}, "plan", {"--preset", "needs a value"}},
  });
}

TEST(CliFlags, InspectRefusesWithTheReason) {
  check_flag_cases({
      {{"inspect", "--preset", "small", "--device", "tpu"}, "inspect", {"--device", "'tpu'", "h200"}},
      {{"inspect", "--preset", "small", "--granularity", "layer"}, "inspect", {"--granularity", "'layer'", "tile, head or op"}},
      {{"inspect"}, "inspect", {"--model DIR or --preset NAME"}},
      {{"inspect", "--preset", "llama-3.1-8b", "--tp", "3"}, "inspect", {"--tp 3", "32 query heads"}},
      {{"inspect", "--preset", "tiny", "--dot", "/nonexistent/x.dot"}, "inspect", {"--dot", "/nonexistent/x.dot"}},
      {{"inspect", "--preset", "tiny", "--dot", "/tmp/tilefire-inspect.dot", "--dot-layer", "99"}, "inspect", {"--dot-layer 99"}},
      {{"inspect", "--preset", "tiny", "--rank", "5"}, "inspect", {"--rank 5", "--tp 1"}},
      {{"inspect", "--preset", "tiny", "--dot-layer", "1"}, "inspect", {"--dot-layer", "--dot FILE"}},
      {{"inspect", "--preset", "tiny", "--tokens", "64", "--context", "16"}, "inspect", {"--tokens 64", "--context 16"}},
      {{"inspect", "--model", "/etc/hostname"}, "inspect", {"/etc/hostname", "not a folder"}},
      {{"bench", "--dtype", "f16"}, "bench", {"--dtype", "--preset NAME"}},
      {{"bench", "--preset", "tiny", "--sweep-out", "x"}, "bench", {"--sweep-out", "--sweep"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--json"}, "bench", {"--json does not apply to --sweep"}},
      {{"bench", "--preset", "tiny", "--sweep", "threads", "--prompt-len", "100"}, "bench", {"--prompt-len does not apply to --sweep"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--bandwidth-mb", "64"}, "bench", {"--bandwidth-mb does not apply"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--compile-preset", "tiny"}, "bench", {"--compile-preset does not apply"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--batch", "2"}, "bench", {"--batch does not apply to --sweep"}},
      {{"bench", "--preset", "tiny", "--batch", "1"}, "bench", {"--batch", "'1'"}},
      {{"bench", "--preset", "tiny", "--batch", "257"}, "bench", {"--batch", "'257'"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--tp", "2", "--predict"}, "bench", {"--predict runs the cpu backend on one rank"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "9", "--predict"}, "bench", {"--predict does not apply to --join-prompt-len"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--predict", "--backend", "cuda"}, "bench", {"--predict runs the cpu backend"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--prompt-len", "4090", "--steps", "8"}, "bench", {"--prompt-len + --steps + 1"}},
      {{"bench", "--preset", "tiny", "--join-prompt-len", "300"}, "bench", {"--join-prompt-len applies to --batch B"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--prefill-chunks", "2"}, "bench", {"--prefill-chunks applies to --join-prompt-len"}},
      {{"bench", "--preset", "tiny", "--shared-prefix", "30"}, "bench", {"--shared-prefix applies to --batch B"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--shared-prefix", "30", "--steps", "4"}, "bench",
       {"--steps does not apply to --shared-prefix"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--shared-prefix", "30", "--predict"}, "bench",
       {"--predict does not apply to --shared-prefix"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--shared-prefix", "5000"}, "bench", {"--shared-prefix + 9", "exceeds the context of 1024"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--shared-prefix", "0"}, "bench", {"--shared-prefix", "'0'"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "9", "--shared-prefix", "30"}, "bench",
       {"--shared-prefix does not apply to --join-prompt-len"}},
      {{"bench", "--preset", "tiny", "--trace", "t.json"}, "bench", {"--trace applies to --batch B"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "9", "--trace", "t.json"}, "bench",
       {"--trace does not apply to --join-prompt-len"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "300", "--steps", "4"}, "bench",
       {"--steps does not apply to --join-prompt-len"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "300", "--prefill-chunks", "0"}, "bench",
       {"--prefill-chunks", "'0'"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "5000"}, "bench", {"--join-prompt-len + 1 exceeds"}},
      {{"bench", "--preset", "tiny", "--batch", "2", "--join-prompt-len", "300", "--prefill-chunk", "129"}, "bench",
       {"--prefill-chunk", "'129'"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--prefill-chunk", "16"}, "bench", {"--prefill-chunk does not apply to --sweep"}},
      {{"bench", "--preset", "tiny", "--sweep", ","}, "bench", {"--sweep takes policy, granularity and threads", "got ''"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy,"}, "bench", {"--sweep takes policy", "got ''"}},
      {{"bench", "--preset", "tiny", "--sweep", "policy", "--policy", "locality"}, "bench", {"--policy and --sweep policy"}},
      {{"bench", "--preset", "tiny", "--sweep", "granularity,threads", "--threads", "1"}, "bench", {"--threads and --sweep threads"}},
      {{"gen-model", "--preset", "tiny", "--out", "/tmp/tilefire-never-written", "--seed", " -1"}, "gen-model", {"--seed", "' -1'"}},
      {{"bench", "--preset", "tiny", "--seed", "+5"}, "bench", {"--seed", "'+5'"}},
      {{"bench", "--compile-preset", "nope"}, "bench", {"--compile-preset", "'nope'", "tiny"}},
  });
}

TEST(CliFlags, SimulateRefusesWithTheReason) {
  TempDir dir("cli-simulate-errors");
  // A device file: a valid device with `patch` merged in (a JSON merge patch: null deletes a key).
  auto device_file = [&](const std::string& name, const char* patch) {
    json device = {{"workers", 4}, {"memory_gbs", 100}, {"flops", 1e12}, {"dispatch_ns", 1}, {"signal_ns", 1}};
    device.merge_patch(json::parse(patch));
    const std::string path = (dir.path() / (name + ".json")).string();
    write_file_text(path, device.dump());
    return path;
  };
  const std::string list = (dir.path() / "list.json").string();
  write_file_text(list, "[1, 2]");
  const std::string bad = device_file("bad", R"({"flops": null})");
  const std::string many = device_file("many", R"({"workers": 4294967296})");
  const std::string slow = device_file("slow", R"({"memory_gbs": 1e-300})");
  const std::string f32_only = device_file("f32-only", R"({"flops": {"f32": 1e12}})");
  const std::string bad_dtype = device_file("fp8", R"({"flops": {"fp8": 1e12}})");
  const std::string no_peak = device_file("no-peak", R"({"flops": {}})");
  const std::string nested = device_file("nested", R"({"flops": {"bf16": {"dense": 1e12}}})");
  const std::string twice = device_file("twice", R"({"flops": {"bf16": 1e12, "bfloat16": 2e12}})");
  const std::string tight = device_file("tight", R"({"shared_memory_bytes": 1000})");
  const std::string typo = device_file("typo", R"({"shared_memory_byts": 1})");
  const std::string fraction = device_file("fraction", R"({"shared_memory_bytes": 100000.5})");
  const std::string negative = device_file("negative", R"({"workers": -1})");
  const std::string no_link = device_file("no-link", "{}");
  const std::string empty_trace = (dir.path() / "empty-trace.json").string();
  write_file_text(empty_trace, R"({"traceEvents": []})");
  check_flag_cases({
      {{"simulate", "--preset", "tiny", "--fit-trace", empty_trace}, "simulate", {"--fit-trace " + empty_trace + ": the trace lacks task 0"}},
      {{"simulate", "--preset", "tiny", "--batch", "300"}, "simulate", {"--batch", "'300'"}},
      {{"simulate", "--preset", "tiny", "--device", "tpu"}, "simulate", {"--device", "'tpu'", "cpu"}},
      {{"simulate", "--preset", "tiny", "--device", "/nonexistent.json"}, "simulate", {"/nonexistent.json", "cannot open"}},
      {{"simulate", "--preset", "tiny", "--threads", "2"}, "simulate", {"--threads", "cpu device"}},
      {{"simulate", "--preset", "tiny", "--policy", "lifo"}, "simulate", {"'lifo'"}},
      {{"simulate", "--preset", "tiny", "--device", list}, "simulate", {list, "JSON object"}},
      {{"simulate", "--preset", "tiny", "--device", many}, "simulate", {many, "'workers'", "4096"}},
      {{"simulate", "--preset", "tiny", "--device", slow}, "simulate", {slow, "'memory_gbs' must be at least"}},
      // A misspelt key would leave its default in place; a missing one is named as missing; a count is whole.
      {{"simulate", "--preset", "tiny", "--device", typo}, "simulate", {typo, "unknown key 'shared_memory_byts'", "shared_memory_bytes"}},
      {{"simulate", "--preset", "tiny", "--device", bad}, "simulate", {bad, "'flops' is missing"}},
      {{"simulate", "--preset", "tiny", "--device", fraction}, "simulate", {fraction, "'shared_memory_bytes' must be a whole number"}},
      {{"simulate", "--preset", "tiny", "--device", negative}, "simulate", {negative, "'workers' must be a whole number", "from 1 to 4096"}},
      // --tp's collectives cross a link: a device file must give one (0 on purpose for none).
      {{"simulate", "--preset", "tiny", "--tp", "2", "--device", no_link}, "simulate", {no_link, "no 'link_gbs'", "--tp 2"}},
      {{"simulate", "--preset", "tiny", "--tp", "2", "--rank", "2"}, "simulate", {"--rank 2 is not below --tp 2"}},
      {{"simulate", "--preset", "tiny", "--rank", "1"}, "simulate", {"--rank 1", "--tp 1"}},
      // More workers than cores: the cpu device is measured one worker per core.
      {{"simulate", "--preset", "tiny", "--device", "cpu", "--threads", "256"}, "simulate", {"--threads 256", "cores", "--fit-out"}},
      {{"simulate", "--preset", "tiny", "--dtype", "f8"}, "simulate", {"--dtype", "'f8'"}},
      // A peak per dtype, and none for the model's.
      {{"simulate", "--preset", "tiny", "--device", f32_only}, "simulate", {f32_only, "'flops' gives no peak for bf16"}},
      {{"simulate", "--preset", "tiny", "--device", bad_dtype}, "simulate", {bad_dtype, "f32, bf16 or f16", "'fp8'"}},
      {{"simulate", "--preset", "tiny", "--device", no_peak}, "simulate", {no_peak, "'flops' per dtype gives no peak"}},
      {{"simulate", "--preset", "tiny", "--device", nested}, "simulate", {nested, "'flops' of bf16", "a number"}},
      {{"simulate", "--preset", "tiny", "--device", twice}, "simulate", {twice, "gives bf16 twice"}},
      // A tile's workspace alone overflows the shared memory: the cuda executor would refuse the program.
      {{"simulate", "--preset", "tiny", "--device", tight}, "simulate", {tight, "bytes of shared memory, more than its 1000"}},
      {{"run", "--model", ""}, "run", {"--model", "needs a value"}},
  });
}

TEST(CliFlags, CommandsAndGenModel) {
  TempDir dir("cli-gen-errors");
  const std::string out = (dir.path() / "m").string();
  check_flag_cases({
      {{"frob"}, "", {"unknown command 'frob'", "run", "gen-model"}},
      {{"gen-model", "--out", out}, "gen-model", {"--preset", "required"}},
      {{"gen-model", "--preset", "tiny"}, "gen-model", {"--out", "required"}},
      {{"gen-model", "--preset", "huge", "--out", out}, "gen-model", {"unknown preset 'huge'", "tiny", "small"}},
      {{"gen-model", "--preset", "tiny", "--out", out, "--dtype", "f8"}, "gen-model", {"--dtype", "'f8'", "bf16"}},
      {{"gen-model", "--preset", "tiny", "--out", out, "--dtype"}, "gen-model", {"--dtype", "needs a value"}},
      {{"gen-model", "--preset", "tiny", "--out", out, "--seed", "-1"}, "gen-model", {"--seed", "'-1'"}},
      {{"bench", "--frob"}, "bench", {"unknown flag '--frob'"}},
  });
  EXPECT_FALSE(fs::exists(out)) << "a refused gen-model should write nothing";

  // No command at all: the usage on stderr, status 2.
  RunResult r = run_cli({});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("usage: tilefire"), std::string::npos) << r.err;
  // --help is not an error, and -h is --help for every command.
  r = run_cli({"run", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--max-new-tokens"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* command : {"run", "chat", "serve", "bench", "plan", "inspect", "simulate", "gen-model"}) {
    const RunResult help = run_cli({command, "--help"}), h = run_cli({command, "-h"});
    EXPECT_EQ(h.status, 0) << describe(h);
    EXPECT_EQ(h.out, help.out) << command;
    EXPECT_NE(help.out.find("usage: tilefire "), std::string::npos) << command << ": " << help.out;
  }
}

}  // namespace
}  // namespace tilefire::testing
