#pragma once
// How a model splits over tensor-parallel ranks (Megatron style): query heads, KV heads (replicated when
// there are more ranks than KV heads), FFN columns and vocabulary rows per rank; and what each rank then
// holds and exchanges. The shard pass (graph/shard.cpp) and `tilefire plan` both start from this.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_spec.h"

namespace tilefire {

struct RankShard {
  uint32_t rank = 0;
  uint32_t q_head_begin = 0, q_heads = 0;    // query heads [begin, begin + count)
  uint32_t kv_head_begin = 0, kv_heads = 0;  // KV heads this rank holds (a copy, when replicated)
  uint32_t ffn_begin = 0, ffn = 0;           // gate/up rows and down columns
  uint32_t vocab_begin = 0, vocab = 0;       // LM-head rows
};

struct TensorParallelSplit {
  uint32_t tp = 1;
  uint32_t kv_replicas = 1;  // ranks holding each KV head (1: KV heads are split, not replicated)
  std::vector<RankShard> ranks;
};

// Throws InputError saying why when the model's shapes do not allow `tp` ranks (query heads must split
// evenly; KV heads must split evenly or, with more ranks than KV heads, be replicated evenly).
TensorParallelSplit split_tensor_parallel(const ModelSpec& spec, uint32_t tp);

// Per rank: bytes of weights, KV cache and workspace, and the bytes each rank reads from its peers.
struct RankMemory {
  uint64_t weight_bytes = 0;     // as stored in the checkpoint's dtype; norms and biases as f32
  // f32 K and V of the rank's KV heads, all layers: `context` positions of each of `sequences`, or on
  // the cpu a sliding-window layer's ring of its window and a step's tokens (ops/tile.h, sliding_cache_rows)
  uint64_t kv_cache_bytes = 0;
  // The activations of a 128-token prefill chunk and the logits; with 2 ranks or more, the collectives'
  // window (two partial-sum slices per layer of the chunk's rows, and its rows of the rank's logits)
  uint64_t workspace_bytes = 0;
  uint64_t total() const { return weight_bytes + kv_cache_bytes + workspace_bytes; }
};
// `step_tokens`: the most tokens of one sequence a step runs (EngineOptions::prefill_chunk), which sizes
// the cpu backend's rings; 0: no rings, every layer `context` positions (the cuda backend; `plan`).
RankMemory rank_memory(const ModelSpec& spec, const RankShard& shard, uint32_t context, uint32_t sequences, uint32_t tp,
                       uint32_t step_tokens = 0);

// Bytes one rank reads from its peers per token and layer: two one-shot all-reduces of the hidden state
// (after the O and the down projections), each reading tp - 1 partial sums of `hidden` f32 values.
uint64_t exchanged_bytes_per_token_layer(const ModelSpec& spec, uint32_t tp);
// And once per step, the all-gather of the logits: the vocabulary rows the rank does not own, as f32.
uint64_t logits_gather_bytes(const ModelSpec& spec, const RankShard& shard);

}  // namespace tilefire
