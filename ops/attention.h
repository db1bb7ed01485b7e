#pragma once
// Causal attention of one query head over one KV head's cache, with online softmax (one pass over the
// keys, running max and sum), so the score vector never exists in full.
#include <math.h>

#include <cstdint>

#include "ops/host_device.h"

namespace tilefire {

// Gemma's logit soft cap, cap * tanh(value / cap): |value| bounded below cap, smoothly; cap 0 leaves the
// value as it is. Attention scores are capped after their scale (before the causal mask: a masked key
// never reaches it), the LM head's logits after theirs. Host and device compute the same expression
// (tanhf of value times 1/cap, a reciprocal a score loop computes once).
TILEFIRE_HD inline float soft_capped(float value, float cap) {
  return cap == 0.0f ? value : cap * tanhf(value * (1.0f / cap));
}

// out[d] = sum_j softmax_j(soft_capped(scale * q . k_j, softcap)) * v_j[d] over cache positions j in
// [0, n_positions). q: [head_dim]; k_cache, v_cache: [n_positions, head_dim] (row stride head_dim); out: [head_dim].
void attention_head(const float* q, const float* k_cache, const float* v_cache, uint32_t n_positions,
                    uint32_t head_dim, float scale, float softcap, float* out);

// The same over positions [first, end) of a cache of `cache_rows` rows, position j in row j % cache_rows
// (ops/tile.h: a sliding-window layer's ring; a cache that never wraps has j < cache_rows, row j).
// k_cache, v_cache: [cache_rows, head_dim], the (sequence, KV head)'s rows.
void attention_head_window(const float* q, const float* k_cache, const float* v_cache, uint32_t first, uint32_t end,
                           uint32_t cache_rows, uint32_t head_dim, float scale, float softcap, float* out);

// Split-KV attention (ops/attention_chunk.h, ops/attention_merge.h) keeps, per query head and range of
// positions, the online softmax's state unnormalised: a record of head_dim + 2 floats,
//   [acc[0 .. head_dim), max, sum],  acc[d] = sum_j exp(s_j - max) v_j[d],  sum = sum_j exp(s_j - max),
// over positions j in [first, end) (rows as attention_head_window's). An empty range (or all scores -inf)
// gives max = -inf, sum = 0, acc = 0.
constexpr uint32_t attention_record_floats(uint32_t head_dim) { return head_dim + 2; }
void attention_head_partial(const float* q, const float* k_cache, const float* v_cache, uint32_t first, uint32_t end,
                            uint32_t cache_rows, uint32_t head_dim, float scale, float softcap, float* record);

// out[d] = sum_c exp(max_c - M) acc_c[d] / sum_c exp(max_c - M) sum_c over `count` records (M: the largest
// max), records `stride` floats apart, merged in index order (the same bits every run). Records of empty
// ranges count for nothing; when every one is empty, out is zeros. A NaN max or sum propagates.
void merge_attention_records(const float* records, uint32_t count, uint64_t stride, uint32_t head_dim, float* out);

// The reference: two passes (max, then exp-sum), double accumulation (the cap's tanh too).
void attention_head_reference(const float* q, const float* k_cache, const float* v_cache,
                              uint32_t n_positions, uint32_t head_dim, float scale, float softcap, float* out);

}  // namespace tilefire
