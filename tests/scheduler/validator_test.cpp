// The validator accepts good programs and rejects hand-made bad ones with a message naming the fault.
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "ops/noop.h"
#include "scheduler/placement.h"
#include "scheduler/validator.h"

namespace tilefire::testing {
namespace {

// A program of noop tasks: `signals[t]` and `waits[t]` list event ids; events get the given triggers.
Program noop_program(const std::vector<std::vector<uint32_t>>& waits, const std::vector<std::vector<uint32_t>>& signals,
                     const std::vector<uint32_t>& triggers) {
  Program p;
  p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{uint32_t(waits.size())}), 0, uint32_t(waits.size())});
  for (uint32_t e : triggers) p.events.push_back({e});
  for (size_t t = 0; t < waits.size(); ++t) {
    TaskDesc task;
    task.op = OpCode::noop;
    task.tile_begin = uint32_t(t);
    task.tile_end = uint32_t(t + 1);
    task.wait_begin = uint32_t(p.waits.size());
    task.wait_count = uint16_t(waits[t].size());
    p.waits.insert(p.waits.end(), waits[t].begin(), waits[t].end());
    task.signal_begin = uint32_t(p.signals.size());
    task.signal_count = uint16_t(signals[t].size());
    p.signals.insert(p.signals.end(), signals[t].begin(), signals[t].end());
    p.tasks.push_back(task);
  }
  return p;
}

std::string rejection(const Program& p) {
  try {
    validate_program(p);
  } catch (const ProgramError& e) {
    return e.what();
  }
  return "";
}

TEST(Validator, AcceptsAChainOnEveryPlacement) {
  // t0 -> e0 -> t1 -> e1 -> t2
  Program p = noop_program({{}, {0}, {1}}, {{0}, {1}, {}}, {1, 1});
  for (uint32_t workers : {1u, 2u, 3u}) {
    place_static_round_robin(p, workers);
    EXPECT_EQ(rejection(p), "") << workers << " workers";
  }
  place_dynamic(p, 2);
  EXPECT_EQ(rejection(p), "");
}

TEST(Validator, RejectsACycle) {
  // t0 waits on e1 (signalled by t1), t1 waits on e0 (signalled by t0)
  Program p = noop_program({{1}, {0}}, {{0}, {1}}, {1, 1});
  place_dynamic(p, 1);
  EXPECT_NE(rejection(p).find("cycle"), std::string::npos) << rejection(p);
}

TEST(Validator, RejectsAnEventNothingSignals) {
  Program p = noop_program({{}, {0}}, {{}, {}}, {1});
  place_dynamic(p, 1);
  const std::string message = rejection(p);
  EXPECT_NE(message.find("no task signals it"), std::string::npos) << message;
  EXPECT_NE(message.find("noop layer 0 tile [1, 2)"), std::string::npos) << message;
}

TEST(Validator, RejectsATriggerCountThatDoesNotMatchItsSignals) {
  Program p = noop_program({{}, {}, {0}}, {{0}, {0}, {}}, {3});
  place_dynamic(p, 1);
  EXPECT_NE(rejection(p).find("trigger count 3 but 2 tasks signal it"), std::string::npos) << rejection(p);
}

TEST(Validator, RejectsStaticQueuesThatDeadlock) {
  // Acyclic (t0 -> t1), but one worker's queue holds t1 before t0: it would wait forever.
  Program p = noop_program({{}, {0}}, {{0}, {}}, {1});
  p.placement = Placement::static_queues;
  p.workers = 1;
  p.queues = {{1, 0}};
  EXPECT_NE(rejection(p).find("deadlock"), std::string::npos) << rejection(p);
  p.queues = {{0, 1}};
  EXPECT_EQ(rejection(p), "");
}

TEST(Validator, RejectsATaskQueuedTwiceOrNotAtAll) {
  Program p = noop_program({{}, {}}, {{}, {}}, {});
  p.placement = Placement::static_queues;
  p.workers = 2;
  p.queues = {{0}, {0}};
  EXPECT_NE(rejection(p).find("more than once"), std::string::npos);
  p.queues = {{0}, {}};
  EXPECT_NE(rejection(p).find("in no worker's queue"), std::string::npos);
}

TEST(Validator, RejectsOutOfRangeEvents) {
  Program p = noop_program({{5}}, {{}}, {});
  place_dynamic(p, 1);
  EXPECT_NE(rejection(p).find("does not exist"), std::string::npos);
}

TEST(Compile, ModelProgramsValidateForManyShapes) {
  for (const char* preset : {"tiny", "small", "llama-3.2-1b", "qwen3-0.6b"})
    for (uint32_t workers : {1u, 2u, 7u})
      for (uint32_t tokens : {1u, 13u}) {
        CompileOptions options;
        options.workers = workers;
        options.tokens = tokens;
        options.max_context = 64;
        Program p = compile_model(preset_spec(preset, DType::bf16), options);
        EXPECT_NO_THROW(validate_program(p)) << preset;
        EXPECT_GT(p.tasks.size(), 0u);
      }
}

// Dependencies come from regions: at tile granularity, an attention tile waits on exactly the QKV tiles
// of its own query heads and its KV head, not on the whole QKV op.
TEST(Compile, AttentionWaitsOnlyForItsOwnHeads) {
  CompileOptions options;
  options.workers = 2;
  options.max_context = 64;
  Program p = compile_model(preset_spec("tiny"), options);
  size_t checked = 0;
  for (const TaskDesc& t : p.tasks) {
    if (t.op != OpCode::causal_attention || t.layer != 0) continue;
    const NodeDesc& qkv = p.nodes[t.node - 1];
    ASSERT_EQ(qkv.params.op, OpCode::qkv_projection);
    EXPECT_LT(t.wait_count, qkv.task_count) << "attention waits on every QKV tile";
    EXPECT_GE(t.wait_count, 3) << "q, k and v producers";
    ++checked;
  }
  EXPECT_GT(checked, 1u);
}

}  // namespace
}  // namespace tilefire::testing
