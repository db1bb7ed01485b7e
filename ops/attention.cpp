// Attention of one query head over one KV head's cache.
// attention_head: one pass over the cache in blocks of positions with online softmax (running max m and
// running sum l; when a block raises the max, the accumulated output and l are rescaled by exp(m_old -
// m_new)), so scores for the whole sequence are never materialised and K and V are each read once.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tilefire {

namespace {

constexpr uint32_t kPositionsPerBlock = 32;  // scores of one block live on the stack
constexpr uint32_t kStackHeadDim = 512;      // larger heads fall back to a heap accumulator

// sum_d a[d] * b[d] in float, 2 x 8 lanes then a fixed reduction, scalar tail.
inline float dot_product(const float* a, const float* b, uint32_t n) {
  uint32_t d = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; d + 16 <= n; d += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), acc1);
  }
  if (d + 8 <= n) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc0);
    d += 8;
  }
  __m256 s8 = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  sum = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
#endif
  for (; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// y[d] = y[d] * y_scale + p * v[d]
inline void scale_and_accumulate(float* y, float y_scale, float p, const float* v, uint32_t n) {
  uint32_t d = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 ys = _mm256_set1_ps(y_scale), pv = _mm256_set1_ps(p);
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(y + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + d), _mm256_mul_ps(_mm256_loadu_ps(y + d), ys)));
#endif
  for (; d < n; ++d) y[d] = y[d] * y_scale + p * v[d];
}

// max that propagates NaN (std::max drops a NaN second argument), so a NaN score poisons the output.
inline float max_propagating_nan(float a, float b) { return (b > a || b != b) ? b : a; }

}  // namespace

// The online softmax over positions [first, end), left unnormalised in `record` (ops/attention.h);
// position j's key and value are row j % cache_rows of k_cache and v_cache (a sliding layer's ring).
void attention_head_partial(const float* q, const float* k_cache, const float* v_cache, uint32_t first, uint32_t end,
                            uint32_t cache_rows, uint32_t head_dim, float scale, float softcap, float* record) {
  float* acc = record;  // [head_dim]: sum_j exp(s_j - running_max) * v_j
  std::fill(acc, acc + head_dim, 0.0f);
  float running_max = -std::numeric_limits<float>::infinity();
  float running_sum = 0.0f;
  float scores[kPositionsPerBlock];  // [block positions]
  // The row of each block's first position; within a block a row steps by one and wraps at the ring's end.
  auto next_row = [cache_rows](uint32_t row) { return row + 1 == cache_rows ? 0u : row + 1; };
  uint32_t block_row = first < end ? first % cache_rows : 0;
  for (uint32_t block = first; block < end; block += kPositionsPerBlock) {
    const uint32_t count = std::min(kPositionsPerBlock, end - block);
    const uint32_t first_row = block_row;
    float block_max = -std::numeric_limits<float>::infinity();
    for (uint32_t j = 0; j < count; ++j, block_row = next_row(block_row)) {  // leaves block_row at the next block's
      scores[j] = soft_capped(scale * dot_product(q, k_cache + size_t(block_row) * head_dim, head_dim), softcap);
      block_max = max_propagating_nan(block_max, scores[j]);
    }
    const float new_max = max_propagating_nan(running_max, block_max);
    // All scores so far are -inf (masked keys): keep max at -inf and skip, nothing to accumulate.
    if (new_max == -std::numeric_limits<float>::infinity()) continue;
    // Rescale what was accumulated under the old max (exp(-inf) = 0 on the first block).
    float correction = std::exp(running_max - new_max);
    running_sum *= correction;
    for (uint32_t j = 0, row = first_row; j < count; ++j, row = next_row(row)) {
      const float p = std::exp(scores[j] - new_max);
      running_sum += p;
      scale_and_accumulate(acc, correction, p, v_cache + size_t(row) * head_dim, head_dim);
      correction = 1.0f;  // the rescale is folded into the first position's update only
    }
    running_max = new_max;
  }
  record[head_dim] = running_max;
  record[head_dim + 1] = running_sum;
}

// An empty range gives zeros (no keys to attend to), in both this and the reference.
void attention_head_window(const float* q, const float* k_cache, const float* v_cache, uint32_t first, uint32_t end,
                           uint32_t cache_rows, uint32_t head_dim, float scale, float softcap, float* out) {
  alignas(64) float stack_record[kStackHeadDim + 2];
  std::vector<float> heap_record;
  float* record = stack_record;  // [head_dim + 2]
  if (head_dim > kStackHeadDim) {
    heap_record.resize(attention_record_floats(head_dim));
    record = heap_record.data();
  }
  attention_head_partial(q, k_cache, v_cache, first, end, cache_rows, head_dim, scale, softcap, record);
  // A NaN score reaches here as a NaN sum and NaN accumulator, so a corrupt cache is visible; only
  // "no attendable key" (an empty range or every score -inf) gives zeros.
  const float running_sum = record[head_dim + 1];
  const float inverse_sum = running_sum == 0.0f ? 0.0f : 1.0f / running_sum;
  for (uint32_t d = 0; d < head_dim; ++d) out[d] = running_sum == 0.0f ? 0.0f : record[d] * inverse_sum;
}

void attention_head(const float* q, const float* k_cache, const float* v_cache, uint32_t n_positions,
                    uint32_t head_dim, float scale, float softcap, float* out) {
  attention_head_window(q, k_cache, v_cache, 0, n_positions, n_positions == 0 ? 1 : n_positions, head_dim, scale, softcap, out);
}

void merge_attention_records(const float* records, uint32_t count, uint64_t stride, uint32_t head_dim, float* out) {
  float common_max = -std::numeric_limits<float>::infinity();
  for (uint32_t c = 0; c < count; ++c) common_max = max_propagating_nan(common_max, records[c * stride + head_dim]);
  float total = 0.0f;
  std::fill(out, out + head_dim, 0.0f);
  for (uint32_t c = 0; c < count; ++c) {
    const float* record = records + c * stride;
    if (record[head_dim] == -std::numeric_limits<float>::infinity()) continue;  // an empty range
    const float weight = std::exp(record[head_dim] - common_max);
    total += weight * record[head_dim + 1];
    for (uint32_t d = 0; d < head_dim; ++d) out[d] += weight * record[d];
  }
  const float inverse_total = total == 0.0f ? 0.0f : 1.0f / total;
  for (uint32_t d = 0; d < head_dim; ++d) out[d] = total == 0.0f ? 0.0f : out[d] * inverse_total;
}

void attention_head_reference(const float* q, const float* k_cache, const float* v_cache,
                              uint32_t n_positions, uint32_t head_dim, float scale, float softcap, float* out) {
  std::vector<double> scores(n_positions);  // [n_positions]
  double max_score = -std::numeric_limits<double>::infinity();
  for (uint32_t j = 0; j < n_positions; ++j) {
    double dot = 0.0;
    for (uint32_t d = 0; d < head_dim; ++d) dot += double(q[d]) * double(k_cache[size_t(j) * head_dim + d]);
    scores[j] = double(scale) * dot;
    if (softcap != 0.0f) scores[j] = double(softcap) * std::tanh(scores[j] / double(softcap));
    if (scores[j] > max_score || scores[j] != scores[j]) max_score = scores[j];  // NaN propagates
  }
  if (max_score == -std::numeric_limits<double>::infinity()) {  // no key (or all masked): zeros
    std::fill(out, out + head_dim, 0.0f);
    return;
  }
  double sum = 0.0;
  for (uint32_t j = 0; j < n_positions; ++j) {
    scores[j] = std::exp(scores[j] - max_score);
    sum += scores[j];
  }
  for (uint32_t d = 0; d < head_dim; ++d) {
    double value = 0.0;
    for (uint32_t j = 0; j < n_positions; ++j) value += scores[j] * double(v_cache[size_t(j) * head_dim + d]);
    out[d] = float(value / sum);
  }
}

}  // namespace tilefire
