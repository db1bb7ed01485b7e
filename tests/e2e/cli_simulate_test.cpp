// `tilefire simulate` as a user meets it: the report's keys and its bounds, a device from a file or
// measured on this machine (a busy one: cli_busy_machine_test), the trace in the run's format, fitting the model to a traced step (and what a
// trace must hold for that), the GPU presets' weight stages and peaks per dtype, and batches sharing the
// weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"
#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

// The registry is the one list of policies: `simulate --list-policies` prints its names in order (the
// scripts that tabulate policies read it), and every command that takes --policy lists each with its
// description at the end of its --help.
TEST(CliSimulate, ThePoliciesListedAreTheRegistrys) {
  const auto policies = placement_policies();
  ASSERT_GE(policies.size(), 5u);
  std::string names;
  for (const auto& [name, description] : policies) names += name + "\n";
  const RunResult listed = run_cli({"simulate", "--list-policies"});
  ASSERT_EQ(listed.status, 0) << describe(listed);
  EXPECT_EQ(listed.out, names);
  for (const std::string command : {"run", "bench", "simulate", "inspect"}) {
    const RunResult help = run_cli({command, "--help"});
    ASSERT_EQ(help.status, 0) << describe(help);
    const size_t section = help.out.find("placement policies (--policy NAME; the first is the default):");
    ASSERT_NE(section, std::string::npos) << command << ":\n" << help.out;
    for (const auto& [name, description] : policies)
      EXPECT_NE(help.out.find("  " + name + std::string(16 - name.size(), ' ') + description + "\n", section), std::string::npos)
          << command << ": " << name;
  }
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
  // A busy machine is said when the stalls measured take more than a quarter of each core, and only then.
  const bool busy = j["stall_every_ns"].get<double>() > 0 && j["stall_ns"].get<double>() > 0.25 * j["stall_every_ns"].get<double>();
  EXPECT_EQ(j["busy_machine"].get<bool>(), busy) << r.out;
  EXPECT_EQ(r.err.find("other work took") != std::string::npos, busy) << r.err;
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

}  // namespace
}  // namespace tilefire::testing
