// CPU matmul tile: the GEMV of decode and the register-blocked GEMM of prefill.
//
// Determinism contract: the value of y[m][n] depends only on W's row n, x's row m and K, never on which
// tile computed it, on [n0, n1) or on M. Every output is accumulated in one canonical order, whatever
// kernel shape (rows x tokens) computes it:
//   1. 16 float lanes; lane j accumulates w[k] * x[k] for k = 16i + j over the full 16-blocks of K, with
//      a fused multiply-add per step (one rounding per step);
//   2. the lanes are summed by a fixed tree: j + (j+8), then j + (j+4), then j + (j+2), then lane 0 + 1;
//   3. the K % 16 tail elements are added in order, each with a scalar fused multiply-add.
// The AVX-512 path holds the 16 lanes in one zmm, the AVX2 path in two ymm (lanes 0-7, 8-15), the
// scalar fallback in an array; all three perform the same operations, so within one build the bits
// never depend on tiling. (The reference differs: it accumulates in double.)
//
// Speed: decode is bound by weight bytes, so the kernel streams 16-byte (bf16/f16) or 32-byte (f32)
// weight loads from 4 rows at once, shares each loaded x vector between those rows, and keeps 4 x 2
// independent FMA chains (AVX2) in flight; horizontal sums happen once per output. At prefill each
// loaded weight vector is reused across a block of up to 4 tokens (4 x 4 tile of accumulators).
#include "ops/matmul.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <utility>

#if defined(__AVX2__) && defined(__FMA__)
// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* self-initialisation, GCC bug
// 105593) wherever those intrinsics inline; the warning location is the header, so silence it there only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace tilefire {
namespace {

// Element type of a weight array of each dtype.
template <DType D>
using WeightElement = std::conditional_t<D == DType::f32, float, uint16_t>;

template <DType D>
inline float weight_to_f32(WeightElement<D> w) {
  if constexpr (D == DType::f32) return w;
  else if constexpr (D == DType::bf16) return bf16_to_f32(w);
  else return f16_to_f32(w);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
// ---- AVX-512: the 16 canonical lanes in one zmm. ----
// Zen 4 executes 512-bit ops as two 256-bit halves, so the gain over AVX2 is in issue width and the
// 32 architectural registers (a 4 x 4 tile of accumulators fits without spills).
constexpr int kMaxTileTokens = 4;
struct Lanes16 {
  __m512 v;
};
inline Lanes16 lanes_zero() { return {_mm512_setzero_ps()}; }
inline Lanes16 lanes_load_f32(const float* p) { return {_mm512_loadu_ps(p)}; }
template <DType D>
inline Lanes16 lanes_load_weights(const WeightElement<D>* p) {
  if constexpr (D == DType::f32) {
    return {_mm512_loadu_ps(p)};
  } else if constexpr (D == DType::bf16) {  // bf16 -> f32: zero-extend to 32 bits, shift into the top half
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  } else {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
}
inline void lanes_fma(Lanes16& acc, const Lanes16& w, const Lanes16& x) {
  acc.v = _mm512_fmadd_ps(w.v, x.v, acc.v);
}
inline __m256 lanes_fold_to_8(const Lanes16& a) {  // lane j + lane j+8
  return _mm256_add_ps(_mm512_castps512_ps256(a.v),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
}
#define TILEFIRE_MATMUL_SIMD 1

#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// ---- AVX2: the 16 canonical lanes in two ymm. ----
// 16 ymm registers: a 4-row x 2-token tile is 16 accumulators, so prefill blocks 2 tokens at a time.
constexpr int kMaxTileTokens = 2;
struct Lanes16 {
  __m256 lo, hi;  // lanes 0-7, 8-15
};
inline Lanes16 lanes_zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline Lanes16 lanes_load_f32(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
template <DType D>
inline __m256 load8_weights(const WeightElement<D>* p) {
  if constexpr (D == DType::f32) {
    return _mm256_loadu_ps(p);
  } else if constexpr (D == DType::bf16) {  // bf16 -> f32: zero-extend to 32 bits, shift into the top half
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}
template <DType D>
inline Lanes16 lanes_load_weights(const WeightElement<D>* p) {
  return {load8_weights<D>(p), load8_weights<D>(p + 8)};
}
inline void lanes_fma(Lanes16& acc, const Lanes16& w, const Lanes16& x) {
  acc.lo = _mm256_fmadd_ps(w.lo, x.lo, acc.lo);
  acc.hi = _mm256_fmadd_ps(w.hi, x.hi, acc.hi);
}
inline __m256 lanes_fold_to_8(const Lanes16& a) { return _mm256_add_ps(a.lo, a.hi); }  // lane j + j+8
#define TILEFIRE_MATMUL_SIMD 1

#else
// ---- Scalar fallback: the same 16 lanes and the same operations, one float at a time. ----
constexpr int kMaxTileTokens = 2;
struct Lanes16 {
  float v[16];
};
inline Lanes16 lanes_zero() { return Lanes16{}; }
inline Lanes16 lanes_load_f32(const float* p) {
  Lanes16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = p[j];
  return r;
}
template <DType D>
inline Lanes16 lanes_load_weights(const WeightElement<D>* p) {
  Lanes16 r;
  for (int j = 0; j < 16; ++j) r.v[j] = weight_to_f32<D>(p[j]);
  return r;
}
inline void lanes_fma(Lanes16& acc, const Lanes16& w, const Lanes16& x) {
  for (int j = 0; j < 16; ++j) acc.v[j] = std::fma(w.v[j], x.v[j], acc.v[j]);
}
inline float lanes_sum(const Lanes16& a) {
  float s8[8], s4[4];
  for (int j = 0; j < 8; ++j) s8[j] = a.v[j] + a.v[j + 8];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  float s2_0 = s4[0] + s4[2], s2_1 = s4[1] + s4[3];
  return s2_0 + s2_1;
}
#endif

#ifdef TILEFIRE_MATMUL_SIMD
// The fixed reduction tree after the first fold: j + (j+4), then j + (j+2), then lane 0 + lane 1.
inline float lanes_sum(const Lanes16& a) {
  __m256 s8 = lanes_fold_to_8(a);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
  return _mm_cvtss_f32(s1);
}
#endif

constexpr size_t kPrefetchBytes = 1024;

inline void prefetch_line(const char* address) {
#if defined(__SSE__)
  _mm_prefetch(address, _MM_HINT_T0);
#else
  __builtin_prefetch(address);
#endif
}

// One register tile: Rows consecutive weight rows x Tokens activation rows.
// w: [Rows, K] (row stride K); x: [Tokens, K] (row stride ldx); y: [Tokens, ldy], columns [0, Rows).
// next_block: the rows this call reads next (prefetched while this tile computes), or nullptr at the
// end of the caller's range, so no bandwidth goes to rows another worker's tile will read.
template <DType D, int Rows, int Tokens>
void matmul_register_tile(const WeightElement<D>* w, uint32_t K, const float* x, size_t ldx, float* y,
                          size_t ldy, const WeightElement<D>* next_block) {
  Lanes16 acc[Rows][Tokens];  // [rows, tokens] of 16-lane partial sums
#pragma GCC unroll 4
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < Tokens; ++t) acc[r][t] = lanes_zero();

  const uint32_t k_blocks_end = K & ~15u;
  for (uint32_t k = 0; k < k_blocks_end; k += 16) {
    Lanes16 wv[Rows];  // 16 weights of each row, as f32
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) {
      // Software prefetch, one cache line per line consumed, into the matching row of the next row block
      // plus kPrefetchBytes: the hardware streamers restart at every short row (2 KiB at K = 1024 bf16),
      // and this took batch-1 GEMV on 2 cores from ~31 to ~43 GB/s (docs/BENCHMARKS.md).
      if (next_block && (k * sizeof(WeightElement<D>)) % 64 == 0)
        prefetch_line(reinterpret_cast<const char*>(next_block + size_t(r) * K + k) + kPrefetchBytes);
      wv[r] = lanes_load_weights<D>(w + size_t(r) * K + k);
    }
#pragma GCC unroll 4
    for (int t = 0; t < Tokens; ++t) {
      Lanes16 xv = lanes_load_f32(x + size_t(t) * ldx + k);  // shared by all rows of the tile
#pragma GCC unroll 4
      for (int r = 0; r < Rows; ++r) lanes_fma(acc[r][t], wv[r], xv);
    }
  }

#pragma GCC unroll 4
  for (int t = 0; t < Tokens; ++t) {
    const float* xt = x + size_t(t) * ldx;
#pragma GCC unroll 4
    for (int r = 0; r < Rows; ++r) {
      float sum = lanes_sum(acc[r][t]);
      const WeightElement<D>* wr = w + size_t(r) * K;
      for (uint32_t k = k_blocks_end; k < K; ++k) sum = std::fma(weight_to_f32<D>(wr[k]), xt[k], sum);
      y[size_t(t) * ldy + r] = sum;
    }
  }
}

using TileFunction = void (*)(const void*, uint32_t, const float*, size_t, float*, size_t, const void*);

template <DType D, int Rows, int Tokens>
void matmul_register_tile_erased(const void* w, uint32_t K, const float* x, size_t ldx, float* y,
                                 size_t ldy, const void* next_block) {
  matmul_register_tile<D, Rows, Tokens>(static_cast<const WeightElement<D>*>(w), K, x, ldx, y, ldy,
                                        static_cast<const WeightElement<D>*>(next_block));
}

constexpr int kMaxTileRows = 4;

// table[rows - 1][tokens - 1]: the tile kernel for every remainder shape.
template <DType D>
struct TileTable {
  TileFunction table[kMaxTileRows][kMaxTileTokens];
  constexpr TileTable() : table{} { fill(std::make_integer_sequence<int, kMaxTileRows * kMaxTileTokens>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((table[I / kMaxTileTokens][I % kMaxTileTokens] =
          &matmul_register_tile_erased<D, I / kMaxTileTokens + 1, I % kMaxTileTokens + 1>),
     ...);
  }
};

template <DType D>
void matmul_rows_typed(const void* w, uint32_t K, uint32_t n0, uint32_t n1, const float* x, size_t ldx,
                       uint32_t M, float* y, size_t ldy) {
  static constexpr TileTable<D> tiles;
  const auto* weights = static_cast<const WeightElement<D>*>(w);  // [N, K]
  // Row blocks outermost: a block of 4 rows (4 * K weights, 32 KiB for bf16 K=4096) stays in L1/L2 while
  // every token block reuses it, so weights are read from memory once per call.
  for (uint32_t n = n0; n < n1; n += kMaxTileRows) {
    const int rows = int(std::min<uint32_t>(kMaxTileRows, n1 - n));
    // Only a whole next block inside [n0, n1) is prefetched (the prefetch reads Rows rows of it).
    const void* next = n + 2 * kMaxTileRows <= n1 ? weights + size_t(n + kMaxTileRows) * K : nullptr;
    for (uint32_t m = 0; m < M; m += kMaxTileTokens) {
      const int tokens = int(std::min<uint32_t>(kMaxTileTokens, M - m));
      tiles.table[rows - 1][tokens - 1](weights + size_t(n) * K, K, x + size_t(m) * ldx, ldx,
                                        y + size_t(m) * ldy + n, ldy, m == 0 ? next : nullptr);
    }
  }
}

}  // namespace

void matmul_rows(const void* w, DType wdtype, uint32_t K, uint32_t n0, uint32_t n1, const float* x,
                 size_t ldx, uint32_t M, float* y, size_t ldy) {
  if (n1 <= n0 || M == 0) return;
  switch (wdtype) {
    case DType::f32: return matmul_rows_typed<DType::f32>(w, K, n0, n1, x, ldx, M, y, ldy);
    case DType::bf16: return matmul_rows_typed<DType::bf16>(w, K, n0, n1, x, ldx, M, y, ldy);
    case DType::f16: return matmul_rows_typed<DType::f16>(w, K, n0, n1, x, ldx, M, y, ldy);
  }
  throw std::invalid_argument("matmul_rows: unknown weight dtype");
}

void matmul_rows_reference(const void* w, DType wdtype, uint32_t K, uint32_t n0, uint32_t n1,
                           const float* x, size_t ldx, uint32_t M, float* y, size_t ldy) {
  for (uint32_t m = 0; m < M; ++m) {
    for (uint32_t n = n0; n < n1; ++n) {
      double sum = 0.0;
      for (uint32_t k = 0; k < K; ++k)
        sum += double(load_as_f32(w, wdtype, size_t(n) * K + k)) * double(x[size_t(m) * ldx + k]);
      y[size_t(m) * ldy + n] = float(sum);
    }
  }
}

}  // namespace tilefire
