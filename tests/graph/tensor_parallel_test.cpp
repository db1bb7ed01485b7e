// The tensor-parallel split and plan: every head, FFN column and vocabulary row lands on exactly one rank
// (KV heads on exactly kv_replicas ranks), each rank's query heads use only the KV heads it holds, the
// memory of the ranks adds up to the unsplit model, and degrees the shapes do not allow are refused with
// the reason.
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "graph/tensor_parallel.h"
#include "scheduler/validator.h"
#include "ops/all_ops.h"
#include "tests/common/compare.h"
#include "tests/common/random_shapes.h"

namespace tilefire::testing {
namespace {

void expect_consistent_split(const ModelSpec& spec, uint32_t tp) {
  SCOPED_TRACE("tp " + std::to_string(tp));
  const TensorParallelSplit split = split_tensor_parallel(spec, tp);
  ASSERT_EQ(split.ranks.size(), tp);
  std::vector<int> q_owner(spec.heads, 0), kv_holders(spec.kv_heads, 0), ffn_owner(spec.ffn, 0), vocab_owner(spec.vocab, 0);
  for (const RankShard& r : split.ranks) {
    for (uint32_t h = r.q_head_begin; h < r.q_head_begin + r.q_heads; ++h) {
      ++q_owner.at(h);
      const uint32_t kv = h / spec.group();  // GQA: the KV head query head h reads
      EXPECT_GE(kv, r.kv_head_begin) << "rank " << r.rank << " query head " << h;
      EXPECT_LT(kv, r.kv_head_begin + r.kv_heads) << "rank " << r.rank << " query head " << h;
    }
    for (uint32_t h = r.kv_head_begin; h < r.kv_head_begin + r.kv_heads; ++h) ++kv_holders.at(h);
    for (uint32_t c = r.ffn_begin; c < r.ffn_begin + r.ffn; ++c) ++ffn_owner.at(c);
    for (uint32_t v = r.vocab_begin; v < r.vocab_begin + r.vocab; ++v) ++vocab_owner.at(v);
  }
  for (int n : q_owner) ASSERT_EQ(n, 1);
  for (int n : kv_holders) ASSERT_EQ(n, int(split.kv_replicas));
  for (int n : ffn_owner) ASSERT_EQ(n, 1);
  for (int n : vocab_owner) ASSERT_EQ(n, 1);
}

TEST(TensorParallel, SplitsOfThePresetsCoverEverythingOnce) {
  for (const std::string& preset : preset_names()) {
    const ModelSpec spec = preset_spec(preset, DType::bf16);
    SCOPED_TRACE(preset);
    for (uint32_t tp = 1; tp <= spec.heads; ++tp) {
      const bool allowed = spec.heads % tp == 0 && (spec.kv_heads >= tp ? spec.kv_heads % tp == 0 : tp % spec.kv_heads == 0);
      if (allowed) {
        expect_consistent_split(spec, tp);
      } else {
        EXPECT_THROW(split_tensor_parallel(spec, tp), InputError) << "tp " << tp;
      }
    }
  }
}

// The same over random shapes (tests/common/random_shapes.h): one KV head, groups of 1 to 4, FFN and
// vocabularies no degree divides, degrees up to the query heads and past the FFN or vocabulary.
TEST(TensorParallel, SplitsOfRandomShapesCoverEverythingOnce) {
  for (uint64_t seed = 1; seed <= random_case_count(200); ++seed) {
    ModelSpec spec = draw_random_case(seed).spec;
    if (seed % 2 == 0) spec.ffn = spec.ffn % 9 + 1;  // narrow: degrees past it are refused
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + std::to_string(spec.heads) + " heads, " + std::to_string(spec.kv_heads) +
                 " KV heads, ffn " + std::to_string(spec.ffn) + ", vocab " + std::to_string(spec.vocab));
    for (uint32_t tp = 1; tp <= spec.heads + 1; ++tp) {
      const bool allowed = tp <= spec.heads && spec.heads % tp == 0 &&
                           (spec.kv_heads >= tp ? spec.kv_heads % tp == 0 : tp % spec.kv_heads == 0) && spec.ffn >= tp &&
                           spec.vocab >= tp;
      if (allowed) {
        expect_consistent_split(spec, tp);
      } else {
        EXPECT_THROW(split_tensor_parallel(spec, tp), InputError) << "tp " << tp;
      }
    }
  }
}

// The example: 32 query / 8 KV heads split 8 ways is fine, 3 ways is not, and the message says why.
TEST(TensorParallel, RefusalsNameTheShapes) {
  const ModelSpec spec = preset_spec("llama-3.1-8b", DType::bf16);
  EXPECT_NO_THROW(split_tensor_parallel(spec, 8));
  EXPECT_EQ(split_tensor_parallel(spec, 16).kv_replicas, 2u);
  EXPECT_EQ(message_of<InputError>([&] { split_tensor_parallel(spec, 3); }),
            "--tp 3: the 32 query heads and 8 KV heads do not split evenly: 32 query heads over 3 ranks leaves a remainder of 2");
  const std::string too_many = message_of<InputError>([&] { split_tensor_parallel(spec, 64); });
  EXPECT_NE(too_many.find("more ranks than the model's 32 query heads"), std::string::npos) << too_many;
  ModelSpec odd = spec;
  odd.kv_heads = 6;
  odd.heads = 24;
  const std::string kv = message_of<InputError>([&] { split_tensor_parallel(odd, 4); });
  EXPECT_NE(kv.find("6 KV heads over 4 ranks"), std::string::npos) << kv;
  EXPECT_THROW(split_tensor_parallel(spec, 0), InputError);
  // A rank with no FFN column or vocabulary row would have nothing to produce what its peers read.
  ModelSpec narrow = preset_spec("tiny");
  narrow.ffn = 5;
  EXPECT_EQ(message_of<InputError>([&] { split_tensor_parallel(narrow, 8); }),
            "--tp 8 is more ranks than the model's 5 FFN columns: every rank needs at least one");
  narrow.ffn = 8;
  narrow.vocab = 7;
  EXPECT_EQ(message_of<InputError>([&] { split_tensor_parallel(narrow, 8); }),
            "--tp 8 is more ranks than the model's 7 vocabulary rows: every rank needs at least one");
  EXPECT_NO_THROW(split_tensor_parallel(narrow, 4));
}

// With two ranks or more the workspace holds the collectives' window too: two partial-sum slices per layer
// of a 128-token chunk's rows, and as many rows of the rank's logits (a prompt scored for its logprobs).
TEST(TensorParallel, TheWorkspaceOfRanksHoldsTheirWindow) {
  const ModelSpec spec = preset_spec("llama-3.1-8b", DType::bf16);
  const RankShard shard = split_tensor_parallel(spec, 8).ranks[3];
  const uint64_t window = rank_memory(spec, shard, 1024, 1, 8).workspace_bytes - rank_memory(spec, shard, 1024, 1, 1).workspace_bytes;
  EXPECT_EQ(window, 4ull * (2 * 32 * 128 * 4096 + 128 * (128256 / 8)));
}

// Weights of all ranks = the unsplit model + (tp - 1) copies of what every rank holds whole (embedding
// table, norms) and of the replicated KV projections.
TEST(TensorParallel, RankWeightsAddUpToTheModel) {
  for (const char* preset : {"tiny", "llama-3.2-1b", "llama-3.1-8b", "qwen3-8b"}) {
    const ModelSpec spec = preset_spec(preset, DType::bf16);
    const uint64_t whole = rank_memory(spec, split_tensor_parallel(spec, 1).ranks[0], 1024, 1, 1).weight_bytes;
    const uint64_t w = dtype_size(spec.dtype);
    uint64_t replicated_each = w * uint64_t(spec.vocab) * spec.hidden + 4ull * spec.hidden * (2 * spec.layers + 1);
    if (spec.qk_norm) replicated_each += 4ull * spec.head_dim * 2 * spec.layers;
    for (uint32_t tp : {2u, 4u, 8u}) {
      const TensorParallelSplit split = split_tensor_parallel(spec, tp);
      uint64_t sum = 0, kv_cache = 0;
      for (const RankShard& r : split.ranks) {
        const RankMemory m = rank_memory(spec, r, 1024, 1, tp);
        sum += m.weight_bytes;
        kv_cache += m.kv_cache_bytes;
      }
      const uint64_t kv_rows_bytes = w * 2ull * spec.kv_dim() * spec.hidden * spec.layers;
      const uint64_t expected = whole + (tp - 1) * replicated_each + (split.kv_replicas - 1) * kv_rows_bytes;
      EXPECT_EQ(sum, expected) << preset << " tp " << tp;
      EXPECT_EQ(kv_cache, split.kv_replicas * rank_memory(spec, split_tensor_parallel(spec, 1).ranks[0], 1024, 1, 1).kv_cache_bytes)
          << preset << " tp " << tp;
    }
  }
}

TEST(TensorParallel, ExchangedBytes) {
  const ModelSpec spec = preset_spec("llama-3.1-8b", DType::bf16);
  EXPECT_EQ(exchanged_bytes_per_token_layer(spec, 1), 0u);
  EXPECT_EQ(exchanged_bytes_per_token_layer(spec, 8), 2ull * 7 * 4096 * 4);
  const TensorParallelSplit split = split_tensor_parallel(spec, 8);
  EXPECT_EQ(logits_gather_bytes(spec, split.ranks[0]), (128256ull - 16032) * 4);
}

// The LM head reduces the greedy token inside its tiles on the cuda backend. A rank's tiles hold only its
// rows of the vocabulary, so under tensor parallelism the shard pass leaves that reduction to the logits
// all-gather, which sees the whole vocabulary (ops/cuda/collectives.cuh).
TEST(TensorParallel, TheLogitsAllGatherReducesTheGreedyTokenInsteadOfTheLmHead) {
  const ModelSpec spec = preset_spec("tiny");
  for (uint32_t tp : {1u, 2u}) {
    CompileOptions options;
    options.workers = 4;
    options.tp = tp;
    options.rank = tp - 1;
    const Program program = compile_model(spec, options);
    uint32_t heads = 0, gathers = 0;
    for (const NodeDesc& node : program.nodes) {
      if (node.params.op == OpCode::lm_head) {
        ++heads;
        EXPECT_EQ(node.params.as<LmHeadParams>().fused_argmax, tp == 1 ? 1u : 0u) << "tp " << tp;
      }
      if (node.params.op == OpCode::allgather_logits) ++gathers;
    }
    EXPECT_EQ(heads, 1u);
    EXPECT_EQ(gathers, tp == 1 ? 0u : 1u) << "tp " << tp;
  }
}

// Rank `rank`'s program runs rank 0's tasks (the same ops of the same nodes) in the same queues.
void expect_same_tasks_and_places(const Program& rank0, const Program& other, uint32_t rank) {
  ASSERT_EQ(other.tasks.size(), rank0.tasks.size()) << "rank " << rank;
  for (size_t t = 0; t < rank0.tasks.size(); ++t)
    ASSERT_TRUE(other.tasks[t].op == rank0.tasks[t].op && other.tasks[t].node == rank0.tasks[t].node) << "rank " << rank << ", task " << t;
  EXPECT_EQ(other.queues, rank0.queues) << "rank " << rank;
}

// Ranks wait on each other inside their collective tasks, so every rank's program must run the same tasks
// in the same places. A vocabulary or FFN that does not split evenly gives ranks one row more or less;
// with each rank's own tile width, 16,000 and 16,001 LM-head rows (a vocabulary of 32,001, as some
// Llama-2 fine-tunes have, on two ranks) made 250 and 251 tiles and the engine refused the degree.
TEST(TensorParallel, UnevenSharesGiveEveryRankTheSameTasks) {
  ModelSpec spec = preset_spec("llama-3.2-1b");
  spec.layers = 2;
  spec.vocab = 32001;  // shares 16001 / 16000 on two ranks, 8001 / 8000 / 8000 / 8000 on four
  spec.ffn = 8193;
  for (uint32_t tp : {2u, 4u}) {
    for (uint32_t workers : {1u, 3u, 8u}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + ", " + std::to_string(workers) + " workers");
      CompileOptions options;
      options.workers = workers;
      options.tp = tp;
      const Program first = compile_model(spec, options);
      EXPECT_EQ(bsp_order_violation(first), "");  // the collectives' edges go forward too
      for (uint32_t rank = 1; rank < tp; ++rank) {
        options.rank = rank;
        const Program other = compile_model(spec, options);
        expect_same_tasks_and_places(first, other, rank);
        // Each rank still covers its own share: the LM head's last tile ends at the rank's row count.
        for (const NodeDesc& node : other.nodes) {
          if (node.params.op != OpCode::lm_head) continue;
          const TaskDesc& last = other.tasks[node.first_task + node.task_count - 1];
          EXPECT_EQ(last.tile_end, split_tensor_parallel(spec, tp).ranks[rank].vocab) << "rank " << rank;
        }
      }
    }
  }
}

// The same property over random shapes, degrees, worker counts, policies and granularities, for decode
// and prefill programs (tests/common/random_shapes.h); shapes are scaled up on every other seed, so shares
// reach thousands of rows. The locality policy weighs tiles by their bytes and placed rank 3's tiles
// apart from rank 0's (first met at an FFN of 698 and a vocabulary of 43 on four ranks); other ranks
// now take rank 0's queues (compile_model).
TEST(TensorParallel, RandomShapesGiveEveryRankTheSameTasks) {
  for (uint64_t seed = 1; seed <= random_case_count(600); ++seed) {
    const RandomCase c = draw_random_case(seed);
    ModelSpec spec = c.spec;
    if (seed % 2 == 0) {
      spec.ffn = spec.ffn * 16 + 1;
      spec.vocab = spec.vocab * 64 + 3;
    }
    CompileOptions options;
    options.workers = uint32_t(1 + seed % 13);
    options.tokens = seed % 3 == 0 ? uint32_t(c.prompt.size()) : 1;
    options.policy = c.options.policy == "dynamic" ? "critical-path" : c.options.policy;
    options.granularity = seed % 2 ? EventGranularity::tile : EventGranularity::head;
    options.head_width = spec.head_dim;
    for (uint32_t tp : {2u, 3u, 4u}) {
      try {
        split_tensor_parallel(spec, tp);
      } catch (const InputError&) {
        continue;  // a degree these heads do not allow (SplitsOfRandomShapesCoverEverythingOnce)
      }
      SCOPED_TRACE("seed " + std::to_string(seed) + ", tp " + std::to_string(tp) + ", " + std::to_string(options.workers) +
                   " workers, " + options.policy + ", ffn " + std::to_string(spec.ffn) + ", vocab " + std::to_string(spec.vocab));
      options.tp = tp;
      options.rank = 0;
      const Program first = compile_model(spec, options);
      EXPECT_EQ(bsp_order_violation(first), "");  // the collectives' edges go forward too
      for (uint32_t rank = 1; rank < tp; ++rank) {
        options.rank = rank;
        expect_same_tasks_and_places(first, compile_model(spec, options), rank);
        if (::testing::Test::HasFailure()) return;  // one case's failures, not 600 seeds' worth
      }
    }
  }
}

}  // namespace
}  // namespace tilefire::testing
