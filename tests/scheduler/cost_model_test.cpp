// The cost model: a task's bytes and flops from its op and tile shapes, computed here independently from
// the model's dimensions; the device presets; a task's modelled time.
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "ops/all_ops.h"
#include "scheduler/cost_model.h"
#include "scheduler/simulator.h"

namespace tilefire::testing {
namespace {

TEST(CostModel, MatrixAndAttentionTilesFromTheirShapes) {
  const ModelSpec spec = preset_spec("small", DType::bf16);
  CompileOptions options;
  options.workers = 8;
  options.tokens = 3;
  options.max_context = 256;
  const Program program = compile_model(spec, options);
  bool saw_down = false, saw_attention = false, saw_lm_head = false;
  for (const TaskDesc& task : program.tasks) {
    const TaskWork work = task_work(program, task, 100);
    const double rows = task.tile_end - task.tile_begin;
    if (task.op == OpCode::matmul_residual) {
      const auto& p = program.nodes[task.node].params.as<MatmulResidualParams>();
      EXPECT_DOUBLE_EQ(work.weight_bytes, rows * p.K * 2);
      EXPECT_DOUBLE_EQ(work.flops, 2.0 * rows * p.K * 3);
      // reads x [3, K] and the residual's columns, writes the output's columns: f32 each
      EXPECT_DOUBLE_EQ(work.activation_bytes, 3.0 * 4 * (p.K + 2 * rows));
      EXPECT_DOUBLE_EQ(work.input_row_bytes, 3.0 * 4 * (p.K + rows));  // what it reads of them
      // A device with the inputs in cache streams the weights and the output only.
      DeviceModel cached = *device_preset("h200"), uncached = cached;
      cached.input_rows_cached = true;
      EXPECT_DOUBLE_EQ(streamed_bytes(uncached, work), work.bytes());
      EXPECT_DOUBLE_EQ(streamed_bytes(cached, work), rows * p.K * 2 + 3.0 * 4 * rows);
      saw_down |= p.K == spec.ffn;
    } else if (task.op == OpCode::causal_attention) {
      // q.k and p.v: 4 flops per head, dimension, position and token; K and V of one KV head read
      EXPECT_DOUBLE_EQ(work.flops, 4.0 * rows * spec.head_dim * 100 * 3);
      EXPECT_DOUBLE_EQ(work.weight_bytes, 0);
      EXPECT_DOUBLE_EQ(work.activation_bytes, 2.0 * 100 * spec.head_dim * 4 + 2.0 * 3 * rows * spec.head_dim * 4);
      EXPECT_DOUBLE_EQ(work.input_row_bytes, 0);  // no matrix: its reads are a KV cache's and q's, from memory
      saw_attention = true;
    } else if (task.op == OpCode::lm_head) {
      EXPECT_DOUBLE_EQ(work.flops, 2.0 * rows * spec.hidden);  // the last token only
      saw_lm_head = true;
    }
  }
  EXPECT_TRUE(saw_down && saw_attention && saw_lm_head);
}

// A batched decode step (the simulator's --batch): B tokens, one per sequence, each sequence with its own
// cache. Matrix tiles read their weights once for all B tokens; attention tiles read B caches, split
// over KV positions as at decode (chunk tiles cover the context once per sequence).
TEST(CostModel, BatchedDecodeReadsOneCachePerSequence) {
  const ModelSpec spec = preset_spec("small", DType::bf16);
  CompileOptions options;
  options.workers = 64;
  options.tokens = 4;
  options.batched_decode = true;
  options.max_context = 512;
  const Program program = compile_model(spec, options);
  double chunk_kv_bytes_one = 0, chunk_kv_bytes_four = 0;
  bool saw_matrix = false;
  for (const TaskDesc& task : program.tasks) {
    const TaskWork one = task_work(program, task, 200, 1), four = task_work(program, task, 200, 4);
    EXPECT_DOUBLE_EQ(one.weight_bytes, four.weight_bytes) << op_name(task.op);
    EXPECT_DOUBLE_EQ(one.flops, four.flops) << op_name(task.op);  // flops already count every token
    if (task.op == OpCode::attention_chunk) {
      chunk_kv_bytes_one += one.activation_bytes;
      chunk_kv_bytes_four += four.activation_bytes;
    } else {
      EXPECT_DOUBLE_EQ(one.activation_bytes, four.activation_bytes) << op_name(task.op);
      saw_matrix |= task.op == OpCode::gate_up_swiglu;
    }
  }
  EXPECT_TRUE(saw_matrix);
  ASSERT_GT(chunk_kv_bytes_one, 0.0) << "64 workers against small's KV heads: attention splits at a batched decode";
  // K and V of every KV head of every layer over 200 positions, per extra sequence; q and the records are
  // the same for both.
  EXPECT_NEAR(chunk_kv_bytes_four - chunk_kv_bytes_one, 3.0 * spec.layers * 2 * spec.kv_heads * 200.0 * spec.head_dim * 4, 1e-3);
}

// Collective tasks read their peers' data over the link: an all-reduce tile (R - 1) partial sums of its
// columns, the logits all-gather the other ranks' shares.
TEST(CostModel, CollectiveTasksCrossTheLink) {
  const ModelSpec spec = preset_spec("small", DType::bf16);
  CompileOptions options;
  options.workers = 8;
  options.tokens = 2;
  options.max_context = 256;
  options.tp = 4;
  options.rank = 1;
  const Program program = compile_model(spec, options);
  bool saw_reduce = false, saw_gather = false;
  for (const TaskDesc& task : program.tasks) {
    const TaskWork work = task_work(program, task, 64);
    if (task.op == OpCode::allreduce_residual) {
      EXPECT_DOUBLE_EQ(work.link_bytes, 3.0 * (task.tile_end - task.tile_begin) * 2 * 4);
      saw_reduce = true;
    } else if (task.op == OpCode::allgather_logits) {
      const double own = task.tile_begin <= 1 && 1 < task.tile_end ? spec.vocab / 4.0 : 0.0;
      EXPECT_DOUBLE_EQ(work.link_bytes, (double(task.tile_end - task.tile_begin) * spec.vocab / 4.0 - own) * 4);
      saw_gather = true;
    } else {
      EXPECT_EQ(work.link_bytes, 0.0) << op_name(task.op);
    }
  }
  EXPECT_TRUE(saw_reduce && saw_gather);
  const DeviceModel h200 = *device_preset("h200");
  TaskWork reduce;
  reduce.link_bytes = 132 * 450.0;  // an even share of the link: 450 / 132 bytes per ns
  EXPECT_NEAR(modelled_link_ns(h200, reduce), h200.link_latency_ns + 132 * 450.0 / (450.0 / 132), 1e-6);
}

// The GPU presets stage weights only for steps of up to 4 tokens, as the kernel does: a 16-token step
// fetches nothing ahead, a 1-token step does.
TEST(CostModel, TheRingStagesOnlySmallSteps) {
  const ModelSpec spec = preset_spec("tiny", DType::bf16);
  const DeviceModel h200 = *device_preset("h200");
  DeviceModel unlimited = h200;
  unlimited.prefetch_max_tokens = 0;
  SimulationOptions no_prefetch;
  no_prefetch.prefetch_while_waiting = false;
  for (uint32_t tokens : {1u, 16u}) {
    SCOPED_TRACE("tokens " + std::to_string(tokens));
    CompileOptions options;
    options.workers = h200.workers;
    options.tokens = tokens;
    options.max_context = 64;
    const Program program = compile_model(spec, options);
    const double with_limit = simulate_program(program, h200, 32).step_ns;
    const double without_prefetch = simulate_program(program, h200, 32, no_prefetch).step_ns;
    if (tokens > h200.prefetch_max_tokens) {
      EXPECT_DOUBLE_EQ(with_limit, without_prefetch);
      EXPECT_LT(simulate_program(program, unlimited, 32).step_ns, with_limit);
    } else {
      EXPECT_LT(with_limit, without_prefetch);
    }
  }
}

TEST(CostModel, DevicePresetsAndTaskTime) {
  const auto h200 = device_preset("h200");
  ASSERT_TRUE(h200.has_value());
  EXPECT_EQ(h200->workers, 132u);
  EXPECT_DOUBLE_EQ(h200->memory_gbs, 4800);
  // The kernel's stage ring (6 x 32 KiB), filled over the CTA's queue.
  EXPECT_DOUBLE_EQ(h200->prefetch_bytes, 6 * 32768);
  EXPECT_EQ(h200->prefetch_tasks, 0u);
  EXPECT_EQ(h200->prefetch_max_tokens, 4u);
  EXPECT_EQ(h200->stall_ns, 0.0);  // an SM is not taken away
  EXPECT_EQ(h200->stall_every_ns, 0.0);
  EXPECT_DOUBLE_EQ(h200->shared_memory_bytes, 227 * 1024 - 1024);  // a block's opt-in, less the kernel's static
  EXPECT_FALSE(device_preset("tpu").has_value());
  // Peaks per weight dtype: the tensor cores' for bf16 and f16, the CUDA cores' for f32.
  DeviceModel f32 = *h200, f16 = *h200;
  ASSERT_TRUE(select_weight_dtype(f32, DType::f32));
  EXPECT_DOUBLE_EQ(f32.flops, 67e12);
  ASSERT_TRUE(select_weight_dtype(f16, DType::f16));
  EXPECT_DOUBLE_EQ(f16.flops, 989e12);
  DeviceModel one_figure{"one", 4, 100, 1e12};  // no figure per dtype: the one it has, for any
  ASSERT_TRUE(select_weight_dtype(one_figure, DType::bf16));
  EXPECT_DOUBLE_EQ(one_figure.flops, 1e12);
  DeviceModel none{"none", 4, 100, 0};
  none.dtype_flops[size_t(DType::f32)] = 5e11;
  EXPECT_FALSE(select_weight_dtype(none, DType::bf16));  // only an f32 figure, and bf16 weights
  EXPECT_TRUE(select_weight_dtype(none, DType::f32));
  EXPECT_DOUBLE_EQ(none.flops, 5e11);
  TaskWork memory_bound;
  memory_bound.weight_bytes = 132e3;  // 1 KB per ns per worker share on 132 workers: 4800/132 GB/s
  EXPECT_NEAR(modelled_task_ns(*h200, memory_bound), 132e3 / (4800.0 / 132) + h200->dispatch_ns, 1e-6);
  TaskWork compute_bound;
  compute_bound.flops = 1e12;
  EXPECT_NEAR(modelled_task_ns(*h200, compute_bound), 1e12 / (989e12 * 1e-9 / 132) + h200->dispatch_ns, 1e-3);
}

// The epilogues: RoPE's (cos, sin) pairs for the q and k heads of a QKV tile (not v), one sigmoid per
// FFN column of a gate/up tile, one exponential per score of an attention tile; charged after the
// streaming at the device's per-worker rates.
TEST(CostModel, RotationsAndExponentialsFromTheTileShapes) {
  const ModelSpec spec = preset_spec("tiny", DType::bf16);  // 8 query heads, 2 KV heads, head_dim 32
  CompileOptions options;
  options.workers = 3;
  options.tokens = 2;
  options.max_context = 64;
  options.kv_splits = 1;
  const Program program = compile_model(spec, options);
  double rotations = 0, sigmoids = 0;
  bool saw_attention = false;
  for (const TaskDesc& task : program.tasks) {
    const TaskWork work = task_work(program, task, 20);
    if (task.op == OpCode::qkv_projection) {
      rotations += work.rotations;
    } else {
      EXPECT_DOUBLE_EQ(work.rotations, 0) << op_name(task.op);
    }
    if (task.op == OpCode::gate_up_swiglu) sigmoids += work.exps;
    if (task.op == OpCode::causal_attention) {
      EXPECT_DOUBLE_EQ(work.exps, double(task.tile_end - task.tile_begin) * 20 * 2);
      saw_attention = true;
    }
    if (task.op == OpCode::matmul_residual || task.op == OpCode::lm_head) {
      EXPECT_DOUBLE_EQ(work.exps, 0);
    }
  }
  // Per layer and token: (8 q + 2 k heads) x 16 pairs, and 688 sigmoids.
  EXPECT_DOUBLE_EQ(rotations, double(spec.layers) * 2 * (8 + 2) * 16);
  EXPECT_DOUBLE_EQ(sigmoids, double(spec.layers) * 2 * 688);
  EXPECT_TRUE(saw_attention);

  DeviceModel device{"test", 4, 400, 1e12, 10, 0, 0, 0, 20, 3};
  TaskWork work;
  work.weight_bytes = 1000;  // 10 ns at 100 GB/s per worker
  work.rotations = 5;
  work.exps = 7;
  EXPECT_DOUBLE_EQ(modelled_epilogue_ns(device, work), 5 * 20 + 7 * 3);
  EXPECT_DOUBLE_EQ(modelled_task_ns(device, work), 10 + 5 * 20 + 7 * 3 + 10);
}

}  // namespace
}  // namespace tilefire::testing
