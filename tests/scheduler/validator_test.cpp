// The validator accepts good programs and rejects hand-made bad ones with a message naming the fault.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <set>

#include "graph/compile.h"
#include "graph/primitive_graph.h"
#include "ops/all_ops.h"
#include "ops/noop.h"
#include "scheduler/policy.h"
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

TEST(Validator, AcceptsAChainOnEveryPolicy) {
  // t0 -> e0 -> t1 -> e1 -> t2
  Program p = noop_program({{}, {0}, {1}}, {{0}, {1}, {}}, {1, 1});
  for (const PlacementPolicy* policy : all_policies())
    for (uint32_t workers : {1u, 2u, 3u}) {
      policy->place(p, workers);
      EXPECT_EQ(rejection(p), "") << policy->name() << ", " << workers << " workers";
    }
}

TEST(Validator, RejectsACycle) {
  // t0 waits on e1 (signalled by t1), t1 waits on e0 (signalled by t0)
  Program p = noop_program({{1}, {0}}, {{0}, {1}}, {1, 1});
  find_policy("dynamic")->place(p, 1);
  EXPECT_NE(rejection(p).find("cycle"), std::string::npos) << rejection(p);
}

TEST(Validator, RejectsAnEventNothingSignals) {
  Program p = noop_program({{}, {0}}, {{}, {}}, {1});
  find_policy("dynamic")->place(p, 1);
  const std::string message = rejection(p);
  EXPECT_NE(message.find("no task signals it"), std::string::npos) << message;
  EXPECT_NE(message.find("noop layer 0 tile [1, 2)"), std::string::npos) << message;
}

TEST(Validator, RejectsATriggerCountThatDoesNotMatchItsSignals) {
  Program p = noop_program({{}, {}, {0}}, {{0}, {0}, {}}, {3});
  find_policy("dynamic")->place(p, 1);
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
  find_policy("dynamic")->place(p, 1);
  EXPECT_NE(rejection(p).find("does not exist"), std::string::npos);
}

TEST(Validator, RejectsUnknownOpcodesAndTasksOutsideTheirNode) {
  Program p = noop_program({{}, {}}, {{}, {}}, {});
  find_policy("dynamic")->place(p, 1);
  p.tasks[1].op = OpCode(77);
  EXPECT_NE(rejection(p).find("unknown opcode 77"), std::string::npos) << rejection(p);
  p.tasks[1].op = OpCode::noop;
  p.tasks[1].node = 3;
  EXPECT_NE(rejection(p).find("names node 3"), std::string::npos) << rejection(p);
  p.tasks[1].node = 0;
  p.nodes[0].task_count = 1;
  EXPECT_NE(rejection(p).find("not among the tasks of its node"), std::string::npos) << rejection(p);
}

TEST(Validator, RejectsAnEventWithTriggerCountZero) {
  // Nothing signals event 0 and its trigger is 0: a static queue would pass it, the dynamic queue would
  // never push its waiter. Every event needs a signal.
  Program p = noop_program({{}, {0}}, {{}, {}}, {0});
  find_policy("dynamic")->place(p, 1);
  EXPECT_NE(rejection(p).find("trigger count 0"), std::string::npos) << rejection(p);
}

// bsp runs node by node and waits on no event: a chain within one node is a valid dataflow program but
// not a bsp one (the executors refuse its bsp steps); the same chain with a node per task is both; an
// edge back to an earlier node is named too.
TEST(Validator, NamesAnEdgeBspWouldBreak) {
  Program chain = noop_program({{}, {0}, {1}}, {{0}, {1}, {}}, {1, 1});  // t0 -> e0 -> t1 -> e1 -> t2
  find_policy("balanced")->place(chain, 2);
  EXPECT_EQ(rejection(chain), "");
  const std::string within = bsp_order_violation(chain);
  EXPECT_NE(within.find("noop layer 0 tile [1, 2) (task 1) waits on event 0"), std::string::npos) << within;
  EXPECT_NE(within.find("bsp"), std::string::npos) << within;
  auto node_per_task = [](Program p) {
    p.nodes.clear();
    for (uint32_t t = 0; t < p.tasks.size(); ++t) {
      p.nodes.push_back({OpParams::make(OpCode::noop, 0, NoopParams{3}), t, 1});
      p.tasks[t].node = t;
    }
    return p;
  };
  EXPECT_EQ(bsp_order_violation(node_per_task(chain)), "");
  Program backwards = node_per_task(noop_program({{1}, {}}, {{}, {0, 1}}, {1, 1}));  // t1 (node 1) -> e1 -> t0 (node 0)
  find_policy("balanced")->place(backwards, 2);
  EXPECT_EQ(rejection(backwards), "");
  const std::string back = bsp_order_violation(backwards);
  EXPECT_NE(back.find("(task 0) waits on event 1, which noop layer 0 tile [1, 2) (task 1) of node 1 signals"), std::string::npos) << back;
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
        EXPECT_EQ(bsp_order_violation(p), "") << preset;
        EXPECT_GT(p.tasks.size(), 0u);
      }
}

TileFootprint footprint_of(const Program& p, const TaskDesc& t) {
  TileFootprint fp;
  const OpParams& params = p.nodes[t.node].params;
  visit_op(t.op, [&](auto op) {
    using Op = decltype(op);
    Op::footprint(params.as<typename Op::Params>(), TileRange{t.tile_begin, t.tile_end}, fp);
  });
  return fp;
}

// The oracle for the dependency analysis: for every pair of tiles where one writes a region another reads
// (or writes), the second must be reachable from the first through signal -> wait edges. Checked from the
// footprints alone, independently of how compile derived the events.
void expect_every_hazard_ordered(const Program& p, const std::string& where) {
  const uint32_t n = uint32_t(p.tasks.size());
  std::map<uint32_t, std::vector<uint32_t>> waiters_of_event;
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t i = 0; i < p.tasks[t].wait_count; ++i) waiters_of_event[p.waits[p.tasks[t].wait_begin + i]].push_back(t);
  std::vector<TileFootprint> fps(n);
  for (uint32_t t = 0; t < n; ++t) fps[t] = footprint_of(p, p.tasks[t]);
  size_t hazards = 0;
  for (uint32_t w = 0; w < n; ++w) {
    if (fps[w].writes.empty()) continue;
    std::vector<uint8_t> reached(n, 0);  // tasks ordered after w
    std::deque<uint32_t> frontier = {w};
    while (!frontier.empty()) {
      const TaskDesc& t = p.tasks[frontier.front()];
      frontier.pop_front();
      for (uint32_t i = 0; i < t.signal_count; ++i)
        for (uint32_t next : waiters_of_event[p.signals[t.signal_begin + i]])
          if (!reached[next]) reached[next] = 1, frontier.push_back(next);
    }
    for (const Region& out : fps[w].writes)
      for (uint32_t r = 0; r < n; ++r) {
        if (r == w) continue;
        for (const auto* regions : {&fps[r].reads, &fps[r].writes})
          for (const Region& in : *regions)
            if (in.slot == out.slot && in.begin < out.end && out.begin < in.end) {
              ++hazards;
              EXPECT_TRUE(reached[r]) << where << ": " << describe_task(p, r) << " touches slot '" << p.slots[in.slot].name
                                      << "' written by " << describe_task(p, w) << " but is not ordered after it";
            }
      }
  }
  EXPECT_GT(hazards, 0u) << where;
}

TEST(Compile, EveryReadAfterWriteIsOrderedByEvents) {
  ModelSpec qwen3 = preset_spec("tiny");
  qwen3.qk_norm = true;
  qwen3.qkv_bias = true;
  for (const ModelSpec& spec : {preset_spec("tiny"), qwen3, preset_spec("small")})
    for (EventGranularity granularity : {EventGranularity::tile, EventGranularity::head, EventGranularity::op})
      for (uint32_t workers : {1u, 3u})
        for (uint32_t tokens : {1u, 5u})
          for (uint32_t kv_splits : {1u, 3u}) {  // 3: split-KV attention at decode (chunk tiles, then merges)
            CompileOptions options;
            options.workers = workers;
            options.tokens = tokens;
            options.max_context = 32;
            options.granularity = granularity;
            options.kv_splits = kv_splits;
            expect_every_hazard_ordered(compile_model(spec, options), spec.arch_name + " " + std::to_string(spec.hidden) +
                                                                          ", " + std::to_string(workers) + " workers, " +
                                                                          std::to_string(kv_splits) + " KV splits");
            if (::testing::Test::HasFailure()) return;
          }
}

// Dependencies come from regions: at tile granularity, an attention tile waits on exactly the QKV tiles
// of its own query heads and its KV head (whose k and v slots), not on the whole QKV op.
TEST(Compile, AttentionWaitsExactlyForItsOwnHeads) {
  CompileOptions options;
  options.workers = 2;
  options.max_context = 64;
  const ModelSpec spec = preset_spec("tiny");
  Program p = compile_model(spec, options);
  std::map<uint32_t, uint32_t> signaller_of_event;  // per-tile events have one signaller
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t i = 0; i < p.tasks[t].signal_count; ++i) signaller_of_event[p.signals[p.tasks[t].signal_begin + i]] = t;
  size_t checked = 0;
  for (const TaskDesc& t : p.tasks) {
    if (t.op != OpCode::causal_attention || t.layer != 0) continue;
    const NodeDesc& qkv = p.nodes[t.node - 1];
    ASSERT_EQ(qkv.params.op, OpCode::qkv_projection);
    const auto& qp = qkv.params.as<QkvProjectionParams>();
    const uint32_t kv = t.tile_begin / spec.group();
    std::vector<uint32_t> expected;  // QKV tiles writing this tile's q heads, or this KV head's k or v
    for (uint32_t i = 0; i < qkv.task_count; ++i) {
      const TaskDesc& producer = p.tasks[qkv.first_task + i];
      const auto seg = QkvProjectionOp::segment_of(qp, producer.tile_begin);
      const uint32_t heads = producer.tile_end - producer.tile_begin;
      const bool needed = seg.part == QkvProjectionOp::Part::q
                              ? seg.first_head < t.tile_end && t.tile_begin < seg.first_head + heads
                              : seg.first_head == kv;
      if (needed) expected.push_back(qkv.first_task + i);
    }
    std::vector<uint32_t> actual;
    for (uint32_t i = 0; i < t.wait_count; ++i) actual.push_back(signaller_of_event.at(p.waits[t.wait_begin + i]));
    std::sort(actual.begin(), actual.end());
    EXPECT_EQ(actual, expected) << describe_task(p, uint32_t(&t - p.tasks.data()));
    EXPECT_LT(actual.size(), qkv.task_count);
    ++checked;
  }
  EXPECT_GT(checked, 1u);
}

// Head granularity: an attention tile waits on one event per query head it reads and one for each of its
// KV head's k and v; each of those events is signalled by exactly the QKV tiles that write into that head
// (the same producers as at tile granularity, grouped by head instead of by tile). Under tensor
// parallelism the reductions' reads of the partial sums are banded too, and every hazard stays ordered.
// Every event's signalling tasks.
std::map<uint32_t, std::set<uint32_t>> signallers_of_events(const Program& p) {
  std::map<uint32_t, std::set<uint32_t>> signallers;
  for (uint32_t t = 0; t < p.tasks.size(); ++t)
    for (uint32_t i = 0; i < p.tasks[t].signal_count; ++i) signallers[p.signals[p.tasks[t].signal_begin + i]].insert(t);
  return signallers;
}

TEST(Compile, HeadGranularityWaitsOnOneEventPerHead) {
  const ModelSpec spec = preset_spec("small");
  for (uint32_t workers : {2u, 16u}) {  // 16 workers: QKV tiles narrower than a group of heads
    CompileOptions options;
    options.workers = workers;
    options.max_context = 64;
    options.granularity = EventGranularity::head;
    Program p = compile_model(spec, options);
    const std::map<uint32_t, std::set<uint32_t>> signallers_of_event = signallers_of_events(p);
    for (const auto& [event, signallers] : signallers_of_event)
      EXPECT_EQ(p.events[event].trigger_count, signallers.size()) << "event " << event;
    size_t checked = 0;
    for (const TaskDesc& t : p.tasks) {
      if (t.op != OpCode::causal_attention || t.layer != 1) continue;
      const NodeDesc& qkv = p.nodes[t.node - 1];
      ASSERT_EQ(qkv.params.op, OpCode::qkv_projection);
      const auto& qp = qkv.params.as<QkvProjectionParams>();
      const uint32_t kv = t.tile_begin / spec.group();
      // Expected: per query head h of the tile, the q tiles covering h; then the k tiles of kv, the v tiles of kv.
      std::vector<std::set<uint32_t>> expected;
      for (uint32_t h = t.tile_begin; h < t.tile_end; ++h) expected.emplace_back();
      expected.emplace_back();
      expected.emplace_back();
      for (uint32_t i = 0; i < qkv.task_count; ++i) {
        const TaskDesc& producer = p.tasks[qkv.first_task + i];
        const auto seg = QkvProjectionOp::segment_of(qp, producer.tile_begin);
        const uint32_t heads = producer.tile_end - producer.tile_begin;
        if (seg.part == QkvProjectionOp::Part::q) {
          for (uint32_t h = t.tile_begin; h < t.tile_end; ++h)
            if (seg.first_head <= h && h < seg.first_head + heads) expected[h - t.tile_begin].insert(qkv.first_task + i);
        } else if (seg.first_head <= kv && kv < seg.first_head + heads) {
          expected[t.tile_end - t.tile_begin + (seg.part == QkvProjectionOp::Part::k ? 0 : 1)].insert(qkv.first_task + i);
        }
      }
      std::vector<std::set<uint32_t>> actual;
      for (uint32_t i = 0; i < t.wait_count; ++i) actual.push_back(signallers_of_event.at(p.waits[t.wait_begin + i]));
      std::sort(actual.begin(), actual.end());
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(actual, expected) << workers << " workers, " << describe_task(p, uint32_t(&t - p.tasks.data()));
      ++checked;
    }
    EXPECT_GT(checked, 1u);
  }
  // Split-KV records band per chunk tile (SlotDesc::head_cols), not per head_dim columns: a merge tile
  // waits on one event per chunk of its KV head, each signalled by that chunk's tile alone.
  CompileOptions split;
  split.workers = 2;
  split.max_context = 64;
  split.granularity = EventGranularity::head;
  split.kv_splits = 3;
  const Program sp = compile_model(spec, split);
  const std::map<uint32_t, std::set<uint32_t>> signallers = signallers_of_events(sp);
  size_t merges = 0;
  for (const TaskDesc& t : sp.tasks) {
    if (t.op != OpCode::attention_merge) continue;
    const NodeDesc& chunks = sp.nodes[t.node - 1];
    ASSERT_EQ(chunks.params.op, OpCode::attention_chunk);
    const uint32_t kv = t.tile_begin / spec.group();
    std::set<uint32_t> expected, actual;  // the chunk tiles of KV head kv (one unit each)
    for (uint32_t c = 0; c < 3; ++c) expected.insert(chunks.first_task + kv * 3 + c);
    ASSERT_EQ(t.wait_count, 3u) << describe_task(sp, uint32_t(&t - sp.tasks.data()));
    for (uint32_t i = 0; i < t.wait_count; ++i) {
      const std::set<uint32_t>& s = signallers.at(sp.waits[t.wait_begin + i]);
      ASSERT_EQ(s.size(), 1u);
      actual.insert(*s.begin());
    }
    EXPECT_EQ(actual, expected);
    ++merges;
  }
  EXPECT_GT(merges, 1u);

  CompileOptions tp;
  tp.workers = 3;
  tp.max_context = 32;
  tp.granularity = EventGranularity::head;
  tp.tp = 2;
  for (uint32_t rank : {0u, 1u}) {
    tp.rank = rank;
    expect_every_hazard_ordered(compile_model(spec, tp), "small, tp 2, rank " + std::to_string(rank) + ", head granularity");
  }
}

// A hand-made op graph has no model to take the head width from: head granularity without it is refused.
TEST(Compile, HeadGranularityNeedsTheHeadWidth) {
  CompileOptions options;
  options.granularity = EventGranularity::head;
  options.max_context = 32;
  const ModelSpec spec = preset_spec("tiny");
  const OpGraph fused = fuse_primitive_graph(build_primitive_graph(spec, options), options);
  try {
    compile_graph(fused, options);
    ADD_FAILURE() << "head granularity compiled without a head width";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("head width"), std::string::npos) << e.what();
  }
  options.head_width = spec.head_dim;
  EXPECT_GT(compile_graph(fused, options).events.size(), 0u);
}

// A program past CompileOptions' limits is refused with an InputError saying which, counted while it is
// built; at the limit itself it compiles. The tiny preset's decode program stands in for a huge one.
TEST(Compile, AProgramPastItsLimitsIsRefusedNamingTheCount) {
  CompileOptions options;
  options.workers = 2;
  options.max_context = 32;
  const ModelSpec spec = preset_spec("tiny");
  const Program program = compile_model(spec, options);
  uint64_t producer_tiles = 0;  // what the limit counts: producer tiles each task reads, of producers it reads in part
  for (const TaskDesc& task : program.tasks) {
    const TileFootprint fp = footprint_of(program, task);
    std::map<uint32_t, std::set<uint32_t>> read_tiles;  // producer node -> its tiles read
    for (const Region& r : fp.reads)
      for (uint32_t p = 0; p < program.tasks.size(); ++p) {
        const TaskDesc& producer = program.tasks[p];
        for (const Region& w : footprint_of(program, producer).writes)
          if (w.slot == r.slot && w.begin < r.end && r.begin < w.end) read_tiles[producer.node].insert(p);
      }
    for (const auto& [node, tiles] : read_tiles)
      if (tiles.size() < program.nodes[node].task_count) producer_tiles += tiles.size();
  }
  ASSERT_GT(producer_tiles, 0u);

  auto refusal = [&](const CompileOptions& limited) -> std::string {
    try {
      compile_model(spec, limited);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(compiled)";
  };
  CompileOptions limited = options;
  limited.most_tasks = program.tasks.size() - 1;
  EXPECT_NE(refusal(limited).find(std::to_string(program.tasks.size()) + " tasks, more than the " +
                                  std::to_string(program.tasks.size() - 1)),
            std::string::npos)
      << refusal(limited);
  limited.most_tasks = program.tasks.size();
  EXPECT_EQ(compile_model(spec, limited).tasks.size(), program.tasks.size());
  limited.most_producer_tiles = producer_tiles - 1;
  EXPECT_NE(refusal(limited).find("more than " + std::to_string(producer_tiles - 1) + " single producer tiles"), std::string::npos)
      << refusal(limited);
  limited.most_producer_tiles = producer_tiles;
  EXPECT_EQ(compile_model(spec, limited).tasks.size(), program.tasks.size());
}

// The task graph kept per event gives, task by task, the edges through events as a list of task-to-task
// edges built from the program directly: predecessors in the order of the task's waits and each event's
// signallers, successors as the same multiset (the policies' placements follow from these).
TEST(TaskGraph, GivesTheEdgesThroughEvents) {
  for (const EventGranularity granularity : {EventGranularity::tile, EventGranularity::head, EventGranularity::op}) {
    CompileOptions options;
    options.workers = 5;
    options.max_context = 64;
    options.granularity = granularity;
    const Program program = compile_model(preset_spec("small"), options);
    SCOPED_TRACE(int(granularity));
    const uint32_t n = uint32_t(program.tasks.size());
    std::vector<std::vector<uint32_t>> predecessors(n), successors(n);
    for (uint32_t t = 0; t < n; ++t) {
      const TaskDesc& task = program.tasks[t];
      for (uint32_t i = 0; i < task.wait_count; ++i)
        for (uint32_t s = 0; s < n; ++s) {
          const TaskDesc& signaller = program.tasks[s];
          for (uint32_t j = 0; j < signaller.signal_count; ++j)
            if (program.signals[signaller.signal_begin + j] == program.waits[task.wait_begin + i]) {
              predecessors[t].push_back(s);
              successors[s].push_back(t);
            }
        }
    }
    const TaskGraph graph = task_graph(program);
    uint64_t edges = 0;
    for (uint32_t t = 0; t < n; ++t) {
      std::vector<uint32_t> before, after;
      graph.for_each_predecessor(t, [&](uint32_t p) { before.push_back(p); });
      graph.for_each_successor(t, [&](uint32_t s) { after.push_back(s); });
      ASSERT_EQ(before, predecessors[t]) << "task " << t;
      EXPECT_EQ(graph.predecessor_count(t), predecessors[t].size());
      std::sort(after.begin(), after.end());
      ASSERT_EQ(after, successors[t]) << "task " << t;
      edges += before.size();
    }
    EXPECT_GT(edges, n);
  }
}

// What tensor-parallel ranks in separate processes compare (scheduler/program.h): it changes with what
// they must agree on, which tasks run where and in what order, and with nothing else.
TEST(PlacementDigest, ChangesWithTheTasksAndTheirPlacesOnly) {
  const Program base = tilefire::noop_program(12, /*chain=*/true, /*workers=*/3);
  const uint64_t digest = placement_digest(base);
  EXPECT_EQ(placement_digest(tilefire::noop_program(12, true, 3)), digest);

  Program other_data = base;  // events, slots and constants are not placement
  other_data.events[0].trigger_count = 7;
  other_data.constants.push_back(1.5f);
  other_data.slots.push_back(SlotDesc{});
  EXPECT_EQ(placement_digest(other_data), digest);

  std::vector<std::pair<std::string, std::function<void(Program&)>>> changes = {
      {"a task's op", [](Program& p) { p.tasks[4].op = OpCode::embed; }},
      {"a task's node", [](Program& p) { p.tasks[4].node = 1; }},
      {"a task moved to another queue", [](Program& p) {
         p.queues[1].push_back(p.queues[0].back());
         p.queues[0].pop_back();
       }},
      {"two tasks of a queue swapped", [](Program& p) { std::swap(p.queues[2][0], p.queues[2][1]); }},
      {"the last task of one queue made the first of the next",
       [](Program& p) {
         p.queues[1].insert(p.queues[1].begin(), p.queues[0].back());
         p.queues[0].pop_back();
       }},
      {"a queue more", [](Program& p) { p.queues.emplace_back(); }},
      {"a task more", [](Program& p) { p.tasks.push_back(p.tasks.back()); }},
      {"the placement", [](Program& p) { p.placement = Placement::dynamic_queue; }},
  };
  for (const auto& [what, change] : changes) {
    Program changed = base;
    change(changed);
    EXPECT_NE(placement_digest(changed), digest) << what;
  }
}

}  // namespace
}  // namespace tilefire::testing
