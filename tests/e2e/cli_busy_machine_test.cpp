// `tilefire simulate --device cpu` on a busy machine: the cpu device's stall probe finds other work on the
// cores, and the report warns of it (docs/SIMULATOR.md, "A busy machine"). This test makes the machine
// busy itself, so ctest runs it alone (RUN_SERIAL, tests/CMakeLists.txt): beside it, the tests that time
// steps or measure the cpu device would measure its spinning threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"

namespace tilefire::testing {
namespace {

// simulate --device cpu on a machine whose every core other work keeps busy (here, threads of this test
// that spin, two per core): the stalls measured take far more than a quarter of each core (half or more,
// each spinner sharing its core), and the report says so, on stderr and as busy_machine, naming the share
// and where the docs explain it. A device file's stalls, however large, are the user's model: no warning.
TEST(CliSimulate, ABusyMachineIsWarnedOf) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy_work;
  for (unsigned i = 0; i < 2 * std::max(1u, std::thread::hardware_concurrency()); ++i)
    busy_work.emplace_back([&] {
      volatile uint64_t sink = 0;
      while (!stop.load(std::memory_order_relaxed)) sink = sink + 1;
    });
  // Where other work beside this test's makes the machine busier still, the calibration can find no step
  // time left to fit and stops with an error that says the machine is busy (exit 2): then it is tried again,
  // three times at most (on CI's quiet machine the first run fits).
  RunResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = run_cli({"simulate", "--preset", "tiny", "--device", "cpu", "--threads", "2", "--json"});
    if (r.status != 2 || r.err.find("is the machine busy with other work?") == std::string::npos) break;
  }
  stop = true;
  for (std::thread& t : busy_work) t.join();
  ASSERT_EQ(r.status, 0) << describe(r);
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["stall_ns"].get<double>(), 0.25 * j["stall_every_ns"].get<double>()) << r.out;
  EXPECT_TRUE(j["busy_machine"].get<bool>()) << r.out;
  EXPECT_NE(r.err.find("warning: while the cpu device was measured, other work took"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("A busy machine"), std::string::npos) << r.err;

  TempDir dir("cli-simulate-busy");
  const std::string device = (dir.path() / "device.json").string();
  write_file_text(device, R"({"workers": 2, "memory_gbs": 50, "flops": 1e11, "dispatch_ns": 200, "signal_ns": 400,
                              "stall_ns": 500000, "stall_every_ns": 1e6})");
  r = run_cli({"simulate", "--preset", "tiny", "--device", device, "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["busy_machine"].get<bool>()) << r.out;
  EXPECT_EQ(r.err.find("other work took"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tilefire::testing
