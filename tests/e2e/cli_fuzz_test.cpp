// The command line under mutation: valid command lines of every command, each with a few seeded edits (a
// value swapped for an extreme or malformed one, a token dropped, a flag repeated, a flag of another
// command or an unknown one added, two tokens exchanged). Whatever the edit, `tilefire` ends within the
// time limit with status 0, or with status 2 and one error line naming the command; never an internal
// error (1), a signal, a hang, or a run so long that it meets the limit. TILEFIRE_FUZZ_SCALE=K runs K
// times as many cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "tests/common/cli_runner.h"
#include "tests/common/input_mutator.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

// Values a flag's parser may not expect.
const char* const kOddValues[] = {"0",   "-1",  "4294967296", "18446744073709551616", "1e400", "nan", "inf", "",
                                  "abc", "1.5", "0x10",       " 3",                   "3 ",    "1,,2", ",",  "-0",
                                  "99999999999999999999999999", "1e-40", "2147483648", "65537", "1,2,-3", "--json"};

// Flags of every command, for one command to be handed another's.
const char* const kFlags[] = {"--threads", "--tp",      "--max-new-tokens", "--prompt-tokens", "--context", "--batch",
                              "--steps",   "--rounds",  "--kv-splits",      "--max-context",   "--logprobs", "--top-k",
                              "--top-p",   "--temperature", "--seed",       "--granularity",   "--policy",  "--gpu-mem",
                              "--kv-tokens", "--workers", "--tokens",       "--dtype",         "--prompt-len", "--shard-mb",
                              "--bandwidth-mb", "--tp-timeout-ms", "--watchdog-ms", "--step-deadline-ms", "--prompt", "--device", "--min-p",
                              "--logit-bias", "--repetition-penalty", "--presence-penalty", "--frequency-penalty", "--bogus"};

TEST(CliFuzz, EveryMutatedCommandLineRunsOrIsRefused) {
  TempDir dir("cli-fuzz");
  const std::string out = (dir.path() / "out").string();
  const std::vector<std::vector<std::string>> valid{
      {"run", "--threads", "2", "--prompt-tokens", "1,2,3", "--max-new-tokens", "3"},
      {"run", "--threads", "2", "--prompt", "hi", "--max-new-tokens", "2", "--policy", "critical-path", "--granularity", "head",
       "--schedule", "bsp", "--logprobs", "2", "--temperature", "0.7", "--top-k", "5", "--top-p", "0.9", "--seed", "3", "--json", "--min-p", "0.05", "--logit-bias", "5=2,9=-1",
       "--repetition-penalty", "1.1", "--presence-penalty", "0.3", "--frequency-penalty", "-0.2"},
      {"run", "--tp", "2", "--threads", "2", "--max-new-tokens", "2", "--max-context", "64", "--kv-splits", "2"},
      {"bench", "--threads", "2", "--steps", "3", "--rounds", "1", "--prompt-len", "4"},
      {"plan", "--preset", "llama-3.2-1b", "--tp", "2", "--gpu-mem", "80GiB", "--kv-tokens", "4096"},
      {"inspect", "--preset", "tiny", "--granularity", "head", "--workers", "4", "--tokens", "3", "--json"},
      {"simulate", "--preset", "tiny", "--device", "h200", "--batch", "2", "--context", "100", "--tp", "2", "--json"},
      {"gen-model", "--preset", "tiny", "--out", out, "--dtype", "bf16", "--shard-mb", "1"}};
  uint64_t ran = 0;
  const uint64_t cases = fuzz_case_count(40);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    std::mt19937_64 rng(seed);
    auto below = [&](uint64_t n) { return size_t(rng() % n); };
    std::vector<std::string> args = valid[seed % valid.size()];
    std::string edits;
    const size_t count = 1 + below(2);
    for (size_t e = 0; e < count && args.size() > 1; ++e) {
      const size_t at = 1 + below(args.size() - 1);  // the command itself stays
      switch (below(6)) {
        case 0:
        case 1: {  // a flag's value (or, if `at` is a flag, the token after it)
          const size_t value = args[at].rfind("--", 0) == 0 && at + 1 < args.size() ? at + 1 : at;
          args[value] = kOddValues[below(std::size(kOddValues))];
          edits += " [" + std::to_string(value) + "] = '" + args[value] + "';";
          break;
        }
        case 2:
          edits += " '" + args[at] + "' dropped;";
          args.erase(args.begin() + long(at));
          break;
        case 3:
          if (at + 1 < args.size()) {
            edits += " '" + args[at] + " " + args[at + 1] + "' repeated;";
            args.insert(args.end(), {args[at], args[at + 1]});
          }
          break;
        case 4: {
          const std::string flag = kFlags[below(std::size(kFlags))], value = kOddValues[below(std::size(kOddValues))];
          edits += " '" + flag + " " + value + "' added;";
          args.insert(args.begin() + long(at), {flag, value});
          break;
        }
        default: {
          const size_t other = 1 + below(args.size() - 1);
          std::swap(args[at], args[other]);
          edits += " tokens " + std::to_string(at) + " and " + std::to_string(other) + " exchanged;";
          break;
        }
      }
    }
    // In a folder of its own: an edit can turn gen-model's --out, or the token that takes its place, into a
    // relative path, and a model folder must not land in the test's working directory.
    const std::filesystem::path cwd = dir.path() / "cwd";
    std::filesystem::remove_all(cwd);
    std::filesystem::create_directories(cwd);
    std::filesystem::remove_all(out);  // gen-model refuses a folder it did not write; start each case afresh
    const RunResult r = run_cli(args, 30, cwd.string());
    const std::string where = "seed " + std::to_string(seed) + ":" + edits + "\n" + describe(r);
    if (r.status == 0) {
      ++ran;
      continue;
    }
    EXPECT_EQ(r.status, 2) << where;
    if (r.status != 2) continue;
    const std::string prefix = "tilefire " + args[0] + ": error: ";
    EXPECT_EQ(r.err.rfind(prefix, 0), 0u) << "the message does not start with '" << prefix << "'\n" << where;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "not one line\n" << where;
  }
  std::printf("%llu of %llu mutated command lines ran, the rest were refused\n", (unsigned long long)ran, (unsigned long long)cases);
  EXPECT_GT(ran, 0u) << "no mutated command line ran: the test checks only refusals";
  EXPECT_LT(ran, cases) << "every mutated command line ran: the edits reach no parser";
}

}  // namespace
}  // namespace tilefire::testing
