#pragma once
// embed: x0[m, c] = table[tokens[m], c] * scale. Tiles are column ranges of the hidden dimension.
#include "ops/dtype.h"
#include "ops/tile.h"

namespace tilefire {

struct EmbedParams {
  uint32_t table = kNoSlot;  // weight [vocab, hidden]
  uint32_t out = kNoSlot;    // activation [tokens, hidden] f32
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  DType dtype = DType::f32;
  float scale = 1.0f;  // Granite's embedding_multiplier
};

struct EmbedOp {
  using Params = EmbedParams;
  static constexpr OpCode code = OpCode::embed;
  static uint32_t tile_units(const Params& p) { return p.hidden; }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.writes.push_back({p.out, tile.begin, tile.end});
  }
  // Token ids are checked against vocab by the engine before a step starts.
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const void* table = ctx.slot<const void>(p.table);
    float* out = ctx.slot<float>(p.out);  // [tokens, hidden]
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m) {
      size_t row = size_t(uint32_t(ctx.step->tokens[m])) * p.hidden;
      for (uint32_t c = tile.begin; c < tile.end; ++c)
        out[size_t(m) * p.hidden + c] = load_as_f32(table, p.dtype, row + c) * p.scale;
    }
  }
};

}  // namespace tilefire
