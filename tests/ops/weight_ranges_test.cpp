// Each fused op names the weight bytes its tile streams (what an executor fetches while the tile waits):
// exactly the rows of the matrices the tile multiplies.
#include <gtest/gtest.h>

#include "ops/all_ops.h"

namespace tilefire {
namespace {

TEST(WeightRanges, MatmulResidualNamesItsRows) {
  MatmulResidualParams p;
  p.weight = 7;
  p.K = 100;
  p.N = 64;
  p.wdtype = DType::bf16;
  WeightRanges r;
  MatmulResidualOp::weight_ranges(p, {16, 48}, r);
  ASSERT_EQ(r.count, 1u);
  EXPECT_EQ(r.ranges[0].slot, 7u);
  EXPECT_EQ(r.ranges[0].offset, 16u * 100 * 2);
  EXPECT_EQ(r.ranges[0].bytes, 32u * 100 * 2);
}

TEST(WeightRanges, GateUpNamesBothMatrices) {
  GateUpSwigluParams p;
  p.w_gate = 3;
  p.w_up = 4;
  p.hidden = 10;
  p.ffn = 40;
  p.wdtype = DType::f32;
  WeightRanges r;
  GateUpSwigluOp::weight_ranges(p, {8, 24}, r);
  ASSERT_EQ(r.count, 2u);
  EXPECT_EQ(r.ranges[0].slot, 3u);
  EXPECT_EQ(r.ranges[1].slot, 4u);
  EXPECT_EQ(r.ranges[1].offset, 8u * 10 * 4);
  EXPECT_EQ(r.ranges[1].bytes, 16u * 10 * 4);
}

TEST(WeightRanges, QkvNamesTheMatrixOfItsPartAndHeads) {
  QkvProjectionParams p;
  p.wq = 1;
  p.wk = 2;
  p.wv = 3;
  p.hidden = 64;
  p.heads = 8;
  p.kv_heads = 2;
  p.head_dim = 16;
  p.wdtype = DType::f16;
  const uint64_t head_bytes = 16 * 64 * 2;
  // Slots of group 1: q heads 4..7 at slots 6..9, k1 at 10, v1 at 11.
  WeightRanges q, k, v;
  QkvProjectionOp::weight_ranges(p, {7, 9}, q);
  QkvProjectionOp::weight_ranges(p, {10, 11}, k);
  QkvProjectionOp::weight_ranges(p, {11, 12}, v);
  EXPECT_EQ(q.ranges[0].slot, 1u);
  EXPECT_EQ(q.ranges[0].offset, 5 * head_bytes);  // slot 7 is q head 5
  EXPECT_EQ(q.ranges[0].bytes, 2 * head_bytes);
  EXPECT_EQ(k.ranges[0].slot, 2u);
  EXPECT_EQ(k.ranges[0].offset, 1 * head_bytes);
  EXPECT_EQ(v.ranges[0].slot, 3u);
  EXPECT_EQ(v.ranges[0].offset, 1 * head_bytes);
}

TEST(WeightRanges, QkvSlotsFollowKvGroups) {
  QkvProjectionParams p;
  p.heads = 8;
  p.kv_heads = 2;
  // [q0 q1 q2 q3 k0 v0 | q4 q5 q6 q7 k1 v1]
  EXPECT_EQ(QkvProjectionOp::segment_of(p, 3).part, QkvProjectionOp::Part::q);
  EXPECT_EQ(QkvProjectionOp::segment_of(p, 4).part, QkvProjectionOp::Part::k);
  EXPECT_EQ(QkvProjectionOp::segment_of(p, 5).part, QkvProjectionOp::Part::v);
  EXPECT_EQ(QkvProjectionOp::segment_of(p, 6).first_head, 4u);
  EXPECT_EQ(QkvProjectionOp::segment_of(p, 11).first_head, 1u);
  EXPECT_EQ(QkvProjectionOp::tile_breaks(p), (std::vector<uint32_t>{4, 5, 6, 10, 11}));
}

}  // namespace
}  // namespace tilefire
