// Split-KV attention: attention_chunk tiles (each KV head's visible positions in chunks) followed by
// attention_merge tiles, run through their CPU tile functions on one slot array, against the two-pass
// double reference of every (token, head) over its visible positions: GQA groups of 1 and 3, chunk counts
// that leave chunks empty (more chunks than positions), tiles of one and several units, prefill tokens,
// sliding windows (shorter than some tokens' positions, longer than others'). causal_attention's tiles
// (one pass per head, no split) are checked on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ops/attention_chunk.h"
#include "ops/attention_merge.h"
#include "ops/causal_attention.h"
#include "tests/common/compare.h"

namespace tilefire {
namespace {

using testing::count_mismatches;

constexpr double kRtol = 2e-5, kAtol = 2e-6;  // as ops/attention_test.cpp: f32 online softmax against double

struct Shape {
  uint32_t heads, kv_heads, head_dim, chunks, tokens, position0, chunk_tile_width, merge_tile_width;
  uint32_t window = 0;  // sliding window (0: none)
  float softcap = 0.0f; // the scores' soft cap (0: none)
};

void expect_split_matches_reference(const Shape& s, std::mt19937& rng) {
  const uint32_t max_context = 512, q_dim = s.heads * s.head_dim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t(s.tokens) * q_dim), k(size_t(s.kv_heads) * max_context * s.head_dim),
      v(k.size()), out(q.size(), -7.0f);  // out: [tokens, heads * head_dim]
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);

  AttentionChunkParams chunk;
  chunk.heads = s.heads;
  chunk.kv_heads = s.kv_heads;
  chunk.head_dim = s.head_dim;
  chunk.cache_rows = max_context;
  chunk.chunks = s.chunks;
  chunk.window = s.window;
  chunk.scale = 1.0f / std::sqrt(float(s.head_dim));
  chunk.softcap = s.softcap;
  chunk.q = 0, chunk.k_cache = 1, chunk.v_cache = 2, chunk.partial = 3;
  const AttentionMergeParams merge{3, 4, s.heads, s.kv_heads, s.head_dim, s.chunks};
  std::vector<float> partial(size_t(s.tokens) * AttentionChunkOp::tile_units(chunk) * AttentionChunkOp::unit_floats(chunk), 9.0f);
  void* slots[] = {q.data(), k.data(), v.data(), partial.data(), out.data()};
  const int32_t token_ids[8] = {};
  const StepInputs step{token_ids, s.tokens, s.position0};
  const TileContext ctx{slots, &step, nullptr};
  // Tiles as the compiler cuts them: never across a KV head.
  for (uint32_t kv = 0; kv < s.kv_heads; ++kv)
    for (uint32_t u = kv * s.chunks; u < (kv + 1) * s.chunks; u += s.chunk_tile_width)
      AttentionChunkOp::run_tile(chunk, {u, std::min((kv + 1) * s.chunks, u + s.chunk_tile_width)}, ctx);
  const uint32_t group = s.heads / s.kv_heads;
  for (uint32_t kv = 0; kv < s.kv_heads; ++kv)
    for (uint32_t h = kv * group; h < (kv + 1) * group; h += s.merge_tile_width)
      AttentionMergeOp::run_tile(merge, {h, std::min((kv + 1) * group, h + s.merge_tile_width)}, ctx);

  // The reference sees positions (position - window, position] (transformers' sliding-window mask), or all
  // up to its own; written from the definition, not with first_visible_position.
  std::vector<float> want(q.size());
  for (uint32_t m = 0; m < s.tokens; ++m)
    for (uint32_t h = 0; h < s.heads; ++h) {
      const uint32_t position = s.position0 + m;
      uint32_t first = 0;
      while (s.window != 0 && int64_t(first) <= int64_t(position) - int64_t(s.window)) ++first;
      const size_t cache = (size_t(h / group) * max_context + first) * s.head_dim, offset = size_t(m) * q_dim + size_t(h) * s.head_dim;
      attention_head_reference(q.data() + offset, k.data() + cache, v.data() + cache, position + 1 - first, s.head_dim,
                               chunk.scale, s.softcap, want.data() + offset);
    }
  const std::string what = std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " heads, hd " + std::to_string(s.head_dim) +
                           ", " + std::to_string(s.chunks) + " chunks, " + std::to_string(s.tokens) + " tokens at " +
                           std::to_string(s.position0) + ", window " + std::to_string(s.window);
  EXPECT_EQ(count_mismatches(out, want, kAtol, kRtol, what), 0u) << what;

  // causal_attention on the same inputs, one tile per KV group.
  CausalAttentionParams causal;
  causal.q = 0, causal.k_cache = 1, causal.v_cache = 2, causal.out = 4;
  causal.heads = s.heads, causal.kv_heads = s.kv_heads, causal.head_dim = s.head_dim, causal.cache_rows = max_context;
  causal.window = s.window;
  causal.scale = chunk.scale;
  causal.softcap = s.softcap;
  std::fill(out.begin(), out.end(), -7.0f);
  for (uint32_t kv = 0; kv < s.kv_heads; ++kv) CausalAttentionOp::run_tile(causal, {kv * group, (kv + 1) * group}, ctx);
  EXPECT_EQ(count_mismatches(out, want, kAtol, kRtol, "causal, " + what), 0u) << "causal, " << what;
}

TEST(AttentionChunk, ChunksThenMergeMatchReference) {
  std::mt19937 rng(17);
  for (const Shape& s : {Shape{6, 2, 48, 4, 1, 300, 1, 3},   // GQA group of 3, decode
                         Shape{6, 2, 48, 7, 1, 2, 1, 1},     // more chunks than the 3 visible positions
                         Shape{4, 4, 64, 16, 1, 0, 3, 1},    // one position, 15 empty chunks; wide chunk tiles
                         Shape{8, 2, 64, 5, 3, 130, 2, 2},   // prefill tokens: each its own visible range
                         Shape{6, 2, 72, 1, 1, 257, 1, 3}})  // one chunk: the merge of a single record
    expect_split_matches_reference(s, rng);
}

// Sliding windows: decode past the window (chunks split the window, not the whole cache), a prefill whose
// tokens cross the window's length (the first ones see everything before them, the last a window), a
// window of one position (each token sees itself alone), and a window longer than every position.
TEST(AttentionChunk, SlidingWindowsSplitAndMergeOnlyTheWindow) {
  std::mt19937 rng(23);
  for (const Shape& s : {Shape{6, 2, 48, 4, 1, 300, 1, 3, 100},
                         Shape{8, 2, 64, 5, 6, 60, 2, 2, 63},
                         Shape{4, 4, 32, 3, 4, 10, 1, 1, 1},
                         Shape{6, 2, 48, 7, 1, 2, 1, 1, 2},   // 3 positions, window 2: more chunks than it holds
                         Shape{6, 2, 48, 4, 2, 40, 1, 3, 4096}})
    expect_split_matches_reference(s, rng);
}

// Gemma 2's soft cap on the scores (caps under the scores' spread, so it bites), decode and prefill, with
// and without a window: the chunk tiles and causal_attention's against the reference's capped softmax.
TEST(AttentionChunk, SoftCappedScoresSplitAndMerge) {
  std::mt19937 rng(29);
  for (const Shape& s : {Shape{6, 2, 48, 4, 1, 300, 1, 3, 0, 0.5f}, Shape{8, 2, 64, 5, 6, 60, 2, 2, 63, 1.0f},
                         Shape{4, 4, 32, 3, 4, 10, 1, 1, 0, 50.0f}})
    expect_split_matches_reference(s, rng);
}

// The footprints the compiler derives dependencies from: a chunk tile reads its KV head's query columns
// and cache, and writes its units' records; a merge tile reads every record of its KV head.
TEST(AttentionChunk, FootprintsCoverWhatTheTilesTouch) {
  AttentionChunkParams chunk;
  chunk.heads = 8, chunk.kv_heads = 2, chunk.head_dim = 16, chunk.cache_rows = 64, chunk.chunks = 4;
  chunk.q = 0, chunk.k_cache = 1, chunk.v_cache = 2, chunk.partial = 3;
  TileFootprint fp;
  AttentionChunkOp::footprint(chunk, {5, 7}, fp);  // KV head 1, chunks 1 and 2
  const uint32_t unit = 4 * 18;                    // group of 4 records of head_dim + 2
  ASSERT_EQ(fp.reads.size(), 3u);
  EXPECT_EQ(fp.reads[0].begin, 4u * 16);
  EXPECT_EQ(fp.reads[0].end, 8u * 16);
  EXPECT_EQ(fp.reads[1].begin, 1u);
  ASSERT_EQ(fp.writes.size(), 1u);
  EXPECT_EQ(fp.writes[0].begin, 5 * unit);
  EXPECT_EQ(fp.writes[0].end, 7 * unit);
  const AttentionMergeParams merge{3, 4, 8, 2, 16, 4};
  TileFootprint mf;
  AttentionMergeOp::footprint(merge, {4, 6}, mf);
  EXPECT_EQ(mf.reads[0].begin, 4 * unit);
  EXPECT_EQ(mf.reads[0].end, 8 * unit);
  EXPECT_EQ(mf.writes[0].begin, 4u * 16);
  EXPECT_EQ(mf.writes[0].end, 6u * 16);
  EXPECT_EQ(AttentionChunkOp::positions_read(chunk, {4, 8}, 10), 10u);  // a KV head's chunks cover the context once
  chunk.window = 6;
  EXPECT_EQ(AttentionChunkOp::positions_read(chunk, {4, 8}, 10), 6u);  // ... or the window, when it is shorter
  EXPECT_EQ(AttentionChunkOp::positions_read(chunk, {4, 8}, 4), 4u);
  CausalAttentionParams causal;
  causal.window = 6;
  EXPECT_EQ(CausalAttentionOp::positions_read(causal, {0, 1}, 10), 6u);
  EXPECT_EQ(CausalAttentionOp::positions_read(causal, {0, 1}, 5), 5u);
  causal.window = 0;
  EXPECT_EQ(CausalAttentionOp::positions_read(causal, {0, 1}, 10), 10u);
}

}  // namespace
}  // namespace tilefire
