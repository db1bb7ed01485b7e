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
// measured; the rounds whose cpu device measured a busy machine, none to all three.
void expect_three_rounds_paired(const nlohmann::json& j, const char* measured_key) {
  ASSERT_TRUE(j["busy_rounds"].is_number_unsigned()) << j.dump();
  EXPECT_LE(j["busy_rounds"].get<uint32_t>(), 3u);
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
// prefilled whole or by the steps (apart from the decode step, and the first chunk in it). Not checked for speed; the figures must be positive, and prefilled whole,
// the decoding sequence's longest wait holds the newcomer's whole prefill (its time to first token).
TEST(CliBenchBatch, ReportsTheWaitOfAJoiningPromptBothWays) {
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "2", "--rounds", "1", "--join-prompt-len", "300",
                         "--prefill-chunks", "2", "--prefill-chunk", "64", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["join_prompt_len"], 300);
  EXPECT_EQ(j["prefill_chunks_per_step"], 2);
  EXPECT_EQ(j["prefill_chunk"], 64);
  for (const char* key : {"whole_longest_wait_ms", "whole_newcomer_ttft_ms", "chunked_longest_wait_ms", "chunked_newcomer_ttft_ms",
                          "in_step_longest_wait_ms", "in_step_newcomer_ttft_ms"})
    EXPECT_GT(j[key].get<double>(), 0) << key;
  EXPECT_GE(j["whole_longest_wait_ms"].get<double>(), j["whole_newcomer_ttft_ms"].get<double>())
      << "prefilled whole, the decoding sequence's wait holds all of the prompt's prefill";
  RunResult text = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--batch", "3", "--rounds", "1", "--join-prompt-len", "130"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("| whole, when it joins |"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("| 1 chunk(s) of 128 per step, after the decode step |"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("| 1 chunk(s) of 128 per step, the first in the decode step |"), std::string::npos) << text.out;
}

// tilefire bench --batch B --shared-prefix P: B requests of one P-token prefix, the later ones copying it
// from the first's cache, against each prefilled whole. Not checked for speed: the bookkeeping (every
// prompt whole once, the prefix once with reuse_prefix), positive times, and the first tokens compared.
TEST(CliBenchBatch, ReportsWhatASharedPrefixSaves) {
  RunResult r = run_cli({"bench", "--preset", "tiny", "--threads", "2", "--batch", "3", "--rounds", "2", "--shared-prefix", "140",
                         "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["shared_prefix"], 140);
  EXPECT_EQ(j["whole_prefilled_tokens"], 3 * (140 + 8));
  EXPECT_EQ(j["shared_prefilled_tokens"], 140 + 3 * 8) << "the prefix once, each request's own 8 tokens";
  EXPECT_EQ(j["compared_first_tokens"], 2 * 2) << "the requests that copied, each round";
  EXPECT_EQ(j["same_first_tokens"], j["compared_first_tokens"]) << "the sample's first tokens are no near ties";
  for (const char* key : {"whole_ms", "shared_ms", "speedup"}) EXPECT_GT(j[key].get<double>(), 0) << key;
  RunResult text = run_cli({"bench", "--preset", "tiny", "--threads", "1", "--batch", "2", "--rounds", "1", "--shared-prefix", "20"});
  ASSERT_EQ(text.status, 0) << describe(text);
  EXPECT_NE(text.out.find("| the prefix copied from the first (reuse_prefix) |"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("the same first token as prefilled whole in"), std::string::npos) << text.out;
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
  EXPECT_NE(r.out.find("over 2 ranks: 8 query heads, 2 KV heads (split)"), std::string::npos) << r.out;
  r = run_cli({"plan", "--preset", "tiny", "--tp", "1"});  // one rank splits nothing
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("over 1 rank: 8 query heads, 2 KV heads (on the one rank)"), std::string::npos) << r.out;
  // Sizes under a GiB in a unit that shows them (not "0.00 GiB").
  r = run_cli({"plan", "--preset", "tiny", "--tp", "2", "--gpu-mem", "1MiB"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("but a GPU has 1.00 MiB"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tilefire::testing
