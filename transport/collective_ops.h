#pragma once
// The collective tile ops a tensor-parallel Program runs as tasks (they are in TILEFIRE_OP_LIST):
//  - allreduce_residual: out[:, c0:c1] = residual[:, c0:c1] + sum over ranks of partial_r[:, c0:c1], one
//    tile per column slice, so the next layer's tiles start as soon as their slice is summed; the
//    partial sums are the row-parallel O or down projection of each rank, in its window (without a
//    residual, the sum alone: the input of a post-norm, norm_residual, which adds the residual after);
//  - allgather_logits: the full logits from each rank's vocabulary rows, one tile per owning rank (one
//    row, or in a batched decode step every sequence's row).
// Each tile publishes its own flag first, then waits for its peers' (transport/rank_view.h); sums run in
// rank order, so every rank computes bitwise the same hidden state.
#include <algorithm>

#include "ops/tile.h"
#include "transport/collectives.h"

namespace tilefire {

struct AllreduceResidualParams {
  uint32_t partial = kNoSlot;   // window [tokens, cols]: this rank's partial sums
  uint32_t residual = kNoSlot;  // activation [tokens, cols], or kNoSlot
  uint32_t out = kNoSlot;       // activation [tokens, cols]
  uint32_t cols = 0;
  uint32_t tile_width = 1;      // the tiler's width: the tile starting at column c is slice c / tile_width
  uint32_t flag_base = 0;       // the node's first collective slot
  uint32_t ranks = 1;           // ranks in the group (the cost model's bytes over the link)
};

struct AllreduceResidualOp {
  using Params = AllreduceResidualParams;
  static constexpr OpCode code = OpCode::allreduce_residual;
  static uint32_t tile_units(const Params& p) { return p.cols; }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  static uint32_t flags(const Params& p) { return (p.cols + p.tile_width - 1) / p.tile_width; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.partial, tile.begin, tile.end});
    if (p.residual != kNoSlot) fp.reads.push_back({p.residual, tile.begin, tile.end});
    fp.writes.push_back({p.out, tile.begin, tile.end});
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const RankView& view = *ctx.ranks;
    const uint32_t slot = p.flag_base + tile.begin / p.tile_width;
    const float* own = ctx.slot<const float>(p.partial);  // [tokens, cols]
    const uint64_t offset = uint64_t(reinterpret_cast<const unsigned char*>(own) - view.windows[view.rank]);
    publish_flag(view, slot, ctx.step->epoch);
    for (uint32_t r = 0; r < view.ranks; ++r)
      if (r != view.rank) wait_flag(view, r, slot, ctx.step->epoch, "all-reduce");
    const float* residual = p.residual == kNoSlot ? nullptr : ctx.slot<const float>(p.residual);
    float* out = ctx.slot<float>(p.out);
    for (uint32_t m = 0; m < ctx.step->tokens_count; ++m) {
      const uint64_t row = uint64_t(m) * p.cols;
      for (uint32_t c = tile.begin; c < tile.end; ++c) {
        float sum = view.at<const float>(0, offset)[row + c];
        for (uint32_t r = 1; r < view.ranks; ++r) sum += view.at<const float>(r, offset)[row + c];
        out[row + c] = residual ? residual[row + c] + sum : sum;
      }
    }
  }
};

struct AllgatherLogitsParams {
  // window [rows, the largest share]: the rank's LM-head output, row r at r * (this rank's share), as
  // the LM head writes it (its vocabulary is the rank's share)
  uint32_t local = kNoSlot;
  uint32_t out = kNoSlot;    // activation [rows, vocab]: the full logits
  uint32_t vocab = 0;
  uint32_t ranks = 1;
  uint32_t rank = 0;         // the rank this program runs as
  uint32_t flag_base = 0;    // slot flag_base + r: rank r's share is ready
  uint32_t rows = 1;         // the LM head's rows: 1, or one per sequence of a batched decode step
};

struct AllgatherLogitsOp {
  using Params = AllgatherLogitsParams;
  static constexpr OpCode code = OpCode::allgather_logits;
  // One tile per owning rank: tile r copies rank r's share.
  static uint32_t tile_units(const Params& p) { return p.ranks; }
  static size_t scratch_floats(const Params&, uint32_t) { return 0; }
  TILEFIRE_HD static void share(const Params& p, uint32_t owner, uint32_t* begin, uint32_t* end) {
    rank_share(0, p.vocab, p.ranks, owner, begin, end);
  }
  // Every tile reads the rank's own share, not only the owner's tile: then every rank has the same task
  // graph (a placement policy sees the same readiness on every rank, so the ranks' queues agree), and no
  // tile starts waiting for a peer before this rank's LM head is done.
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    uint32_t own_begin, own_end;
    share(p, p.rank, &own_begin, &own_end);
    fp.reads.push_back({p.local, 0, own_end - own_begin});  // (units are columns, every row alike)
    for (uint32_t owner = tile.begin; owner < tile.end; ++owner) {
      uint32_t begin, end;
      share(p, owner, &begin, &end);
      fp.writes.push_back({p.out, begin, end});
    }
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const RankView& view = *ctx.ranks;
    const float* own = ctx.slot<const float>(p.local);
    const uint64_t offset = uint64_t(reinterpret_cast<const unsigned char*>(own) - view.windows[view.rank]);
    float* out = ctx.slot<float>(p.out);
    for (uint32_t owner = tile.begin; owner < tile.end; ++owner) {
      uint32_t begin, end;
      share(p, owner, &begin, &end);
      if (owner == view.rank)
        publish_flag(view, p.flag_base + owner, ctx.step->epoch);
      else
        wait_flag(view, owner, p.flag_base + owner, ctx.step->epoch, "logits all-gather");
      const uint32_t owned = end - begin;
      const float* in = view.at<const float>(owner, offset);  // [rows, owned]
      for (uint32_t r = 0; r < p.rows; ++r)
        std::copy(in + uint64_t(r) * owned, in + uint64_t(r + 1) * owned, out + uint64_t(r) * p.vocab + begin);
    }
  }
};

}  // namespace tilefire
