// Splitting a model over tensor-parallel ranks (graph/tensor_parallel.h).
#include "graph/tensor_parallel.h"

#include "ops/tile.h"  // sliding_cache_rows

#include <algorithm>

namespace tilefire {

namespace {

// Rank r's share of n items split as evenly as possible: [begin, begin + count).
void balanced_share(uint32_t n, uint32_t tp, uint32_t r, uint32_t& begin, uint32_t& count) {
  const uint32_t base = n / tp, extra = n % tp;
  begin = r * base + std::min(r, extra);
  count = base + (r < extra ? 1 : 0);
}

}  // namespace

TensorParallelSplit split_tensor_parallel(const ModelSpec& spec, uint32_t tp) {
  if (tp == 0) throw InputError("--tp must be at least 1");
  const std::string shape = std::to_string(spec.heads) + " query heads and " + std::to_string(spec.kv_heads) + " KV heads";
  if (tp > spec.heads)
    throw InputError("--tp " + std::to_string(tp) + " is more ranks than the model's " + std::to_string(spec.heads) +
                     " query heads");
  if (spec.heads % tp != 0)
    throw InputError("--tp " + std::to_string(tp) + ": the " + shape + " do not split evenly: " + std::to_string(spec.heads) +
                     " query heads over " + std::to_string(tp) + " ranks leaves a remainder of " + std::to_string(spec.heads % tp));
  // Every rank needs a share of the FFN and of the vocabulary (a rank with none would have no gate/up or
  // LM-head tile to produce what its down projection and the logits all-gather read).
  if (spec.ffn < tp || spec.vocab < tp)
    throw InputError("--tp " + std::to_string(tp) + " is more ranks than the model's " +
                     (spec.ffn < tp ? std::to_string(spec.ffn) + " FFN columns" : std::to_string(spec.vocab) + " vocabulary rows") +
                     ": every rank needs at least one");
  TensorParallelSplit split;
  split.tp = tp;
  if (spec.kv_heads >= tp) {
    if (spec.kv_heads % tp != 0)
      throw InputError("--tp " + std::to_string(tp) + ": the " + shape + " do not split evenly: " +
                       std::to_string(spec.kv_heads) + " KV heads over " + std::to_string(tp) + " ranks leaves a remainder of " +
                       std::to_string(spec.kv_heads % tp));
  } else {
    if (tp % spec.kv_heads != 0)
      throw InputError("--tp " + std::to_string(tp) + ": the " + shape + " do not split evenly: with more ranks than KV heads " +
                       "each KV head is replicated, which needs the ranks to be a multiple of the " +
                       std::to_string(spec.kv_heads) + " KV heads");
    split.kv_replicas = tp / spec.kv_heads;
  }
  const uint32_t q_per_rank = spec.heads / tp;
  for (uint32_t r = 0; r < tp; ++r) {
    RankShard s;
    s.rank = r;
    s.q_head_begin = r * q_per_rank;
    s.q_heads = q_per_rank;
    if (split.kv_replicas == 1) {
      s.kv_heads = spec.kv_heads / tp;
      s.kv_head_begin = r * s.kv_heads;
    } else {
      s.kv_heads = 1;
      s.kv_head_begin = r / split.kv_replicas;  // the KV head of this rank's query heads
    }
    balanced_share(spec.ffn, tp, r, s.ffn_begin, s.ffn);
    balanced_share(spec.vocab, tp, r, s.vocab_begin, s.vocab);
    split.ranks.push_back(s);
  }
  return split;
}

RankMemory rank_memory(const ModelSpec& spec, const RankShard& shard, uint32_t context, uint32_t sequences, uint32_t tp,
                       uint32_t step_tokens) {
  const uint64_t w = dtype_size(spec.dtype), hidden = spec.hidden, hd = spec.head_dim;
  const uint64_t q = uint64_t(shard.q_heads) * hd, kv = uint64_t(shard.kv_heads) * hd, ffn = shard.ffn;
  RankMemory m;
  uint64_t per_layer = w * hidden * (q + 2 * kv)  // Wq, Wk, Wv rows of the rank's heads
                       + w * hidden * q            // Wo columns
                       + w * hidden * ffn * 3      // gate and up rows, down columns
                       + 4 * hidden * (spec.sandwich_norms() ? 4 : 2);  // the norms, as f32 (Gemma's four)
  if (spec.qkv_bias) per_layer += 4 * (q + 2 * kv);
  if (spec.qk_norm) per_layer += 4 * hd * 2;
  m.weight_bytes = per_layer * spec.layers + 4 * hidden      // + the final norm
                   + w * uint64_t(spec.vocab) * hidden;      // the embedding table, on every rank
  if (!spec.tie_embeddings) m.weight_bytes += w * uint64_t(shard.vocab) * hidden;  // the rank's LM-head rows
  for (uint32_t layer = 0; layer < spec.layers; ++layer)  // [sequences, kv_heads, rows, head_dim], K and V
    m.kv_cache_bytes += 2ull * kv * sequences *
                        (step_tokens == 0 ? context : sliding_cache_rows(spec.attention_window(layer), step_tokens, context)) * sizeof(float);
  const uint64_t chunk = 128;  // the largest prefill chunk (EngineOptions::prefill_chunk): the widest step's tokens
  // Gemma's post-norms keep the O and down outputs before their norms: two more hidden-wide values a layer.
  const uint64_t hidden_values = spec.sandwich_norms() ? 7 : 5;
  m.workspace_bytes = sizeof(float) * (chunk * spec.layers * (hidden_values * hidden + 2 * q + ffn) + spec.vocab + shard.vocab);
  if (tp > 1) m.workspace_bytes += sizeof(float) * (2 * spec.layers * chunk * hidden + chunk * uint64_t(shard.vocab));
  return m;
}

uint64_t exchanged_bytes_per_token_layer(const ModelSpec& spec, uint32_t tp) {
  return 2ull * (tp - 1) * spec.hidden * sizeof(float);
}

uint64_t logits_gather_bytes(const ModelSpec& spec, const RankShard& shard) {
  return uint64_t(spec.vocab - shard.vocab) * sizeof(float);
}

}  // namespace tilefire
