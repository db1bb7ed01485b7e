// attention_head (one pass, online softmax, vectorised) against attention_head_reference (two passes,
// double), across head sizes and cache lengths that straddle the kernel's position blocks.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include "tests/common/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace tilefire {
namespace {

using testing::count_mismatches;

// Tolerance: scores are f32 dot products (head_dim <= 128 terms in [-s, s]: ~1e-6 relative), exp and
// the running sum in f32 over <= 300 positions (~n * 2^-24 relative), the output a convex combination
// of v in [-1, 1]; 2e-5 relative + 2e-6 absolute is ~10x the worst estimate and catches any real error
// (a missed rescale is off by a factor of e^(max shift), far above this).
constexpr double kRtol = 2e-5, kAtol = 2e-6;

struct Cache {
  std::vector<float> q, k, v;  // q: [head_dim]; k, v: [n_positions, head_dim]
};

Cache random_cache(uint32_t n, uint32_t hd, float magnitude, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-magnitude, magnitude);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Cache c{std::vector<float>(hd), std::vector<float>(size_t(n) * hd), std::vector<float>(size_t(n) * hd)};
  for (auto& x : c.q) x = dist(rng);
  for (auto& x : c.k) x = dist(rng);
  for (auto& x : c.v) x = unit(rng);
  return c;
}

TEST(Attention, MatchesReferenceAcrossShapes) {
  std::mt19937 rng(21);
  for (uint32_t hd : {32u, 64u, 128u, 72u}) {  // 72: the 8-wide remainder of the dot product
    for (uint32_t n : {1u, 2u, 17u, 31u, 32u, 33u, 300u}) {
      for (float magnitude : {1.0f, 3.0f}) {  // 3: sharp softmax, large rescales between blocks
        const Cache c = random_cache(n, hd, magnitude, rng);
        const float scale = 1.0f / std::sqrt(float(hd));
        std::vector<float> got(hd), want(hd);
        attention_head(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, 0.0f, got.data());
        attention_head_reference(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, 0.0f, want.data());
        const std::string what = "hd=" + std::to_string(hd) + " n=" + std::to_string(n) +
                                 " magnitude=" + std::to_string(magnitude);
        EXPECT_EQ(count_mismatches(got, want, kAtol, kRtol, what), 0u) << what;
      }
    }
  }
}

// Scores that rise with position force a rescale at every block (the running max always moves).
TEST(Attention, IncreasingScoresRescaleCorrectly) {
  const uint32_t hd = 64, n = 300;
  std::vector<float> q(hd, 0.0f), k(size_t(n) * hd, 0.0f), v(size_t(n) * hd);
  q[0] = 1.0f;
  for (uint32_t j = 0; j < n; ++j) {
    k[size_t(j) * hd] = 0.05f * float(j);  // score j = 0.05 j
    for (uint32_t d = 0; d < hd; ++d) v[size_t(j) * hd + d] = std::sin(0.1f * float(j + d));
  }
  std::vector<float> got(hd), want(hd);
  attention_head(q.data(), k.data(), v.data(), n, hd, 1.0f, 0.0f, got.data());
  attention_head_reference(q.data(), k.data(), v.data(), n, hd, 1.0f, 0.0f, want.data());
  EXPECT_EQ(count_mismatches(got, want, kAtol, kRtol, "increasing"), 0u);
}

TEST(Attention, SinglePositionReturnsItsValue) {
  std::vector<float> q = {0.3f, -2.0f, 5.0f, 1.0f}, k = {1.0f, 2.0f, 3.0f, 4.0f}, v = {0.5f, -1.5f, 2.5f, 7.0f};
  std::vector<float> out(4);
  attention_head(q.data(), k.data(), v.data(), 1, 4, 0.5f, 0.0f, out.data());
  EXPECT_EQ(out, v);
}

TEST(Attention, NanInCachePropagates) {
  std::mt19937 rng(2);
  Cache c = random_cache(40, 32, 1.0f, rng);
  c.k[35 * 32 + 3] = std::numeric_limits<float>::quiet_NaN();  // second block
  std::vector<float> out(32);
  attention_head(c.q.data(), c.k.data(), c.v.data(), 40, 32, 0.2f, 0.0f, out.data());
  for (float x : out) EXPECT_TRUE(std::isnan(x));
  c = random_cache(40, 32, 1.0f, rng);
  c.v[7 * 32 + 30] = std::numeric_limits<float>::quiet_NaN();
  attention_head(c.q.data(), c.k.data(), c.v.data(), 40, 32, 0.2f, 0.0f, out.data());
  EXPECT_TRUE(std::isnan(out[30]));
  EXPECT_FALSE(std::isnan(out[29]));
}

TEST(Attention, NoPositionsGivesZeros) {
  std::vector<float> q(32, 1.0f), out(32, 5.0f), want(32, 5.0f);
  attention_head(q.data(), nullptr, nullptr, 0, 32, 1.0f, 0.0f, out.data());
  attention_head_reference(q.data(), nullptr, nullptr, 0, 32, 1.0f, 0.0f, want.data());
  for (uint32_t d = 0; d < 32; ++d) {
    EXPECT_EQ(out[d], 0.0f);
    EXPECT_EQ(want[d], 0.0f);
  }
}

// Gemma's soft cap: the online pass and the reference against scores capped by hand (double), with
// scores well past the cap (magnitude 3 over 64 dimensions: |s| up to ~9 against caps of 0.5 and 2), whole
// and as merged records of split positions; and a cap that changes the result (it must be applied at all).
TEST(Attention, SoftCappedScoresMatchCappingByHand) {
  std::mt19937 rng(8);
  const uint32_t hd = 64, n = 100, record = attention_record_floats(hd);
  const Cache c = random_cache(n, hd, 3.0f, rng);
  const float scale = 1.0f / std::sqrt(float(hd));
  for (float cap : {0.5f, 2.0f}) {
    std::vector<double> weights(n);  // softmax over cap * tanh(scale * q . k_j / cap)
    double largest = -1e300, total = 0.0;
    for (uint32_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (uint32_t d = 0; d < hd; ++d) dot += double(c.q[d]) * double(c.k[size_t(j) * hd + d]);
      weights[j] = double(cap) * std::tanh(double(scale) * dot / double(cap));
      largest = std::max(largest, weights[j]);
    }
    for (double& w : weights) total += (w = std::exp(w - largest));
    std::vector<float> want(hd), got(hd), reference(hd), uncapped(hd), merged(hd), records(2 * record);
    for (uint32_t d = 0; d < hd; ++d) {
      double value = 0.0;
      for (uint32_t j = 0; j < n; ++j) value += weights[j] * double(c.v[size_t(j) * hd + d]);
      want[d] = float(value / total);
    }
    attention_head(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, cap, got.data());
    attention_head_reference(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, cap, reference.data());
    attention_head_partial(c.q.data(), c.k.data(), c.v.data(), 0, 37, n, hd, scale, cap, records.data());
    attention_head_partial(c.q.data(), c.k.data(), c.v.data(), 37, n, n, hd, scale, cap, records.data() + record);
    merge_attention_records(records.data(), 2, record, hd, merged.data());
    const std::string what = "cap " + std::to_string(cap);
    EXPECT_EQ(count_mismatches(got, want, kAtol, kRtol, what), 0u) << what;
    EXPECT_EQ(count_mismatches(reference, want, kAtol, kRtol, "reference, " + what), 0u) << what;
    EXPECT_EQ(count_mismatches(merged, want, kAtol, kRtol, "merged, " + what), 0u) << what;
    attention_head(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, 0.0f, uncapped.data());
    EXPECT_GT(testing::relative_l2_error(uncapped, want), 1e-2) << what;
  }
  EXPECT_EQ(soft_capped(3.0f, 0.0f), 3.0f);  // no cap
  EXPECT_TRUE(std::isnan(soft_capped(std::numeric_limits<float>::quiet_NaN(), 50.0f)));
  EXPECT_EQ(soft_capped(-std::numeric_limits<float>::infinity(), 50.0f), -50.0f);
}

// Records of split positions merge to the attention over all of them: [0, n) cut at arbitrary points
// (empty pieces included), each piece's record from attention_head_partial, against the reference.
TEST(Attention, MergedRecordsOfSplitPositionsMatchReference) {
  std::mt19937 rng(5);
  const uint32_t hd = 64, n = 200, record = attention_record_floats(hd);
  for (float magnitude : {1.0f, 4.0f}) {
    const Cache c = random_cache(n, hd, magnitude, rng);
    const float scale = 1.0f / std::sqrt(float(hd));
    std::vector<float> want(hd);
    attention_head_reference(c.q.data(), c.k.data(), c.v.data(), n, hd, scale, 0.0f, want.data());
    for (const std::vector<uint32_t>& cuts : {std::vector<uint32_t>{0, 200}, {0, 1, 200}, {0, 50, 50, 120, 200},
                                              {0, 7, 33, 64, 65, 199, 200, 200}}) {
      std::vector<float> records((cuts.size() - 1) * record);  // [pieces][hd + 2]
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        attention_head_partial(c.q.data(), c.k.data(), c.v.data(), cuts[i], cuts[i + 1], n, hd, scale, 0.0f, records.data() + i * record);
      std::vector<float> got(hd);
      merge_attention_records(records.data(), uint32_t(cuts.size() - 1), record, hd, got.data());
      const std::string what = std::to_string(cuts.size() - 1) + " pieces, magnitude " + std::to_string(magnitude);
      EXPECT_EQ(count_mismatches(got, want, kAtol, kRtol, what), 0u) << what;
    }
  }
}

// A record by hand: two pieces whose maxes differ by ln 3, so the second weighs 3x per unit of sum.
TEST(Attention, MergeRescalesToTheCommonMaxAndSkipsEmptyRecords) {
  const float inf = std::numeric_limits<float>::infinity();
  const float log3 = std::log(3.0f);
  // [acc0, acc1, max, sum]: piece A (max 0, sum 1, acc (1, 0)); an empty piece; piece B (max ln 3, sum 1, acc (0, 1)).
  const std::vector<float> records = {1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, -inf, 0.0f, 0.0f, 1.0f, log3, 1.0f};
  std::vector<float> out(2);
  merge_attention_records(records.data(), 3, 4, 2, out.data());
  // Rescaled to max ln 3: A weighs 1/3, B weighs 1; total = 1/3 + 1; out = (1/3, 1) / (4/3) = (0.25, 0.75).
  EXPECT_NEAR(out[0], 0.25f, 1e-6f);
  EXPECT_NEAR(out[1], 0.75f, 1e-6f);
  const std::vector<float> empty = {0.0f, 0.0f, -inf, 0.0f, 0.0f, 0.0f, -inf, 0.0f};
  merge_attention_records(empty.data(), 2, 4, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.0f, 0.0f}));
  std::vector<float> poisoned = records;
  poisoned[11] = std::numeric_limits<float>::quiet_NaN();  // B's sum
  merge_attention_records(poisoned.data(), 3, 4, 2, out.data());
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
}

}  // namespace
// A sliding window's ring (ops/tile.h): positions [first, end) stored at rows j % cache_rows of a cache of
// cache_rows rows, the range wrapping past the ring's end (and not, and empty), give bitwise what the
// same positions give laid out flat, both for the whole softmax and for a record; rows outside the range
// hold other values (a ring's older positions), which must not be read.
TEST(Attention, RingRowsGiveBitwiseWhatFlatPositionsGive) {
  std::mt19937 rng(11);
  const uint32_t hd = 48, record = attention_record_floats(hd);
  for (const auto& [first, end, cache_rows] : std::vector<std::tuple<uint32_t, uint32_t, uint32_t>>{
           {0, 16, 16}, {5, 21, 16}, {30, 77, 48}, {100, 100, 32}, {61, 64, 64}, {64, 130, 80}, {3, 35, 33}}) {
    const uint32_t n = end;  // flat: positions [0, end), row j for position j
    const Cache flat = random_cache(std::max(n, 1u), hd, 2.0f, rng);
    std::vector<float> ring_k(size_t(cache_rows) * hd), ring_v(size_t(cache_rows) * hd);
    std::uniform_real_distribution<float> junk(-50.0f, 50.0f);
    for (float& x : ring_k) x = junk(rng);  // rows the range does not cover: another position's values
    for (float& x : ring_v) x = junk(rng);
    for (uint32_t j = first; j < end; ++j)
      for (uint32_t d = 0; d < hd; ++d) {
        ring_k[size_t(j % cache_rows) * hd + d] = flat.k[size_t(j) * hd + d];
        ring_v[size_t(j % cache_rows) * hd + d] = flat.v[size_t(j) * hd + d];
      }
    const float scale = 0.3f;
    std::vector<float> want(hd), got(hd), want_record(record), got_record(record);
    attention_head_window(flat.q.data(), flat.k.data(), flat.v.data(), first, end, std::max(n, 1u), hd, scale, 0.0f, want.data());
    attention_head_window(flat.q.data(), ring_k.data(), ring_v.data(), first, end, cache_rows, hd, scale, 0.0f, got.data());
    attention_head_partial(flat.q.data(), flat.k.data(), flat.v.data(), first, end, std::max(n, 1u), hd, scale, 0.0f, want_record.data());
    attention_head_partial(flat.q.data(), ring_k.data(), ring_v.data(), first, end, cache_rows, hd, scale, 0.0f, got_record.data());
    const std::string what = "positions [" + std::to_string(first) + ", " + std::to_string(end) + ") in " + std::to_string(cache_rows) + " rows";
    EXPECT_EQ(std::memcmp(got.data(), want.data(), hd * sizeof(float)), 0) << what;
    EXPECT_EQ(std::memcmp(got_record.data(), want_record.data(), record * sizeof(float)), 0) << what;
    if (end > first) {  // and the flat result is the attention over those positions (the reference)
      std::vector<float> reference(hd);
      attention_head_reference(flat.q.data(), flat.k.data() + size_t(first) * hd, flat.v.data() + size_t(first) * hd, end - first, hd,
                               scale, 0.0f, reference.data());
      EXPECT_EQ(count_mismatches(want, reference, kAtol, kRtol, what), 0u) << what;
    } else {
      EXPECT_EQ(std::count(got.begin(), got.end(), 0.0f), std::ptrdiff_t(hd)) << what;
    }
  }
}

}  // namespace tilefire
