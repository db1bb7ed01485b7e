#pragma once
// noop: a tile that does nothing. Used to measure the scheduler's own cost per task and, in tests, to
// build hand-made programs whose dependencies are known.
#include "ops/tile.h"

namespace tilefire {

struct NoopParams {
  uint32_t units = 1;  // tiles of this node: one unit each
};

struct NoopOp {
  using Params = NoopParams;
  static constexpr OpCode code = OpCode::noop;
  static uint32_t tile_units(const Params& p) { return p.units; }
  static size_t scratch_floats(const Params&, uint32_t /*tokens*/) { return 0; }
  static void footprint(const Params&, TileRange, TileFootprint&) {}
  static void run_tile(const Params&, TileRange, const TileContext&) {}
};

}  // namespace tilefire
