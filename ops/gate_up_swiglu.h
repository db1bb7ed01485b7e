#pragma once
// gate_up_swiglu: out[:, f0:f1] = act(xn @ Wg[f0:f1]^T) * (xn @ Wu[f0:f1]^T), xn = rmsnorm(x) * g, act silu
// (SwiGLU) or the tanh GELU (GeGLU, Gemma's). The pre-MLP RMSNorm in the prologue, the gating in the
// epilogue. Tiles are FFN-column ranges.
#include "ops/activation.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/tile.h"

namespace tilefire {

struct GateUpSwigluParams {
  uint32_t x = kNoSlot;            // activation [tokens, hidden]
  uint32_t norm_weight = kNoSlot;  // f32 [hidden]
  uint32_t w_gate = kNoSlot;       // weight [ffn, hidden]
  uint32_t w_up = kNoSlot;         // weight [ffn, hidden]
  uint32_t out = kNoSlot;          // activation [tokens, ffn]
  uint32_t hidden = 0;
  uint32_t ffn = 0;
  float eps = 1e-5f;
  uint32_t max_tile = 0;  // widest tile the compiler made (sizes the scratch)
  DType wdtype = DType::f32;
  GateActivation activation = GateActivation::silu;
};

struct GateUpSwigluOp {
  using Params = GateUpSwigluParams;
  static constexpr OpCode code = OpCode::gate_up_swiglu;
  static uint32_t tile_units(const Params& p) { return p.ffn; }
  // xn [tokens, hidden] + up [tokens, max_tile]
  static size_t scratch_floats(const Params& p, uint32_t tokens) {
    return size_t(tokens) * (p.hidden + p.max_tile);
  }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.x, 0, p.hidden});
    fp.writes.push_back({p.out, tile.begin, tile.end});
  }
  static void weight_ranges(const Params& p, TileRange tile, WeightRanges& out) {
    const uint64_t row = uint64_t(p.hidden) * dtype_size(p.wdtype);
    out.add(p.w_gate, tile.begin * row, (tile.end - tile.begin) * row);
    out.add(p.w_up, tile.begin * row, (tile.end - tile.begin) * row);
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t tokens = ctx.step->tokens_count;
    const uint32_t width = tile.end - tile.begin;
    const float* x = ctx.slot<const float>(p.x);  // [tokens, hidden]
    float* out = ctx.slot<float>(p.out);          // [tokens, ffn]
    float* xn = ctx.scratch;                      // [tokens, hidden]
    float* up = xn + size_t(tokens) * p.hidden;   // [tokens, width]
    const float* g = ctx.slot<const float>(p.norm_weight);
    for (uint32_t m = 0; m < tokens; ++m) rmsnorm_row(x + size_t(m) * p.hidden, g, p.hidden, p.eps, xn + size_t(m) * p.hidden);
    matmul_rows(ctx.slot<const void>(p.w_gate), p.wdtype, p.hidden, tile.begin, tile.end, xn, p.hidden, tokens, out, p.ffn);
    const size_t row_bytes = size_t(p.hidden) * dtype_size(p.wdtype);
    const void* w_up_tile = ctx.slot<const unsigned char>(p.w_up) + size_t(tile.begin) * row_bytes;
    matmul_rows(w_up_tile, p.wdtype, p.hidden, 0, width, xn, p.hidden, tokens, up, width);
    for (uint32_t m = 0; m < tokens; ++m) {
      float* gate_row = out + size_t(m) * p.ffn + tile.begin;
      gated_rows(p.activation, gate_row, up + size_t(m) * width, gate_row, width);
    }
  }
};

}  // namespace tilefire
