// The scheduler's own cost: a Program of empty (noop) tiles, so the step time is all dispatch, waiting
// and signalling. Reports nanoseconds per task (the bar: 300 ns or less with 2 workers).
//   layers of `width` tiles; tile i of node n waits on tiles i and i+1 of node n-1 (per-tile events), so
//   workers hand work to each other constantly, the worst case for a dataflow scheduler.
#include <benchmark/benchmark.h>

#include "megakernel/cpu/cpu_executor.h"
#include "ops/noop.h"
#include "scheduler/policy.h"
#include "scheduler/validator.h"

namespace tilefire {
namespace {

Program noop_stencil(uint32_t nodes, uint32_t width) {
  Program p;
  for (uint32_t n = 0; n < nodes; ++n) {
    p.nodes.push_back({OpParams::make(OpCode::noop, uint16_t(n), NoopParams{width}), n * width, width});
    for (uint32_t i = 0; i < width; ++i) {
      TaskDesc t;
      t.op = OpCode::noop;
      t.node = n;
      t.tile_begin = i;
      t.tile_end = i + 1;
      t.tile_index = i;
      p.tasks.push_back(t);
    }
  }
  for (uint32_t n = 0; n < nodes; ++n)
    for (uint32_t i = 0; i < width; ++i) {
      TaskDesc& t = p.tasks[n * width + i];
      t.wait_begin = uint32_t(p.waits.size());
      if (n > 0) {
        p.waits.push_back((n - 1) * width + i);  // event of tile i of the previous node
        if (i + 1 < width) p.waits.push_back((n - 1) * width + i + 1);
      }
      t.wait_count = uint16_t(p.waits.size() - t.wait_begin);
      t.signal_begin = uint32_t(p.signals.size());
      p.events.push_back({1});  // every tile has its own event, signalled once per step
      p.signals.push_back(n * width + i);
      t.signal_count = 1;
    }
  return p;
}

void BM_EmptyTasks(benchmark::State& state) {
  const uint32_t workers = uint32_t(state.range(0));
  const bool dynamic = state.range(1) != 0;
  Program p = noop_stencil(64, 64);
  find_policy(dynamic ? "dynamic" : "balanced")->place(p, workers);
  validate_program(p);
  CpuExecutor executor(workers);
  ProgramInstance instance(p, {});
  StepInputs inputs;
  for (auto _ : state) executor.run_step(instance, inputs, StepOptions{});
  // Seconds per task (printed with an SI suffix: 150n is 150 ns).
  state.counters["per_task"] = benchmark::Counter(double(p.tasks.size()),
                                                  benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(dynamic ? "dynamic queue" : "static queues");
}
BENCHMARK(BM_EmptyTasks)->ArgsProduct({{1, 2}, {0, 1}})->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tilefire

BENCHMARK_MAIN();
