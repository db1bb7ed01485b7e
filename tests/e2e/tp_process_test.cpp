// Tensor parallelism with one rank per process, over POSIX shared memory: two processes started with
// RANK / WORLD_SIZE / TILEFIRE_RENDEZVOUS, and two started by OpenMPI's mpirun, generate the tokens one
// rank does; a rank that never joins, or is killed mid-generation, makes the other stop within its
// timeout with an error naming it (exit status 3), never hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <nlohmann/json.hpp>

#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/cli_runner.h"
#include "tests/common/random_shapes.h"
#include "transport/nccl_windows.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

const std::vector<std::string> kRunArgs{"run", "--prompt-tokens", "5,6,7,8", "--max-new-tokens", "6", "--threads", "1", "--json"};

std::string command_line(const std::vector<std::string>& args) {
  std::string line = shell_quote(TILEFIRE_CLI_PATH);
  for (const std::string& arg : args) {
    line.push_back(' ');
    line.append(shell_quote(arg));
  }
  return line;
}

std::vector<int32_t> tokens_of(const std::string& json_text) {
  return nlohmann::json::parse(json_text)["tokens"].get<std::vector<int32_t>>();
}

struct RankResult {
  int status = -1;
  std::string out, err;
};

// Runs `script` (bash) in `dir`; rank r writes r<r>.out, r<r>.err and r<r>.status there.
std::vector<RankResult> run_ranks(const TempDir& dir, const std::string& script, uint32_t ranks) {
  const std::string line = "cd " + shell_quote(dir.path().string()) + " && timeout -k 5 120 bash -c " + shell_quote(script);
  EXPECT_EQ(std::system(line.c_str()) != -1, true);
  std::vector<RankResult> results(ranks);
  for (uint32_t r = 0; r < ranks; ++r) {
    const auto base = dir.path() / std::string("r").append(std::to_string(r));
    const std::string status = read_file_text(base.string() + ".status");
    results[r].status = status.empty() ? -1 : std::stoi(status);
    results[r].out = read_file_text(base.string() + ".out");
    results[r].err = read_file_text(base.string() + ".err");
  }
  return results;
}

std::string rank_command(uint32_t rank, uint32_t ranks, const std::string& meet, const std::vector<std::string>& args) {
  std::ostringstream line;
  line << "RANK=" << rank << " WORLD_SIZE=" << ranks << " TILEFIRE_RENDEZVOUS=" << meet << " " << command_line(args) << " >r"
       << rank << ".out 2>r" << rank << ".err; echo $? >r" << rank << ".status";
  return line.str();
}

std::vector<std::string> with(std::vector<std::string> args, std::initializer_list<std::string> more) {
  args.insert(args.end(), more);
  return args;
}

TEST(TensorParallelProcesses, TwoProcessesFromTheEnvironmentMatchOneRank) {
  RunResult single = run_cli(kRunArgs);
  ASSERT_EQ(single.status, 0) << describe(single);
  TempDir dir("tp-env");
  const std::string meet = "tp-env-" + std::to_string(getpid());
  const std::vector<std::string> args = with(kRunArgs, {"--tp", "2"});
  const auto results = run_ranks(dir, "(" + rank_command(1, 2, meet, args) + ") & " + rank_command(0, 2, meet, args) + "; wait", 2);
  ASSERT_EQ(results[0].status, 0) << results[0].err;
  ASSERT_EQ(results[1].status, 0) << results[1].err;
  EXPECT_EQ(tokens_of(results[0].out), tokens_of(single.out));
  EXPECT_TRUE(results[1].out.empty()) << "only rank 0 reports: " << results[1].out;
}

// A vocabulary and an FFN that two ranks split unevenly (257 / 256 and 321 / 320 rows): each process
// compiles its own rank's program, and both must come out with the same tasks (graph/shard.cpp).
TEST(TensorParallelProcesses, UnevenVocabularyAndFfnMatchOneRank) {
  ModelSpec spec = preset_spec("tiny");
  spec.vocab = 513;
  spec.ffn = 641;
  TempDir model("tp-uneven-model");
  write_test_model(spec, model.path());
  const std::vector<std::string> args = with(kRunArgs, {"--model", model.path().string()});
  RunResult single = run_cli(args);
  ASSERT_EQ(single.status, 0) << describe(single);
  TempDir dir("tp-uneven");
  const std::string meet = "tp-uneven-" + std::to_string(getpid());
  const std::vector<std::string> tp_args = with(args, {"--tp", "2"});
  const auto results =
      run_ranks(dir, "(" + rank_command(1, 2, meet, tp_args) + ") & " + rank_command(0, 2, meet, tp_args) + "; wait", 2);
  ASSERT_EQ(results[0].status, 0) << results[0].err;
  ASSERT_EQ(results[1].status, 0) << results[1].err;
  EXPECT_EQ(tokens_of(results[0].out), tokens_of(single.out));
}

// Random shapes and settings with 2 to 4 ranks (tests/common/random_shapes.h), one rank per process:
// each process takes rank 0's placement and checks its peers' program digests, so all agree. The same
// greedy tokens as one rank where the winner is clear, and the same top probabilities within 1e-4. Four
// cases (40 passed when this was written).
TEST(TensorParallelProcesses, RandomShapesMatchOneRank) {
  const uint64_t wanted = random_case_count(4);  // TILEFIRE_RANDOM_SHAPES=N: N tensor-parallel cases
  uint64_t cases = 0;
  for (uint64_t seed = 1; seed <= 50 * wanted && cases < wanted; ++seed) {
    const RandomCase c = draw_random_case(seed);
    if (c.options.tp == 1) continue;
    ++cases;
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + c.description);
    TempDir dir("tp-random-" + std::to_string(seed));
    write_test_model(c.spec, dir.path() / "model", c.dtype);
    std::string prompt;
    for (size_t i = 0; i < std::min<size_t>(c.prompt.size(), 24); ++i) {
      if (i > 0) prompt += ',';
      prompt += std::to_string(c.prompt[i]);
    }
    std::vector<std::string> args{"run", "--model", (dir.path() / "model").string(), "--prompt-tokens", prompt,
                                  "--max-new-tokens", "4", "--logprobs", "2", "--threads", "1", "--policy",
                                  c.options.policy, "--granularity", granularity_name(c.options.granularity), "--json"};
    if (c.options.kv_splits != 0) args = with(args, {"--kv-splits", std::to_string(c.options.kv_splits)});  // 0: the default
    RunResult single = run_cli(args);
    ASSERT_EQ(single.status, 0) << describe(single);
    const std::string meet = "tp-random-" + std::to_string(getpid()) + "-" + std::to_string(seed);
    const std::vector<std::string> tp_args = with(args, {"--tp", std::to_string(c.options.tp)});
    std::string script;
    for (uint32_t r = 1; r < c.options.tp; ++r) script.append("(").append(rank_command(r, c.options.tp, meet, tp_args)).append(") & ");
    script += rank_command(0, c.options.tp, meet, tp_args) + "; wait";
    const auto results = run_ranks(dir, script, c.options.tp);
    for (uint32_t r = 0; r < c.options.tp; ++r) ASSERT_EQ(results[r].status, 0) << "rank " << r << ": " << results[r].err;
    const nlohmann::json one = nlohmann::json::parse(single.out), ranks = nlohmann::json::parse(results[0].out);
    for (size_t i = 0; i < one["tokens"].size(); ++i) {
      const nlohmann::json& want = one["logprobs"][i];
      const nlohmann::json& got = ranks["logprobs"][i];
      for (size_t k = 0; k < 2; ++k)
        EXPECT_NEAR(got[k][1].get<double>(), want[k][1].get<double>(), 1e-4) << "position " << i << ", candidate " << k;
      if (want[0][1].get<double>() - want[1][1].get<double>() < 1e-3) break;  // a near tie may go either way
      ASSERT_EQ(ranks["tokens"][i], one["tokens"][i]) << "greedy token at position " << i;
    }
  }
  EXPECT_EQ(cases, wanted);
}

TEST(TensorParallelProcesses, MpirunTwoProcessesMatchOneRank) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed (scripts/install-deps installs openmpi-bin)";
  RunResult single = run_cli(kRunArgs);
  ASSERT_EQ(single.status, 0) << describe(single);
  TempDir dir("tp-mpirun");
  const std::string script = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 " +
                             command_line(with(kRunArgs, {"--tp", "2"})) + " >r0.out 2>r0.err; echo $? >r0.status";
  const auto results = run_ranks(dir, script, 1);
  ASSERT_EQ(results[0].status, 0) << results[0].err;
  EXPECT_EQ(tokens_of(results[0].out), tokens_of(single.out));  // one JSON line: rank 0's
}

// Batched decoding with one rank per process (bench --batch under mpirun): every process steps the same
// sequences, and rank 0 reports for the two.
TEST(TensorParallelProcesses, MpirunBatchedDecodingRunsAndRankZeroReports) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed (scripts/install-deps installs openmpi-bin)";
  TempDir dir("tp-mpirun-batch");
  const std::string script = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 " +
                             command_line({"bench", "--preset", "tiny", "--tp", "2", "--batch", "3", "--rounds", "2", "--steps", "4", "--json"}) +
                             " >r0.out 2>r0.err; echo $? >r0.status";
  const auto results = run_ranks(dir, script, 1);
  ASSERT_EQ(results[0].status, 0) << results[0].err;
  const nlohmann::json report = nlohmann::json::parse(results[0].out);  // one line: rank 0's
  EXPECT_EQ(report.at("tp"), 2);
  EXPECT_EQ(report.at("batch"), 3);
  EXPECT_GT(report.at("batch_step_ms").get<double>(), 0.0);
  EXPECT_GT(report.at("single_step_ms").get<double>(), 0.0);
}

// The `small` preset (bf16) under mpirun: the same greedy tokens as one rank, and bitwise the same
// probabilities in two runs.
TEST(TensorParallelProcesses, MpirunSmallPresetMatchesOneRankAndRepeats) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "mpirun is not installed (scripts/install-deps installs openmpi-bin)";
  TempDir dir("tp-mpirun-small");
  const std::string model = (dir.path() / "small").string();
  RunResult gen = run_cli({"gen-model", "--preset", "small", "--dtype", "bf16", "--out", model}, 120);
  ASSERT_EQ(gen.status, 0) << describe(gen);
  const std::vector<std::string> args{"run",       "--model", model, "--prompt-tokens", "11,12,13,14,15", "--max-new-tokens",
                                      "4",         "--logprobs", "3", "--threads",     "1",              "--json"};
  RunResult single = run_cli(args, 120);
  ASSERT_EQ(single.status, 0) << describe(single);
  nlohmann::json runs[2];
  for (int run = 0; run < 2; ++run) {
    const std::string script = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 " +
                               command_line(with(args, {"--tp", "2"})) + " >r0.out 2>r0.err; echo $? >r0.status";
    const auto results = run_ranks(dir, script, 1);
    ASSERT_EQ(results[0].status, 0) << results[0].err;
    runs[run] = nlohmann::json::parse(results[0].out);
  }
  EXPECT_EQ(runs[0]["tokens"], nlohmann::json::parse(single.out)["tokens"]);
  EXPECT_EQ(runs[0]["logprobs"], runs[1]["logprobs"]) << "two runs with --tp 2 differ";
}

TEST(TensorParallelProcesses, ARankThatNeverJoinsIsNamed) {
  TempDir dir("tp-never");
  const std::string meet = "tp-never-" + std::to_string(getpid());
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks(dir, rank_command(0, 2, meet, with(kRunArgs, {"--tp", "2", "--tp-timeout-ms", "500"})), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(results[0].status, 3) << results[0].err;
  EXPECT_EQ(results[0].err.rfind("tilefire run: transport error: rank 0 of 2", 0), 0u) << results[0].err;
  EXPECT_NE(results[0].err.find("rank(s) 1 never joined"), std::string::npos) << results[0].err;
}

// One rank per process on GPUs: a process rank on the cuda backend says what it lacks (NCCL 2.28 in this
// build, or a GPU), and on a GPU machine, where it can start, a peer that never joins is named.
TEST(TensorParallelProcesses, AProcessRankOnTheCudaBackendSaysWhatItLacksOrNamesTheMissingPeer) {
  TempDir dir("tp-cuda");
  const std::string meet = "tp-cuda-" + std::to_string(getpid());
  const std::vector<std::string> args{"run", "--prompt-tokens", "5,6", "--max-new-tokens", "2", "--backend", "cuda",
                                      "--tp", "2", "--tp-timeout-ms", "500"};
  const auto results = run_ranks(dir, rank_command(0, 2, meet, args), 1);
  const std::string& err = results[0].err;
  if (!NcclWindowGroup::built()) {
    EXPECT_EQ(results[0].status, 2) << err;
    EXPECT_NE(err.find("needs NCCL 2.28 with its device API"), std::string::npos) << err;
  } else if (const std::string reason = CudaExecutor::unavailable_reason(); !reason.empty()) {
    EXPECT_EQ(results[0].status, 2) << err;
    EXPECT_EQ(err.rfind("tilefire run: error: --backend cuda: " + reason, 0), 0u) << err;
  } else {
    EXPECT_EQ(results[0].status, 3) << err;
    EXPECT_NE(err.find("rank(s) 1 never joined"), std::string::npos) << err;
  }
}

TEST(TensorParallelProcesses, ARankKilledMidGenerationIsNamed) {
  TempDir dir("tp-killed");
  const std::string meet = "tp-killed-" + std::to_string(getpid());
  // The `small` preset, long enough (1000 tokens take far more than the two seconds) to be killed mid-run.
  const std::string model = (dir.path() / "small").string();
  RunResult gen = run_cli({"gen-model", "--preset", "small", "--dtype", "bf16", "--out", model}, 120);
  ASSERT_EQ(gen.status, 0) << describe(gen);
  const std::vector<std::string> args{"run",       "--model",   model, "--prompt-tokens", "5,6,7,8", "--max-new-tokens", "1000",
                                      "--max-context", "1024", "--threads", "1", "--tp", "2", "--tp-timeout-ms", "1000"};
  // Rank 1 (exec'd, so $! is its pid) is killed with SIGKILL two seconds in; rank 0 must stop with an
  // error naming it.
  const std::string script = "(RANK=1 WORLD_SIZE=2 TILEFIRE_RENDEZVOUS=" + meet + " exec " + command_line(args) +
                             " >r1.out 2>r1.err) & victim=$!; (" + rank_command(0, 2, meet, args) +
                             ") & sleep 2; kill -9 $victim; wait";
  const auto start = std::chrono::steady_clock::now();
  const auto results = run_ranks(dir, script, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(results[0].status, 3) << results[0].err;
  EXPECT_NE(results[0].err.find("for rank 1"), std::string::npos) << results[0].err;
  std::system(("rm -f /dev/shm/tilefire." + meet + ".*").c_str());  // the killed rank could not remove its segment
}

// tilefire chat reads its messages from standard input, which a launcher gives to rank 0 alone: with one
// rank per process it is refused, by every rank, saying why; before the model loads and the ranks meet,
// so a rank whose peer never starts is refused at once, not after the rendezvous times out.
TEST(TensorParallelProcesses, ChatWithProcessRanksIsRefused) {
  TempDir dir("tp-chat");
  const std::filesystem::path model = gen_tiny_model(dir, "tiny-chat");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  write_file_text(model / "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}");
  const std::string meet = "tp-chat-" + std::to_string(getpid());
  const std::vector<std::string> args{"chat", "--model", model.string(), "--threads", "1", "--tp", "2"};
  const auto results = run_ranks(dir, "(" + rank_command(1, 2, meet, args) + ") & " + rank_command(0, 2, meet, args) + "; wait", 2);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(results[rank].status, 2) << "rank " << rank << ": " << results[rank].err;
    EXPECT_NE(results[rank].err.find("standard input reaches rank 0 only"), std::string::npos) << results[rank].err;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto alone = run_ranks(dir, rank_command(0, 2, meet + "-alone", with(args, {"--tp-timeout-ms", "60000"})), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << "a lone rank waited for its peer";
  EXPECT_EQ(alone[0].status, 2) << alone[0].err;
  EXPECT_NE(alone[0].err.find("standard input reaches rank 0 only"), std::string::npos) << alone[0].err;
}

// Ranks started by a launcher without --tp: each would run the whole model alone, so the command is
// refused naming the --tp to give. RANK and WORLD_SIZE without TILEFIRE_RENDEZVOUS are some other
// launcher's (a torchrun job's, say): the run goes on as one rank.
TEST(TensorParallelProcesses, LauncherRanksWithoutTpAreRefused) {
  TempDir dir("tp-no-flag");
  const std::string meet = "tp-no-flag-" + std::to_string(getpid());
  const auto refused = run_ranks(dir, rank_command(0, 2, meet, kRunArgs), 1);
  EXPECT_EQ(refused[0].status, 2) << refused[0].err;
  EXPECT_NE(refused[0].err.find("--tp) is 1, but 2 ranks were started (environment)"), std::string::npos) << refused[0].err;
  EXPECT_NE(refused[0].err.find("give --tp 2"), std::string::npos) << refused[0].err;
  const auto foreign = run_ranks(dir, "RANK=0 WORLD_SIZE=2 " + command_line(kRunArgs) + " >r0.out 2>r0.err; echo $? >r0.status", 1);
  EXPECT_EQ(foreign[0].status, 0) << foreign[0].err;
  EXPECT_EQ(tokens_of(foreign[0].out).size(), 6u);
}

}  // namespace
}  // namespace tilefire::testing
