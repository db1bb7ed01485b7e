// `tilefire run` as a user meets it when things go right: the text and timing line, one JSON object,
// logprobs, a Chrome trace that shows the dataflow overlap, and gen-model folders that load and agree
// with the built-in sample.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


TEST(CliRun, TextAndTimingLine) {
  RunResult r = run_cli({"run", "--max-new-tokens", "4", "--threads", "2"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_NE(r.out.find("Once upon a time"), std::string::npos) << r.out;  // the default prompt, echoed
  EXPECT_NE(r.out.find("2 threads"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("time to first token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("time per output token"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
}

TEST(CliRun, JsonIsOneObjectWithAllKeys) {
  json result = run_json({"--max-new-tokens", "4", "--threads", "2"});
  for (const char* key : {"prompt_tokens", "tokens", "logprobs", "ttft_ms", "tpot_ms", "decode_tok_s", "tasks_per_step",
                          "events_per_step", "compile_ms"}) {
    EXPECT_TRUE(result.contains(key)) << "missing key " << key << " in " << result.dump();
  }
  ASSERT_TRUE(result["tokens"].is_array());
  EXPECT_EQ(result["tokens"].size(), 4u);
  for (const json& t : result["tokens"]) EXPECT_TRUE(t.is_number_integer() && t.get<int64_t>() >= 0 && t.get<int64_t>() < 512);
  const std::string prompt = "Once upon a time";
  EXPECT_EQ(result["prompt_tokens"].get<std::vector<int32_t>>(), std::vector<int32_t>(prompt.begin(), prompt.end()));
  EXPECT_TRUE(result["logprobs"].is_array() && result["logprobs"].empty());
  for (const char* key : {"ttft_ms", "tpot_ms", "decode_tok_s", "compile_ms"}) {
    EXPECT_TRUE(result[key].is_number() && result[key].get<double>() >= 0.0) << key << " = " << result[key];
  }
  EXPECT_GT(result["ttft_ms"].get<double>(), 0.0);
  EXPECT_GT(result["tasks_per_step"].get<int64_t>(), 0);
  EXPECT_GT(result["events_per_step"].get<int64_t>(), 0);

  // Greedy decoding is deterministic across runs, thread counts and schedules.
  EXPECT_EQ(tokens_of(run_json({"--max-new-tokens", "4", "--threads", "1"})), tokens_of(result));
  EXPECT_EQ(tokens_of(run_json({"--max-new-tokens", "4", "--threads", "2", "--schedule", "bsp"})), tokens_of(result));
}

TEST(CliRun, PromptTokensAndSampling) {
  json result = run_json({"--prompt-tokens", "1,2,3", "--max-new-tokens", "3", "--threads", "2"});
  EXPECT_EQ(result["prompt_tokens"], json::array({1, 2, 3}));
  // Blanks around the ids, as a pasted Python list has them.
  EXPECT_EQ(run_json({"--prompt-tokens", " 1, 2 ,3", "--max-new-tokens", "1"})["prompt_tokens"], json::array({1, 2, 3}));
  EXPECT_EQ(result["tokens"].size(), 3u);
  // The same seed gives the same sample.
  const std::vector<std::string> sampled = {"--max-new-tokens", "6", "--temperature", "1.5", "--top-p", "0.9", "--seed", "7"};
  EXPECT_EQ(tokens_of(run_json(sampled)), tokens_of(run_json(sampled)));
}

// The logit flags change the choice as asked: a bias of 100 makes greedy take that token every time (the
// sample's logits span far less), a -100 bias on it and on what it would take instead leaves others, and
// the penalties run (each checked against a reference in prefill_decode_test).
TEST(CliRun, LogitBiasAndPenaltiesSteerTheChoice) {
  const std::vector<std::string> prompt = {"--prompt-tokens", "1,2,3", "--max-new-tokens", "4", "--threads", "1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), prompt.begin(), prompt.end());
    return tokens_of(run_json(extra));
  };
  EXPECT_EQ(with({"--logit-bias", "77=100"}), std::vector<int32_t>(4, 77));
  const std::vector<int32_t> plain = with({});
  const std::vector<int32_t> avoided = with({"--logit-bias", std::to_string(plain[0]) + "=-100,77=-100"});
  ASSERT_EQ(avoided.size(), 4u);
  for (int32_t token : avoided) {
    EXPECT_NE(token, plain[0]);
    EXPECT_NE(token, 77);
  }
  // Negative presence and frequency penalties with a bias toward 77 on a repeat-free start: 77 stays.
  EXPECT_EQ(with({"--logit-bias", "77=30", "--presence-penalty", "-2", "--frequency-penalty", "-2", "--repetition-penalty", "0.5"}),
            std::vector<int32_t>(4, 77));
  EXPECT_EQ(with({"--temperature", "0.8", "--min-p", "1", "--seed", "3"}), plain) << "min-p 1 keeps only the most probable";
}

// A flag given twice takes its last value: scripts/demo puts its own --max-new-tokens before the user's.
TEST(CliRun, ARepeatedFlagTakesItsLastValue) {
  json result = run_json({"--max-new-tokens", "5", "--prompt-tokens", "9,9", "--threads", "2", "--prompt-tokens", "1,2,3",
                          "--max-new-tokens", "2"});
  EXPECT_EQ(result["prompt_tokens"], json::array({1, 2, 3}));
  EXPECT_EQ(result["tokens"].size(), 2u);
  EXPECT_EQ(tokens_of(result), tokens_of(run_json({"--prompt-tokens", "1,2,3", "--max-new-tokens", "2", "--threads", "2"})));
}

TEST(CliRun, Logprobs) {
  json result = run_json({"--max-new-tokens", "3", "--threads", "2", "--logprobs", "3"});
  ASSERT_TRUE(result["logprobs"].is_array());
  ASSERT_EQ(result["logprobs"].size(), 3u) << result["logprobs"].dump();
  for (size_t i = 0; i < result["logprobs"].size(); ++i) {
    const json& position = result["logprobs"][i];
    ASSERT_TRUE(position.is_array());
    ASSERT_EQ(position.size(), 3u) << position.dump();
    double previous = 2.0;
    for (const json& pair : position) {
      ASSERT_TRUE(pair.is_array() && pair.size() == 2) << pair.dump();
      ASSERT_TRUE(pair[0].is_number_integer()) << pair.dump();
      EXPECT_GE(pair[0].get<int64_t>(), 0);
      EXPECT_LT(pair[0].get<int64_t>(), 512);
      const double p = pair[1].get<double>();
      EXPECT_GT(p, 0.0) << pair.dump();
      EXPECT_LE(p, 1.0) << pair.dump();
      EXPECT_LE(p, previous) << "not descending: " << position.dump();
      previous = p;
    }
    // Greedy: the generated token is the most probable one.
    EXPECT_EQ(position[0][0], result["tokens"][i]) << position.dump();
  }
}

// ---- trace ----------------------------------------------------------------------------------------------

struct Slice {
  std::string name, op;
  int64_t tid = 0, node = -1, layer = -1;
  double begin = 0, end = 0;
};

std::vector<Slice> read_slices(const fs::path& path, std::string* problem) {
  json trace;
  try {
    trace = json::parse(read_file_text(path));
  } catch (const json::exception& e) {
    *problem = std::string("trace is not valid JSON: ") + e.what();
    return {};
  }
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array()) {
    *problem = "trace has no traceEvents array";
    return {};
  }
  std::vector<Slice> slices;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    Slice s;
    s.name = e.value("name", "");
    s.op = s.name.substr(0, s.name.find(' '));
    s.tid = e.value("tid", int64_t(-1));
    s.begin = e.value("ts", 0.0);
    s.end = s.begin + e.value("dur", 0.0);
    if (e.contains("args") && e["args"].is_object()) {
      s.node = e["args"].value("node", int64_t(-1));
      s.layer = e["args"].value("layer", int64_t(-1));
    }
    slices.push_back(s);
  }
  return slices;
}

// A slice of one op overlapping, on another worker, a slice of the op right after (or before) it in the graph.
bool find_overlap(const std::vector<Slice>& slices, std::string* example) {
  for (const Slice& a : slices) {
    for (const Slice& b : slices) {
      if (a.tid == b.tid || a.op == b.op) continue;
      const bool consecutive = a.node >= 0 && b.node == a.node + 1;
      if (consecutive && a.begin < b.end && b.begin < a.end) {
        *example = "'" + a.name + "' (tid " + std::to_string(a.tid) + ") overlaps '" + b.name + "' (tid " +
                   std::to_string(b.tid) + ")";
        return true;
      }
    }
  }
  return false;
}

TEST(CliRun, TraceShowsDataflowOverlap) {
  TempDir dir("cli-trace");
  const fs::path path = dir.path() / "trace.json";
  // Overlap of consecutive ops on different workers is a timing matter: a decode step of `tiny` on two
  // threads shows it in most runs, not all. Take the first of up to 5 runs that shows it.
  std::string example;
  int runs = 0;
  bool overlapped = false;
  while (!overlapped && runs < 5) {
    ++runs;
    fs::remove(path);
    RunResult r = run_cli({"run", "--max-new-tokens", "4", "--threads", "2", "--trace", path.string()});
    ASSERT_EQ(r.status, 0) << describe(r);
    ASSERT_TRUE(fs::exists(path)) << describe(r);
    EXPECT_NE(r.out.find(path.string()), std::string::npos) << "the trace path should be reported\n" << r.out;
    std::string problem;
    std::vector<Slice> slices = read_slices(path, &problem);
    ASSERT_TRUE(problem.empty()) << problem;
    ASSERT_FALSE(slices.empty()) << "no \"ph\":\"X\" slices";

    std::set<int64_t> tids;
    bool qkv_l0 = false;
    for (const Slice& s : slices) {
      tids.insert(s.tid);
      EXPECT_GE(s.end, s.begin) << s.name;
      qkv_l0 |= s.name.rfind("qkv_projection L0 [", 0) == 0;
    }
    EXPECT_TRUE(qkv_l0) << "no 'qkv_projection L0 [...' slice; first slice: " << slices.front().name;
    EXPECT_GE(tids.size(), 2u) << "with --threads 2 both workers should run tasks";
    overlapped = find_overlap(slices, &example);
  }
  EXPECT_TRUE(overlapped) << "no two consecutive ops overlapped on different workers in " << runs << " runs";
  std::printf("[ trace ] overlap seen on run %d of up to 5: %s\n", runs, example.c_str());
}

// ---- gen-model folders -----------------------------------------------------------------------------------

class CliGenModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RunResult r = run_cli({"run", "--max-new-tokens", "5", "--threads", "2", "--json"});
    ASSERT_EQ(r.status, 0) << describe(r);
    builtin_tokens_ = new std::vector<int32_t>(tokens_of(json::parse(r.out)));
  }
  static void TearDownTestSuite() {
    delete builtin_tokens_;
    builtin_tokens_ = nullptr;
  }
  static fs::path gen(const TempDir& dir, const std::string& name, std::vector<std::string> extra) {
    return gen_tiny_model(dir, name, extra);
  }
  static std::vector<int32_t>* builtin_tokens_;
};

std::vector<int32_t>* CliGenModel::builtin_tokens_ = nullptr;

TEST_F(CliGenModel, F32FolderMatchesBuiltInSample) {
  TempDir dir("cli-gen-f32");
  const fs::path model = gen(dir, "tiny-f32", {"--seed", "0"});
  EXPECT_TRUE(fs::exists(model / "model.safetensors"));
  json result = run_json({"--model", model.string(), "--max-new-tokens", "5", "--threads", "2"});
  ASSERT_EQ(builtin_tokens_->size(), 5u);
  EXPECT_EQ(tokens_of(result), *builtin_tokens_) << "gen-model --preset tiny --seed 0 should be the built-in sample";
  EXPECT_EQ(result.value("model", ""), model.string());
  // Another seed is another model.
  const fs::path other = gen(dir, "tiny-seed1", {"--seed", "1"});
  EXPECT_NE(tokens_of(run_json({"--model", other.string(), "--max-new-tokens", "5", "--threads", "2"})), *builtin_tokens_);
}

TEST_F(CliGenModel, ShardedFolderMatchesBuiltInSample) {
  TempDir dir("cli-gen-sharded");
  const fs::path model = gen(dir, "tiny-sharded", {"--shard-mb", "1"});
  EXPECT_TRUE(fs::exists(model / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(model / "model.safetensors"));
  json result = run_json({"--model", model.string(), "--max-new-tokens", "5", "--threads", "2"});
  EXPECT_EQ(tokens_of(result), *builtin_tokens_);
}

// gen-model into a folder that holds another layout's weights replaces them: a single file left beside a
// new index would shadow it (the loader, like transformers, takes model.safetensors first), and shards of
// another count are clutter. The folder's other files stay.
TEST_F(CliGenModel, AnotherLayoutReplacesTheEarlierWeights) {
  TempDir dir("cli-gen-replace");
  const fs::path model = gen(dir, "tiny", {"--seed", "5"});
  write_file_text(model / "notes.txt", "mine");
  gen(dir, "tiny", {"--shard-mb", "1"});
  EXPECT_FALSE(fs::exists(model / "model.safetensors"));
  EXPECT_TRUE(fs::exists(model / "notes.txt"));
  EXPECT_EQ(tokens_of(run_json({"--model", model.string(), "--max-new-tokens", "5", "--threads", "2"})), *builtin_tokens_)
      << "the run took the earlier seed-5 weights";
  gen(dir, "tiny", {"--shard-mb", "2"});  // fewer shards: the earlier run's extra ones go
  uint32_t shards = 0;
  for (const auto& entry : fs::directory_iterator(model)) shards += entry.path().filename().string().rfind("model-", 0) == 0;
  const json index = json::parse(read_file_text(model / "model.safetensors.index.json"));
  std::set<std::string> listed;
  for (const auto& [tensor, shard] : index["weight_map"].items()) listed.insert(shard.get<std::string>());
  EXPECT_EQ(shards, listed.size());
  gen(dir, "tiny", {});
  EXPECT_FALSE(fs::exists(model / "model.safetensors.index.json"));
  shards = 0;
  for (const auto& entry : fs::directory_iterator(model)) shards += entry.path().filename().string().rfind("model-", 0) == 0;
  EXPECT_EQ(shards, 0u);
  EXPECT_EQ(tokens_of(run_json({"--model", model.string(), "--max-new-tokens", "5", "--threads", "2"})), *builtin_tokens_);

  // Weights gen-model did not write (a real checkpoint there, or --out . inside one) are refused before
  // anything is written: nothing of the user's is overwritten, deleted or shadowed.
  std::string bytes = read_file_text(model / "model.safetensors");
  const size_t mark = bytes.find("tilefire gen-model");
  ASSERT_NE(mark, std::string::npos) << "gen-model leaves its mark in the metadata";
  bytes.replace(mark, 18, "someone else's one");
  write_file_text(model / "model.safetensors", bytes);
  const std::string config_before = read_file_text(model / "config.json");
  RunResult refused = run_cli({"gen-model", "--preset", "tiny", "--out", model.string(), "--shard-mb", "1", "--seed", "3"});
  EXPECT_EQ(refused.status, 2) << describe(refused);
  EXPECT_NE(refused.err.find("holds model.safetensors, which gen-model did not write"), std::string::npos) << refused.err;
  EXPECT_EQ(read_file_text(model / "model.safetensors"), bytes);
  EXPECT_EQ(read_file_text(model / "config.json"), config_before);
  EXPECT_FALSE(fs::exists(model / "model.safetensors.index.json"));
  // Nor a config.json without gen-model's weights beside it (another model's, its weights elsewhere).
  fs::remove(model / "model.safetensors");
  RunResult config_alone = run_cli({"gen-model", "--preset", "tiny", "--out", model.string()});
  EXPECT_EQ(config_alone.status, 2) << describe(config_alone);
  EXPECT_NE(config_alone.err.find("holds a config.json without weights gen-model wrote beside it"), std::string::npos) << config_alone.err;
  EXPECT_EQ(read_file_text(model / "config.json"), config_before);
}

TEST_F(CliGenModel, Bf16AndF16FoldersRun) {
  TempDir dir("cli-gen-bf16");
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    const fs::path model = gen(dir, std::string("tiny-") + dtype, {"--dtype", dtype});
    json result = run_json({"--model", model.string(), "--max-new-tokens", "5", "--threads", "2"});
    EXPECT_EQ(tokens_of(result).size(), 5u);
    // The text output names the dtype the weights are stored in.
    RunResult r = run_cli({"run", "--model", model.string(), "--max-new-tokens", "2", "--threads", "2"});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_NE(r.out.find(dtype), std::string::npos) << r.out;
  }
}

// --tp 2 runs two ranks as thread groups and generates the tokens one rank does.
TEST(CliTensorParallel, TwoRanksGenerateTheSameTokens) {
  const std::vector<std::string> args{"run", "--prompt-tokens", "5,6,7,8", "--max-new-tokens", "6", "--json"};
  RunResult one = run_cli(args);
  std::vector<std::string> two_args = args;
  two_args.insert(two_args.end(), {"--tp", "2"});
  RunResult two = run_cli(two_args);
  ASSERT_EQ(one.status, 0) << describe(one);
  ASSERT_EQ(two.status, 0) << describe(two);
  const nlohmann::json a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(two.out);
  EXPECT_EQ(b["tp"], 2);
  EXPECT_EQ(a["tokens"], b["tokens"]);
}

// tilefire inspect: the program's shape adds up, the critical path is a chain through every layer, and
// --dot writes a Graphviz graph of one layer.
TEST(CliInspect, ShapeCriticalPathAndDot) {
  TempDir dir("cli-inspect");
  const std::string dot = (dir.path() / "layer1.dot").string();
  RunResult r = run_cli({"inspect", "--preset", "small", "--device", "h100", "--json", "--dot", dot, "--dot-layer", "1"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "h100");
  EXPECT_EQ(j["workers"], 132);
  uint64_t tasks = 0;
  for (const auto& op : j["ops"]) tasks += op["tasks"].get<uint64_t>();
  EXPECT_EQ(tasks, j["tasks"].get<uint64_t>());
  uint64_t layer_tasks = 0;
  for (const auto& layer : j["layers"]) layer_tasks += layer["tasks"].get<uint64_t>();
  EXPECT_EQ(layer_tasks, j["tasks"].get<uint64_t>());
  // small has 8 layers; a token's path crosses at least qkv, attention, O, gate/up and down in each
  EXPECT_GE(j["critical_path_tasks"].get<uint32_t>(), 8u * 5);
  EXPECT_GT(j["critical_path_ns"].get<double>(), 0.0);
  // 132 workers against small's KV heads: decode attention is split over the KV positions, then merged
  EXPECT_EQ(j["critical_path_ops"]["attention_chunk"], 8);
  EXPECT_EQ(j["critical_path_ops"]["attention_merge"], 8);
  const std::string graph = read_file_text(dot);
  EXPECT_EQ(graph.rfind("digraph layer_1 {", 0), 0u) << graph.substr(0, 80);
  EXPECT_NE(graph.find("attention_merge"), std::string::npos);
  EXPECT_NE(graph.find(" -> "), std::string::npos);
  // --kv-splits 1: one attention tile per head group, no merge
  RunResult unsplit = run_cli({"inspect", "--preset", "small", "--device", "h100", "--json", "--kv-splits", "1"});
  ASSERT_EQ(unsplit.status, 0) << describe(unsplit);
  const nlohmann::json u = nlohmann::json::parse(unsplit.out);
  EXPECT_EQ(u["critical_path_ops"]["causal_attention"], 8);
  EXPECT_FALSE(u["critical_path_ops"].contains("attention_merge"));
}

// tilefire simulate: the report's keys, a device description from a file, the trace in the run's format,
// and the bound never above the predicted step.
TEST(CliSimulate, JsonDeviceFileAndTrace) {
  TempDir dir("cli-simulate");
  const std::string device = (dir.path() / "device.json").string(), trace = (dir.path() / "sim.json").string();
  write_file_text(device, R"({"name": "half-h200", "workers": 66, "memory_gbs": 2400, "flops": 5e14, "dispatch_ns": 400, "signal_ns": 800,
                               "prefetch_bytes": 65536, "prefetch_tasks": 0, "stall_ns": 20000, "stall_every_ns": 1e6})");
  RunResult r = run_cli({"simulate", "--preset", "small", "--device", device, "--json", "--trace", trace});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "half-h200");
  EXPECT_EQ(j["workers"], 66);
  EXPECT_EQ(j["prefetch_bytes"], 65536);
  EXPECT_EQ(j["prefetch_tasks"], 0);
  EXPECT_EQ(j["stall_ns"], 20000);
  EXPECT_EQ(j["stall_every_ns"], 1e6);
  for (const char* key : {"step_ms", "bound_ms", "bound_share", "bsp_ratio", "idle_share"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["step_ms"].get<double>(), 0.0);
  EXPECT_LE(j["bound_ms"].get<double>(), j["step_ms"].get<double>() * 1.000001);
  EXPECT_GE(j["idle_share"].get<double>(), 0.0);
  // Idle time per worker: one entry per worker, each within the step, their mean the idle share.
  ASSERT_EQ(j["idle_ms_per_worker"].size(), 66u);
  double idle_sum = 0;
  for (const auto& idle : j["idle_ms_per_worker"]) {
    EXPECT_GE(idle.get<double>(), 0.0);
    EXPECT_LE(idle.get<double>(), j["step_ms"].get<double>());
    idle_sum += idle.get<double>();
  }
  EXPECT_NEAR(idle_sum / 66 / j["step_ms"].get<double>(), j["idle_share"].get<double>(), 1e-9);
  const nlohmann::json events = nlohmann::json::parse(read_file_text(trace));
  EXPECT_FALSE(events["traceEvents"].empty());
  // A prefetch over part of a task is not a count of tasks.
  write_file_text(device, R"({"workers": 66, "memory_gbs": 2400, "flops": 5e14, "dispatch_ns": 400, "signal_ns": 800, "prefetch_tasks": 1.5})");
  r = run_cli({"simulate", "--preset", "small", "--device", device});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("'prefetch_tasks'"), std::string::npos) << describe(r);
  // Worker speeds are relative: read as given over their mean, one per worker or refused.
  write_file_text(device, R"({"workers": 2, "memory_gbs": 100, "flops": 1e12, "dispatch_ns": 100, "signal_ns": 300,
                              "worker_speed": [3, 1]})");
  r = run_cli({"simulate", "--preset", "tiny", "--device", device, "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json speeds = nlohmann::json::parse(r.out)["worker_speed"];
  ASSERT_EQ(speeds.size(), 2u);
  EXPECT_DOUBLE_EQ(speeds[0].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(speeds[1].get<double>(), 0.5);
  write_file_text(device, R"({"workers": 2, "memory_gbs": 100, "flops": 1e12, "dispatch_ns": 100, "signal_ns": 300,
                              "worker_speed": [1]})");
  r = run_cli({"simulate", "--preset", "tiny", "--device", device});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("'worker_speed' must be an array of one speed per worker (2)"), std::string::npos) << describe(r);
  // A worker cannot stall for (almost) all the time between its stalls, nor stall with no period, nor
  // have a period of next to nothing (the closed forms' arithmetic would overflow to NaN).
  for (const char* stalls : {R"("stall_ns": 5000, "stall_every_ns": 5000)", R"("stall_ns": 4999, "stall_every_ns": 5000)",
                             R"("stall_ns": 100)", R"("stall_ns": 1e-310, "stall_every_ns": 3e-310)"}) {
    write_file_text(device, std::string(R"({"workers": 66, "memory_gbs": 2400, "flops": 5e14, "dispatch_ns": 400, "signal_ns": 800, )") +
                                stalls + "}");
    r = run_cli({"simulate", "--preset", "small", "--device", device});
    EXPECT_EQ(r.status, 2) << stalls << ": " << describe(r);
    EXPECT_NE(r.err.find("'stall_ns' must be at most 0.99 of 'stall_every_ns', which must be at least 1 ns"), std::string::npos)
        << describe(r);
  }
  // Speeds: positive numbers from 0.001 to 1000.
  for (const char* speeds : {"[1, 0]", "[1, \"fast\"]", "[1, 5000]"}) {
    write_file_text(device, std::string(R"({"workers": 2, "memory_gbs": 100, "flops": 1e12, "dispatch_ns": 100, "signal_ns": 300, "worker_speed": )") +
                                speeds + "}");
    r = run_cli({"simulate", "--preset", "tiny", "--device", device});
    EXPECT_EQ(r.status, 2) << speeds << ": " << describe(r);
    EXPECT_NE(r.err.find("each of 'worker_speed' must be a number from 0.001 to 1000"), std::string::npos) << describe(r);
  }
}

// simulate --device cpu: the device measured here, with the workers asked for; every figure it measured
// positive and finite, and the simulated step no faster than its own bound (bytes over that bandwidth).
TEST(CliSimulate, MeasuredCpuDevice) {
  RunResult r = run_cli({"simulate", "--preset", "tiny", "--device", "cpu", "--threads", "2", "--context", "18", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["workers"], 2);
  for (const char* key : {"memory_gbs", "flops", "step_ms", "bound_ms"}) {
    const double value = j[key].get<double>();
    EXPECT_TRUE(std::isfinite(value) && value > 0) << key << " = " << value;
  }
  for (const char* key : {"dispatch_ns", "signal_ns", "stall_ns", "stall_every_ns"}) {
    const double value = j[key].get<double>();
    EXPECT_TRUE(std::isfinite(value) && value >= 0) << key << " = " << value;
  }
  // Each worker's speed measured, relative to their mean.
  ASSERT_EQ(j["worker_speed"].size(), 2u);
  EXPECT_NEAR(j["worker_speed"][0].get<double>() + j["worker_speed"][1].get<double>(), 2.0, 1e-9);
  // Stalls measured (or none seen): a stall shorter than the time between two.
  if (j["stall_every_ns"].get<double>() > 0) {
    EXPECT_LT(j["stall_ns"].get<double>(), j["stall_every_ns"].get<double>());
  }
  EXPECT_LE(j["bound_ms"].get<double>(), j["step_ms"].get<double>() * 1.000001);
}

// simulate --fit-trace: a decode step traced by `run --trace` (the built-in sample: tiny in f32, two
// workers) fitted by a device of the same workers; the fitted figures positive and finite, the traced
// step the trace's span, the fitted device written as a file --device reads. A device of other workers
// compiles another program, and another weight dtype moves other bytes: the fit refuses both, naming the
// flags to give.
TEST(CliSimulate, FitsTheDeviceToATracedStep) {
  TempDir dir("cli-fit");
  const std::string trace = (dir.path() / "step.json").string(), base = (dir.path() / "base.json").string(),
                    fitted = (dir.path() / "fitted.json").string(), other = (dir.path() / "three.json").string();
  RunResult traced = run_cli({"run", "--threads", "2", "--prompt-tokens", "1,2,3,4,5,6,7,8", "--max-new-tokens", "3", "--trace", trace});
  ASSERT_EQ(traced.status, 0) << describe(traced);
  write_file_text(base, R"({"name": "two-cores", "workers": 2, "memory_gbs": 20, "flops": 1e11, "dispatch_ns": 10, "signal_ns": 200})");
  RunResult r = run_cli({"simulate", "--preset", "tiny", "--dtype", "f32", "--device", base, "--kv-splits", "1", "--context", "10",
                         "--fit-trace", trace, "--fit-out", fitted, "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json fit = nlohmann::json::parse(r.out)["fit"];
  const nlohmann::json events = nlohmann::json::parse(read_file_text(trace))["traceEvents"];
  double first = 1e300, last = -1e300;
  for (const auto& e : events)
    if (e.value("ph", "") == "X") first = std::min(first, e["ts"].get<double>()), last = std::max(last, e["ts"].get<double>() + e["dur"].get<double>());
  EXPECT_NEAR(fit["traced_step_ms"].get<double>(), (last - first) * 1e-3, 1e-9);
  for (const char* key : {"fitted_step_ms", "memory_gbs"}) {
    const double value = fit[key].get<double>();
    EXPECT_TRUE(std::isfinite(value) && value > 0) << key << " = " << value;
  }
  for (const char* key : {"dispatch_ns", "signal_ns"}) {
    const double value = fit[key].get<double>();
    EXPECT_TRUE(std::isfinite(value) && value >= 0) << key << " = " << value;
  }
  EXPECT_GT(fit["dispatch_samples"].get<int>() + fit["signal_samples"].get<int>(), 0);
  RunResult again = run_cli({"simulate", "--preset", "tiny", "--dtype", "f32", "--device", fitted, "--kv-splits", "1", "--json"});
  ASSERT_EQ(again.status, 0) << describe(again);
  EXPECT_EQ(nlohmann::json::parse(again.out)["device"], "two-cores-fitted");
  EXPECT_NEAR(nlohmann::json::parse(again.out)["memory_gbs"].get<double>(), fit["memory_gbs"].get<double>(), 1e-6 * fit["memory_gbs"].get<double>());

  write_file_text(other, R"({"workers": 3, "memory_gbs": 20, "flops": 1e11, "dispatch_ns": 10, "signal_ns": 200})");
  RunResult mismatch = run_cli({"simulate", "--preset", "tiny", "--dtype", "f32", "--device", other, "--kv-splits", "1", "--fit-trace", trace});
  EXPECT_NE(mismatch.status, 0);
  EXPECT_NE(mismatch.err.find("give simulate the flags of the traced run"), std::string::npos) << mismatch.err;
  // The same tasks with bf16 weights (simulate's default for a preset): the trace's f32 step is refused,
  // not fitted as a slow bf16 one.
  RunResult dtype = run_cli({"simulate", "--preset", "tiny", "--device", base, "--kv-splits", "1", "--context", "10", "--fit-trace", trace});
  EXPECT_EQ(dtype.status, 2) << describe(dtype);
  EXPECT_NE(dtype.err.find("ran f32 weights and this program has bf16"), std::string::npos) << dtype.err;
  EXPECT_NE(dtype.err.find("--dtype f32"), std::string::npos) << dtype.err;
  RunResult alone = run_cli({"simulate", "--preset", "tiny", "--fit-out", fitted});
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.err.find("--fit-out needs --fit-trace"), std::string::npos) << alone.err;
}

// A traced step with a figure no run writes is refused by name (found by tests/e2e/input_fuzz_test.cpp):
// a tid of 2^32 - 1 crashed the fit, one past 32 bits wrapped onto worker 0, and a time near 1e306 us
// gave an infinite step printed as null with exit 0. A slice whose "ph" is not a string is no task.
TEST(CliSimulate, RefusesATraceWithFiguresNoRunWrites) {
  TempDir dir("cli-fit-bad");
  const std::string trace = (dir.path() / "step.json").string(), base = (dir.path() / "base.json").string(),
                    edited = (dir.path() / "edited.json").string();
  RunResult traced = run_cli({"run", "--threads", "2", "--prompt-tokens", "1,2,3", "--max-new-tokens", "3", "--trace", trace});
  ASSERT_EQ(traced.status, 0) << describe(traced);
  write_file_text(base, R"({"workers": 2, "memory_gbs": 20, "flops": 1e11, "dispatch_ns": 10, "signal_ns": 200})");
  const nlohmann::json valid = nlohmann::json::parse(read_file_text(trace));
  size_t first_task = 0;
  while (valid["traceEvents"][first_task].value("ph", "") != "X") ++first_task;
  const std::vector<std::pair<std::string, nlohmann::json>> edits{{"tid", 4294967295ull}, {"tid", 4294967296ull},
                                                                  {"ts", 1e306},          {"dur", 1e306},
                                                                  {"ph", 7}};
  const std::vector<std::string> expected{"the trace has worker 4294967295", "which is no worker", "within 1e12", "within 1e12",
                                          "the trace lacks task"};
  for (size_t i = 0; i < edits.size(); ++i) {
    nlohmann::json document = valid;
    document["traceEvents"][first_task][edits[i].first] = edits[i].second;
    write_file_text(edited, document.dump());
    RunResult r = run_cli({"simulate", "--preset", "tiny", "--dtype", "f32", "--device", base, "--kv-splits", "1", "--context", "5",
                           "--fit-trace", edited});
    EXPECT_EQ(r.status, 2) << edits[i].first << " = " << edits[i].second << ": " << describe(r);
    EXPECT_NE(r.err.find(expected[i]), std::string::npos) << r.err;
  }
}

// A GPU device's shared memory holds the kernel's weight stages beside the tiles' workspace: 6 of 32 KiB
// at the Llama-3.2-1B shape, 5 at the 8B shape's wider FFN rows (megakernel/kernel_layout.h), and what a
// waiting CTA fetches ahead is that ring. A device file may give a peak per weight dtype.
TEST(CliSimulate, GpuWeightStagesAndPeaksPerDtype) {
  auto simulate = [](std::vector<std::string> args) {
    args.insert(args.begin(), "simulate");
    args.push_back("--json");
    RunResult r = run_cli(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json one_b = simulate({"--preset", "llama-3.2-1b", "--device", "h200"});
  EXPECT_EQ(one_b["weight_stages"], 6);
  EXPECT_EQ(one_b["weight_stage_bytes"], 32768);
  EXPECT_EQ(one_b["prefetch_bytes"], 6 * 32768);
  EXPECT_EQ(one_b["flops"], 989e12);
  const nlohmann::json eight_b = simulate({"--preset", "llama-3.1-8b", "--device", "h200"});
  EXPECT_EQ(eight_b["weight_stages"], 5);
  EXPECT_EQ(eight_b["prefetch_bytes"], 5 * 32768);
  EXPECT_EQ(simulate({"--preset", "tiny", "--dtype", "f32", "--device", "h200"})["flops"], 67e12);  // CUDA cores
  TempDir dir("cli-simulate-gpu");
  const std::string device = (dir.path() / "small-gpu.json").string();
  write_file_text(device, R"({"workers": 16, "memory_gbs": 500, "flops": {"bf16": 5e14, "f32": 3e13}, "dispatch_ns": 100,
                               "signal_ns": 200, "shared_memory_bytes": 100000, "prefetch_tasks": 0})");
  const nlohmann::json file_f32 = simulate({"--preset", "tiny", "--dtype", "f32", "--device", device});
  EXPECT_EQ(file_f32["flops"], 3e13);
  EXPECT_EQ(file_f32["weight_stages"], 2);  // 100000 bytes less tiny's few KB of workspace: 2 stages
  EXPECT_EQ(simulate({"--preset", "tiny", "--device", device})["flops"], 5e14);
  // Shared memory for the tiles but not for two stages: nothing fetched ahead, and a slower step.
  const std::string cramped = (dir.path() / "cramped-gpu.json").string();
  write_file_text(cramped, R"({"workers": 16, "memory_gbs": 500, "flops": 5e14, "dispatch_ns": 100, "signal_ns": 200,
                                "shared_memory_bytes": 40000, "prefetch_tasks": 0})");
  const nlohmann::json none = simulate({"--preset", "tiny", "--device", cramped});
  EXPECT_EQ(none["weight_stages"], 0);
  EXPECT_GT(none["step_ms"].get<double>(), simulate({"--preset", "tiny", "--device", device})["step_ms"].get<double>());
  RunResult text = run_cli({"simulate", "--preset", "tiny", "--device", cramped});
  EXPECT_NE(text.out.find("waiting prefetches nothing"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("0 weight stages"), std::string::npos) << text.out;
}

// simulate --batch B: B sequences' decode tokens in one step. On the H200 model the weights are read once
// for all of them: the bound and the step grow (KV caches, and each tile's input rows: the model charges
// every activation read at memory bandwidth), but a step of 8 takes far less than 8 steps of one.
TEST(CliSimulate, BatchSharesTheWeights) {
  auto simulate = [](const char* batch) {
    RunResult r = run_cli({"simulate", "--preset", "llama-3.2-1b", "--context", "256", "--batch", batch, "--json"});
    EXPECT_EQ(r.status, 0) << describe(r);
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json one = simulate("1"), eight = simulate("8");
  const double bound_one = one["bound_ms"].get<double>(), bound_eight = eight["bound_ms"].get<double>();
  EXPECT_GT(bound_eight, bound_one);
  EXPECT_LT(bound_eight, 2 * bound_one);
  EXPECT_GT(eight["step_ms"].get<double>(), one["step_ms"].get<double>());
  EXPECT_LT(eight["step_ms"].get<double>(), 2 * one["step_ms"].get<double>());
}

// tilefire bench --batch B: B sequences per step against one, on one engine. The figures are not checked
// for speed (a benchmark's job), only for what they must be: positive, and the rates and the gain
// consistent with the step times they come from.
TEST(CliBenchBatch, ReportsBothWidthsAndTheGain) {
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "3", "--rounds", "2", "--steps", "3", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["batch"], 3);
  EXPECT_EQ(j["rounds"], 2);
  const double single = j["single_step_ms"].get<double>(), batch = j["batch_step_ms"].get<double>();
  ASSERT_GT(single, 0);
  ASSERT_GT(batch, 0);
  EXPECT_NEAR(j["single_tok_s"].get<double>(), 1000.0 / single, 1e-9 * 1000.0 / single);
  EXPECT_NEAR(j["batch_tok_s"].get<double>(), 3000.0 / batch, 1e-9 * 3000.0 / batch);
  const double gain = j["throughput_gain"].get<double>();
  EXPECT_GT(gain, 0);
  EXPECT_LE(j["throughput_gain_quartiles"][0].get<double>(), gain);
  EXPECT_GE(j["throughput_gain_quartiles"][1].get<double>(), gain);
  RunResult text = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--batch", "2", "--rounds", "1", "--steps", "2"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("| 2 |"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("throughput of 2 sequences per step over one"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("model preset tiny (bf16, seed 0) on cpu"), std::string::npos) << "the dtype named once: " << text.out;
}

// bench --batch B --trace FILE: a Perfetto trace of a step of B sequences, whose tasks are the batched
// program's, as simulate --batch B lays out the same program (the two side by side).
TEST(CliBenchBatch, TracesAStepOfTheBatch) {
  TempDir dir("bench-batch-trace");
  const std::string path = (dir.path() / "batch.json").string();
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "3", "--rounds", "1", "--steps", "2", "--json",
                         "--trace", path});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(nlohmann::json::parse(r.out)["trace"], path);
  const std::string simulated = (dir.path() / "simulated.json").string();
  RunResult sim = run_cli({"simulate", "--preset", "tiny", "--device", "cpu", "--threads", "2", "--batch", "3", "--trace", simulated});
  ASSERT_EQ(sim.status, 0) << describe(sim);
  auto task_slices = [](const std::string& file) {
    const nlohmann::json trace = nlohmann::json::parse(read_file_text(file));
    std::vector<std::string> names;
    for (const nlohmann::json& e : trace["traceEvents"])
      if (e.value("ph", "") == "X") names.push_back(e["name"].get<std::string>());
    std::sort(names.begin(), names.end());
    return names;
  };
  const std::vector<std::string> traced = task_slices(path);
  EXPECT_GT(traced.size(), 100u);
  EXPECT_EQ(traced, task_slices(simulated)) << "the traced step and the simulated one are not the same program's tasks";

  // The traced step fitted (its 3 sequences at about their context: 8 prompt tokens and two decode
  // steps) by a device of the same two workers. Without --batch the program has the same tasks over one
  // row each: refused, by the step's tokens the trace records.
  const std::string base = (dir.path() / "two.json").string();
  write_file_text(base, R"({"name": "two-cores", "workers": 2, "memory_gbs": 20, "flops": 1e11, "dispatch_ns": 10, "signal_ns": 200})");
  RunResult fit = run_cli({"simulate", "--preset", "tiny", "--device", base, "--kv-splits", "1", "--batch", "3", "--context", "10",
                           "--fit-trace", path, "--json"});
  ASSERT_EQ(fit.status, 0) << describe(fit);
  const nlohmann::json fitted = nlohmann::json::parse(fit.out)["fit"];
  for (const char* key : {"traced_step_ms", "fitted_step_ms", "memory_gbs"}) {
    const double value = fitted[key].get<double>();
    EXPECT_TRUE(std::isfinite(value) && value > 0) << key << " = " << value;
  }
  RunResult one = run_cli({"simulate", "--preset", "tiny", "--device", base, "--kv-splits", "1", "--context", "10", "--fit-trace", path});
  EXPECT_EQ(one.status, 2) << describe(one);
  EXPECT_NE(one.err.find("the traced step ran 3 token(s)"), std::string::npos) << one.err;
  EXPECT_NE(one.err.find("give simulate --batch 3"), std::string::npos) << one.err;
}

// A bench --predict object of three rounds: one prediction per round and one measured step (`measured`),
// positive and finite; the median prediction, and the ratio and its quartiles the rounds' own predicted /
// measured.
void expect_three_rounds_paired(const nlohmann::json& j, const char* measured_key) {
  const std::vector<double> predicted = j["predicted_round_ms"].get<std::vector<double>>();
  const std::vector<double> measured = j[measured_key].get<std::vector<double>>();
  ASSERT_EQ(predicted.size(), 3u);
  ASSERT_EQ(measured.size(), 3u);
  std::vector<double> ratios;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::isfinite(predicted[i]) && predicted[i] > 0) << predicted[i];
    EXPECT_TRUE(std::isfinite(measured[i]) && measured[i] > 0) << measured[i];
    ratios.push_back(predicted[i] / measured[i]);
  }
  std::sort(ratios.begin(), ratios.end());
  EXPECT_DOUBLE_EQ(j["predicted_over_measured"].get<double>(), ratios[1]);
  EXPECT_DOUBLE_EQ(j["predicted_over_measured_quartiles"][0].get<double>(), ratios[0]);
  EXPECT_DOUBLE_EQ(j["predicted_over_measured_quartiles"][1].get<double>(), ratios[2]);
  std::vector<double> sorted = predicted;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_DOUBLE_EQ(j["predicted_step_ms"].get<double>(), sorted[1]);
}

// tilefire bench --batch B --predict: the simulator's prediction of each round's batched step, the cpu
// device measured just before it. As for bench --predict, what is checked is that the simulated step is
// the timed one (B tokens, the engine's workers, the timed steps' mean context) and the bookkeeping.
TEST(CliBenchBatch, PredictPairsEachRoundsBatchedStepWithTheSimulator) {
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "3", "--rounds", "3", "--steps", "3", "--predict", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("simulated")) << j.dump();
  EXPECT_EQ(j["simulated"]["tokens_per_step"], 3);
  EXPECT_EQ(j["simulated"]["workers"], j["threads"]);
  EXPECT_EQ(j["simulated"]["context"], 8 + 2);  // prompts of 8; the timed steps attend to 9, 10 and 11 positions
  EXPECT_EQ(j["simulated"]["model"], "preset tiny (bf16)");
  expect_three_rounds_paired(j, "batch_round_ms");
  RunResult text = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--batch", "2", "--rounds", "1", "--steps", "2", "--predict"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("simulated step of 2 sequences"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("predicted / measured"), std::string::npos) << text.out;
}

// tilefire bench --batch B --join-prompt-len P: what a long prompt joining costs the sequences decoding,
// prefilled whole or by the steps. Not checked for speed; the figures must be positive, and prefilled whole,
// the decoding sequence's longest wait holds the newcomer's whole prefill (its time to first token).
TEST(CliBenchBatch, ReportsTheWaitOfAJoiningPromptBothWays) {
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "2", "--rounds", "1", "--join-prompt-len", "300",
                         "--prefill-chunks", "2", "--prefill-chunk", "64", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["join_prompt_len"], 300);
  EXPECT_EQ(j["prefill_chunks_per_step"], 2);
  EXPECT_EQ(j["prefill_chunk"], 64);
  for (const char* key : {"whole_longest_wait_ms", "whole_newcomer_ttft_ms", "chunked_longest_wait_ms", "chunked_newcomer_ttft_ms"})
    EXPECT_GT(j[key].get<double>(), 0) << key;
  EXPECT_GE(j["whole_longest_wait_ms"].get<double>(), j["whole_newcomer_ttft_ms"].get<double>())
      << "prefilled whole, the decoding sequence's wait holds all of the prompt's prefill";
  RunResult text = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--batch", "3", "--rounds", "1", "--join-prompt-len", "130"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("| whole, when it joins |"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("| 1 chunk(s) of 128 per step |"), std::string::npos) << text.out;
}

// tilefire bench --sweep: one row per cell in the CSV and the Markdown table, each with its bsp ratio.
TEST(CliBenchSweep, OneRowPerCell) {
  TempDir dir("cli-sweep");
  const std::string prefix = (dir.path() / "grid").string();
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--sweep", "granularity", "--rounds", "1", "--steps", "2",
                         "--sweep-out", prefix});
  ASSERT_EQ(r.status, 0) << describe(r);
  const std::string csv = read_file_text(prefix + ".csv");
  EXPECT_EQ(csv.rfind("policy,granularity,threads,dataflow_ms,bsp_ms,bsp_over_dataflow\n", 0), 0u) << csv;
  EXPECT_NE(csv.find("balanced,tile,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("balanced,head,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("balanced,op,1,"), std::string::npos) << csv;
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_NE(read_file_text(prefix + ".md").find("| balanced | op | 1 |"), std::string::npos);
  RunResult bad = run_cli({"bench", "--preset", "tiny", "--sweep", "colour"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--sweep takes policy, granularity and threads"), std::string::npos) << bad.err;
}

// tilefire bench --predict: the simulator's prediction of each round's dataflow step, with the cpu device
// measured before the round in the same process. The figures are timings, so what is checked is that
// the simulated program is the timed one (its workers and tasks against the engine's own counts, the
// context the timed steps' mean, the model named) and the bookkeeping: one prediction per round,
// positive and finite, and the reported ratio the median of the rounds' own predicted / measured.
TEST(CliBench, PredictPairsEachRoundWithTheSimulator) {
  auto bench = [](std::vector<std::string> extra) {
    std::vector<std::string> args{"bench", "--threads", "2", "--rounds", "3", "--steps", "2", "--bandwidth-mb", "64", "--predict", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    RunResult r = run_cli(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const nlohmann::json j = bench({});
  ASSERT_TRUE(j.contains("predicted_round_ms")) << j.dump();
  EXPECT_EQ(j["simulated"]["workers"], j["threads"]);
  EXPECT_EQ(j["simulated"]["tasks_per_step"], j["tasks_per_step"]);
  EXPECT_EQ(j["simulated"]["context"], 8 + 2 + 1);  // prompt 8, an untimed step, steps at 10 and 11 positions
  EXPECT_EQ(j["simulated"]["model"], "preset tiny (f32)");  // the built-in sample
  expect_three_rounds_paired(j, "dataflow_round_ms");

  // Another preset, dtype, policy and granularity: the same program simulated.
  const nlohmann::json other = bench({"--preset", "tiny", "--dtype", "bf16", "--policy", "critical-path", "--granularity", "op"});
  ASSERT_TRUE(other.contains("simulated")) << other.dump();
  EXPECT_EQ(other["simulated"]["model"], "preset tiny (bf16)");
  EXPECT_EQ(other["simulated"]["tasks_per_step"], other["tasks_per_step"]);

  RunResult text = run_cli({"bench", "--threads", "2", "--rounds", "1", "--steps", "1", "--bandwidth-mb", "64", "--predict"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("predicted / measured"), std::string::npos) << text.out;
  for (std::vector<std::string> flags : {std::vector<std::string>{"--tp", "2"}, {"--sweep", "policy"}, {"--backend", "cuda"}}) {
    std::vector<std::string> args{"bench", "--predict"};
    args.insert(args.end(), flags.begin(), flags.end());
    RunResult refused = run_cli(args);
    EXPECT_EQ(refused.status, 2) << describe(refused);
    EXPECT_NE(refused.err.find("--predict runs the cpu backend on one rank"), std::string::npos) << refused.err;
  }
}

// config.json's torch_dtype is often wrong. simulate and inspect plan a checkpoint as its config.json
// says (no weights needed), or in the dtype --dtype gives: a bf16 folder whose config says float32 is
// simulated as the f32 preset without it (twice the weight bytes, a higher bound) and as the bf16 preset
// with it (the same bound).
TEST_F(CliGenModel, DtypeOverridesACheckpointsConfig) {
  TempDir dir("cli-sim-dtype");
  const fs::path model = gen(dir, "tiny-bf16", {"--dtype", "bf16"});
  nlohmann::json config = nlohmann::json::parse(read_file_text((model / "config.json").string()));
  config["torch_dtype"] = "float32";
  write_file_text((model / "config.json").string(), config.dump());
  auto bound = [](std::vector<std::string> args) {
    args.insert(args.begin(), "simulate");
    for (const char* a : {"--device", "h200", "--context", "64", "--json"}) args.push_back(a);
    RunResult r = run_cli(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    return r.status == 0 ? nlohmann::json::parse(r.out)["bound_ms"].get<double>() : 0.0;
  };
  const double as_config_says = bound({"--model", model.string()});
  EXPECT_DOUBLE_EQ(as_config_says, bound({"--preset", "tiny", "--dtype", "f32"}));
  const double as_given = bound({"--model", model.string(), "--dtype", "bf16"});
  EXPECT_DOUBLE_EQ(as_given, bound({"--preset", "tiny", "--dtype", "bf16"}));
  EXPECT_LT(as_given, as_config_says);
  RunResult inspected = run_cli({"inspect", "--model", model.string(), "--dtype", "bf16"});
  EXPECT_EQ(inspected.status, 0) << describe(inspected);
}

// tilefire plan: per-rank heads and memory as JSON, and a verdict against --gpu-mem.
TEST(CliPlan, JsonPerRankAndVerdict) {
  RunResult r = run_cli({"plan", "--preset", "llama-3.1-8b", "--tp", "8", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["tp"], 8);
  EXPECT_EQ(plan["kv_replicas"], 1);
  EXPECT_TRUE(plan["fits"].get<bool>());
  ASSERT_EQ(plan["ranks"].size(), 8u);
  EXPECT_EQ(plan["ranks"][3]["q_heads"], nlohmann::json({12, 16}));
  EXPECT_EQ(plan["ranks"][3]["kv_heads"], nlohmann::json({3, 4}));
  EXPECT_EQ(plan["ranks"][0]["exchanged_bytes_per_token_layer"], 2 * 7 * 4096 * 4);

  r = run_cli({"plan", "--preset", "llama-3.1-8b", "--tp", "16", "--gpu-mem", "2GiB", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json tight = nlohmann::json::parse(r.out);
  EXPECT_EQ(tight["kv_replicas"], 2);
  EXPECT_FALSE(tight["fits"].get<bool>());
  EXPECT_NE(tight["verdict"].get<std::string>().find("does not fit"), std::string::npos);

  r = run_cli({"plan", "--preset", "tiny", "--tp", "2"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("verdict: fits"), std::string::npos) << r.out;
  // Sizes under a GiB in a unit that shows them (not "0.00 GiB").
  r = run_cli({"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "1MiB"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("but a GPU has 1.00 MiB"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tilefire::testing
