#pragma once
// matmul_residual: out[:, n0:n1] = residual[:, n0:n1] + (x @ W[n0:n1, :]^T) * scale. The O projection and
// the down projection, with the residual add fused into the epilogue (scale: Granite's
// residual_multiplier, 1 elsewhere). Tiles are output-column ranges. Without a residual slot (a
// tensor-parallel rank's partial sum, reduced by allreduce_residual) out = (x @ W^T) * scale.
#include "ops/matmul.h"
#include "ops/tile.h"

namespace tilefire {

struct MatmulResidualParams {
  uint32_t x = kNoSlot;         // activation [tokens, K]
  uint32_t weight = kNoSlot;    // weight [N, K]
  uint32_t residual = kNoSlot;  // activation [tokens, N], or kNoSlot
  uint32_t out = kNoSlot;       // activation [tokens, N]
  uint32_t K = 0;
  uint32_t N = 0;
  DType wdtype = DType::f32;
  float scale = 1.0f;
};

struct MatmulResidualOp {
  using Params = MatmulResidualParams;
  static constexpr OpCode code = OpCode::matmul_residual;
  static uint32_t tile_units(const Params& p) { return p.N; }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.x, 0, p.K});
    if (p.residual != kNoSlot) fp.reads.push_back({p.residual, tile.begin, tile.end});
    fp.writes.push_back({p.out, tile.begin, tile.end});
  }
  static void weight_ranges(const Params& p, TileRange tile, WeightRanges& out) {
    const uint64_t row = uint64_t(p.K) * dtype_size(p.wdtype);
    out.add(p.weight, tile.begin * row, (tile.end - tile.begin) * row);
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t tokens = ctx.step->tokens_count;
    const float* x = ctx.slot<const float>(p.x);                // [tokens, K]
    float* out = ctx.slot<float>(p.out);                        // [tokens, N]
    matmul_rows(ctx.slot<const void>(p.weight), p.wdtype, p.K, tile.begin, tile.end, x, p.K, tokens, out, p.N);
    const float* residual = p.residual == kNoSlot ? nullptr : ctx.slot<const float>(p.residual);  // [tokens, N]
    if (residual == nullptr && p.scale == 1.0f) return;
    for (uint32_t m = 0; m < tokens; ++m)
      for (uint32_t n = tile.begin; n < tile.end; ++n) {
        const size_t at = size_t(m) * p.N + n;
        out[at] = (residual ? residual[at] : 0.0f) + out[at] * p.scale;
      }
  }
};

}  // namespace tilefire
