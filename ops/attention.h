#pragma once
// Causal attention of one query head over one KV head's cache, with online softmax (one pass over the
// keys, running max and sum), so the score vector never exists in full.
#include <cstdint>

namespace tilefire {

// out[d] = sum_j softmax_j(scale * q . k_j) * v_j[d] over cache positions j in [0, n_positions).
// q: [head_dim]; k_cache, v_cache: [n_positions, head_dim] (row stride head_dim); out: [head_dim].
void attention_head(const float* q, const float* k_cache, const float* v_cache, uint32_t n_positions,
                    uint32_t head_dim, float scale, float* out);

// The reference: two passes (max, then exp-sum), double accumulation.
void attention_head_reference(const float* q, const float* k_cache, const float* v_cache,
                              uint32_t n_positions, uint32_t head_dim, float scale, float* out);

}  // namespace tilefire
