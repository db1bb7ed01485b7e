// The validator as the executors' safety net, under mutation: a model's compiled program (every op made a
// noop, so no memory is touched) with a few seeded edits of the kind a placement policy or compiler bug
// makes (queue entries swapped, moved to another worker or dropped, a wait or signal retargeted, two
// tasks' signals or waits exchanged, a trigger count off by one, a wait dropped). Whatever the edit, the
// validator either refuses the program with a ProgramError, or the program runs: the cpu executor ends
// every step (dataflow, and bsp unless bsp_order_violation names an edge) with every task once and never
// before its producers, and the simulator ends too. A hang fails the test through a watchdog instead of
// hanging it. TILEFIRE_FUZZ_SCALE=K runs K times as many cases.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "megakernel/cpu/cpu_executor.h"
#include "ops/noop.h"
#include "scheduler/cost_model.h"
#include "scheduler/policy.h"
#include "scheduler/simulator.h"
#include "scheduler/validator.h"
#include "tests/common/input_mutator.h"
#include "tests/common/step_checks.h"

namespace tilefire::testing {
namespace {

// Ends the process, naming the case, when no case finishes for `limit`: a step that never ends is the
// failure this test looks for, and a hung test would only time out without saying which case it was.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : thread_([this, limit] {
          std::unique_lock lock(mutex_);
          while (!stop_) {
            const uint64_t seen = progress_;
            if (wake_.wait_for(lock, limit, [&] { return stop_ || progress_ != seen; })) continue;
            std::fprintf(stderr, "no progress for %lld s: the step hangs in %s\n", (long long)limit.count(), current_.c_str());
            std::fflush(stderr);
            std::_Exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void starting(const std::string& what) {
    std::lock_guard lock(mutex_);
    current_ = what;
    ++progress_;
    wake_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t progress_ = 0;
  std::string current_ = "set-up";
  std::thread thread_;
};

// The program with every node made a noop of as many tile units as its tasks span: the same tasks,
// events, waits, signals and queues, and nothing read or written.
Program as_noops(Program p) {
  for (NodeDesc& node : p.nodes) {
    uint32_t units = 1;
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t) units = std::max(units, p.tasks[t].tile_end);
    node.params = OpParams::make(OpCode::noop, node.params.layer, NoopParams{units});
  }
  for (TaskDesc& task : p.tasks) task.op = OpCode::noop;
  p.slots.clear();
  p.constants.clear();
  p.scratch_floats = 0;
  return p;
}

struct Mutation {
  Program program;
  std::string description;
};

// One to three edits of `base`, drawn from `seed`.
Mutation mutate(const Program& base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto below = [&](uint64_t n) { return n ? rng() % n : 0; };
  Mutation m{base, ""};
  Program& p = m.program;
  auto note = [&](const std::string& edit) { m.description += (m.description.empty() ? "" : "; ") + edit; };
  const uint64_t edits = 1 + below(3);
  for (uint64_t e = 0; e < edits; ++e) {
    const uint64_t kind = below(p.placement == Placement::static_queues ? 10 : 6);
    if (kind == 0 && !p.waits.empty()) {
      const uint64_t i = below(p.waits.size()), to = below(p.events.size());
      note("wait " + std::to_string(i) + " on event " + std::to_string(to) + " (was " + std::to_string(p.waits[i]) + ")");
      p.waits[i] = uint32_t(to);
    } else if (kind == 1 && !p.signals.empty()) {
      const uint64_t i = below(p.signals.size()), to = below(p.events.size());
      note("signal " + std::to_string(i) + " of event " + std::to_string(to) + " (was " + std::to_string(p.signals[i]) + ")");
      p.signals[i] = uint32_t(to);
    } else if (kind == 2 && p.signals.size() > 1) {  // the signal counts stay right: only the graph moves
      const uint64_t a = below(p.signals.size()), b = below(p.signals.size());
      std::swap(p.signals[a], p.signals[b]);
      note("signals " + std::to_string(a) + " and " + std::to_string(b) + " exchanged");
    } else if (kind == 3 && p.waits.size() > 1) {
      const uint64_t a = below(p.waits.size()), b = below(p.waits.size());
      std::swap(p.waits[a], p.waits[b]);
      note("waits " + std::to_string(a) + " and " + std::to_string(b) + " exchanged");
    } else if (kind == 4 && !p.events.empty()) {
      const uint64_t i = below(p.events.size());
      const bool up = below(2) == 0;
      p.events[i].trigger_count = up ? p.events[i].trigger_count + 1 : p.events[i].trigger_count - 1;
      note("event " + std::to_string(i) + "'s trigger count " + (up ? "+ 1" : "- 1"));
    } else if (kind == 5) {
      const uint64_t t = below(p.tasks.size());
      if (p.tasks[t].wait_count) {
        --p.tasks[t].wait_count;
        note("task " + std::to_string(t) + "'s last wait dropped");
      }
    } else if (kind >= 6) {  // static queues: what a placement policy decides
      auto& from = p.queues[below(p.queues.size())];
      if (from.empty()) continue;
      const uint64_t i = below(from.size());
      if (kind == 6) {
        const uint64_t j = below(from.size());
        std::swap(from[i], from[j]);
        note("queue entries " + std::to_string(i) + " and " + std::to_string(j) + " exchanged");
      } else if (kind == 7 || kind == 8) {
        auto& to = p.queues[below(p.queues.size())];
        const uint32_t task = from[i];
        from.erase(from.begin() + long(i));
        to.insert(to.begin() + long(below(to.size() + 1)), task);
        note("task " + std::to_string(task) + " moved to another place in the queues");
      } else if (below(2)) {
        note("task " + std::to_string(from[i]) + " dropped from its queue");
        from.erase(from.begin() + long(i));
      } else {
        note("task " + std::to_string(from[i]) + " queued twice");
        from.push_back(from[i]);
      }
    }
  }
  return m;
}

TEST(ProgramFuzz, TheValidatorRefusesOrTheProgramRunsToTheEnd) {
  // Bases: tiny's decode and prefill programs over every policy and granularity, with worker counts
  // and split-KV drawn per base.
  struct Base {
    Program program;
    std::string name;
  };
  std::vector<Base> bases;
  const ModelSpec spec = preset_spec("tiny", DType::bf16);
  std::mt19937 draw(11);
  for (const PlacementPolicy* registered : all_policies()) {
    const std::string policy(registered->name());
    for (EventGranularity granularity : {EventGranularity::tile, EventGranularity::head, EventGranularity::op})
      for (uint32_t tokens : {1u, 5u}) {
        CompileOptions options;
        options.workers = 1 + draw() % 4;
        options.tokens = tokens;
        options.max_context = 32;
        options.policy = policy;
        options.granularity = granularity;
        options.kv_splits = tokens == 1 ? 1 + draw() % 2 : 1;
        Program program = as_noops(compile_model(spec, options));
        ASSERT_NO_THROW(validate_program(program)) << policy;
        bases.push_back({std::move(program), policy + ", " + std::to_string(options.workers) + " workers, " +
                                                 std::to_string(tokens) + " tokens, granularity " + std::to_string(int(granularity)) +
                                                 ", kv-splits " + std::to_string(options.kv_splits)});
      }
  }
  std::map<uint32_t, std::unique_ptr<CpuExecutor>> executors;
  Watchdog watchdog(std::chrono::seconds(60));
  uint64_t accepted = 0;
  const uint64_t cases = fuzz_case_count(2000);
  for (uint64_t seed = 0; seed < cases; ++seed) {
    const Base& base = bases[seed % bases.size()];
    const Mutation m = mutate(base.program, seed);
    const std::string where = "seed " + std::to_string(seed) + " (" + base.name + "): " + m.description;
    try {
      validate_program(m.program);
    } catch (const ProgramError& error) {
      EXPECT_NE(std::string(error.what()).find("program: "), std::string::npos) << error.what();
      continue;
    } catch (const std::exception& error) {
      ADD_FAILURE() << "not a ProgramError: " << error.what() << "\n" << where;
      continue;
    }
    ++accepted;
    const Program& p = m.program;
    auto& executor = executors[p.workers];
    if (!executor) executor = std::make_unique<CpuExecutor>(p.workers);
    ProgramInstance instance(p, {});
    const bool bsp_allowed = bsp_order_violation(p).empty();
    StepInputs inputs;
    if (!bsp_allowed) {  // an edit made an edge bsp would break: its bsp step is refused, and nothing runs
      StepOptions bsp;
      bsp.mode = ScheduleMode::bsp;
      EXPECT_THROW(executor->run_step(instance, inputs, bsp), std::runtime_error) << where;
    }
    for (uint32_t step = 0; step < 3; ++step) {
      StepOptions options;
      options.mode = step == 2 && bsp_allowed ? ScheduleMode::bsp : ScheduleMode::dataflow;
      options.max_random_delay_us = step == 1 ? 3 : 0;
      options.delay_seed = seed;
      std::vector<TaskTiming> timings;
      options.trace = &timings;
      watchdog.starting(where + ", step " + std::to_string(step));
      executor->run_step(instance, inputs, options);
      check_step(p, timings, options.mode, where + ", step " + std::to_string(step));
    }
    DeviceModel device = *device_preset("h200");
    device.workers = p.workers;
    device.worker_speed.clear();
    watchdog.starting(where + ", simulated");
    const SimulationResult simulated = simulate_program(p, device, 16);
    EXPECT_TRUE(std::isfinite(simulated.step_ns) && simulated.step_ns > 0) << where;
    if (::testing::Test::HasFailure()) return;
  }
  std::printf("%llu of %llu mutated programs accepted\n", (unsigned long long)accepted, (unsigned long long)cases);
  EXPECT_GT(accepted, 0u) << "no mutation was accepted: the test checks only refusals";
}

}  // namespace
}  // namespace tilefire::testing
