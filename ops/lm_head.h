#pragma once
// lm_head: logits[v0:v1] = soft_capped((rmsnorm(x[last token]) * g @ W[v0:v1]^T) * scale, softcap) (ops/attention.h;
// a scale 1 and no cap for most models). The final norm in the prologue; only
// the last token's row is projected, since only it is sampled (a batched decode: every token's row, one
// per sequence). Tiles are vocab-row ranges.
#include "ops/attention.h"  // soft_capped
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/tile.h"

namespace tilefire {

struct LmHeadParams {
  uint32_t x = kNoSlot;            // activation [tokens, hidden]
  uint32_t norm_weight = kNoSlot;  // f32 [hidden]
  uint32_t weight = kNoSlot;       // weight [vocab, hidden] (the embedding table when tied)
  uint32_t logits = kNoSlot;       // activation [rows, vocab] f32
  uint32_t hidden = 0;
  uint32_t vocab = 0;
  float eps = 1e-5f;
  DType wdtype = DType::f32;
  // The cuda backend reduces the greedy token inside the tile (ops/cuda/lm_head.cuh). Under tensor
  // parallelism a rank's tiles hold only its share of the vocabulary, so the shard pass turns this off
  // and the logits all-gather reduces the whole vocabulary instead. The CPU twin reduces on the host.
  uint32_t fused_argmax = 1;
  // Rows of logits: 1, the last token's (only it is sampled); or, in a batched decode step (one token of
  // each of several sequences), every token's: logits [tokens, vocab], the weights streamed once for all.
  uint32_t rows = 1;
  float scale = 1.0f;  // the logits' factor: Granite's 1 / logits_scaling
  float softcap = 0.0f;  // the logits' soft cap after the scale: Gemma 2's final_logit_softcapping; 0: none
};

struct LmHeadOp {
  using Params = LmHeadParams;
  static constexpr OpCode code = OpCode::lm_head;
  static uint32_t tile_units(const Params& p) { return p.vocab; }
  // A logit from its row's dot product (both backends).
  TILEFIRE_HD static float logit(const Params& p, float dot) { return soft_capped(dot * p.scale, p.softcap); }
  static size_t scratch_floats(const Params& p, uint32_t) { return size_t(p.rows) * p.hidden; }
  static void footprint(const Params& p, TileRange tile, TileFootprint& fp) {
    fp.reads.push_back({p.x, 0, p.hidden});
    fp.writes.push_back({p.logits, tile.begin, tile.end});
  }
  static void weight_ranges(const Params& p, TileRange tile, WeightRanges& out) {
    const uint64_t row = uint64_t(p.hidden) * dtype_size(p.wdtype);
    out.add(p.weight, tile.begin * row, (tile.end - tile.begin) * row);
  }
  static void run_tile(const Params& p, TileRange tile, const TileContext& ctx) {
    const uint32_t first = ctx.step->tokens_count - p.rows;  // the last token, or every one
    const float* x = ctx.slot<const float>(p.x) + size_t(first) * p.hidden;  // [rows, hidden]
    float* xn = ctx.scratch;                                                  // [rows, hidden]
    for (uint32_t r = 0; r < p.rows; ++r)
      rmsnorm_row(x + size_t(r) * p.hidden, ctx.slot<const float>(p.norm_weight), p.hidden, p.eps, xn + size_t(r) * p.hidden);
    float* logits = ctx.slot<float>(p.logits);  // [rows, vocab]
    matmul_rows(ctx.slot<const void>(p.weight), p.wdtype, p.hidden, tile.begin, tile.end, xn, p.hidden, p.rows, logits, p.vocab);
    if (p.scale == 1.0f && p.softcap == 0.0f) return;
    for (uint32_t r = 0; r < p.rows; ++r)
      for (uint32_t v = tile.begin; v < tile.end; ++v) logits[size_t(r) * p.vocab + v] = logit(p, logits[size_t(r) * p.vocab + v]);
  }
};

}  // namespace tilefire
