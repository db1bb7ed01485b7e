#pragma once
// norm_residual: out[:, c0:c1] = residual[:, c0:c1] + rmsnorm(y)[:, c0:c1] * g[c0:c1], the RMS over each
// token's whole row of y. Gemma's sandwich norms: the attention's and the MLP's outputs are normalised
// before their residual add (post_attention_layernorm, post_feedforward_layernorm). The norm needs the
// whole row, which the O and down projections' column tiles do not have, so it is its own op after them
// (each of its tiles recomputes the row's scale, as the matmul prologues do). Tiles are column ranges.
#include "ops/rmsnorm.h"
#include "ops/tile.h"

namespace tilefire {

struct NormResidualParams {
  uint32_t y = kNoSlot;            // activation [tokens, cols]: the projection's output
  uint32_t norm_weight = kNoSlot;  // f32 [cols]
  uint32_t residual = kNoSlot;     // activation [tokens, cols]
  uint32_t out = kNoSlot;          // activation [tokens, cols]
  uint32_t cols = 0;
  float eps = 1e-6f;
};

struct NormResidualOp {
  using Params = NormResidualParams;
  static constexpr OpCode code = OpCode::norm_residual;
  static uint32_t tile_units(const Params& p) { return p.cols; }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.y, 0, p.cols});
    fp.reads.push_back({p.residual, tile.begin, tile.end});
    fp.writes.push_back({p.out, tile.begin, tile.end});
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const float* y = ctx.slot<const float>(p.y);                // [tokens, cols]
    const float* residual = ctx.slot<const float>(p.residual);  // [tokens, cols]
    const float* g = ctx.slot<const float>(p.norm_weight);      // [cols]
    float* out = ctx.slot<float>(p.out);                        // [tokens, cols]
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m) {
      const float* row = y + size_t(m) * p.cols;
      const float inverse = rms_inverse(row, p.cols, p.eps);
      for (uint32_t c = tile.begin; c < tile.end; ++c) {
        const size_t at = size_t(m) * p.cols + c;
        out[at] = residual[at] + (row[c] * inverse) * g[c];
      }
    }
  }
};

}  // namespace tilefire
