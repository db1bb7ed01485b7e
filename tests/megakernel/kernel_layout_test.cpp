// The persistent kernel's shared memory as the host computes it (megakernel/kernel_layout.h), against
// figures worked out by hand from the model shapes: a decode tile's workspace is its input row and its
// results, and the weight stages of 32 KiB that fit beside it in 227 KiB less the kernel's static 1 KiB
// are 6 at the Llama-3.2-1B shape and 5 at the Llama-3.1-8B shape (docs/CUDA.md, docs/SIMULATOR.md).
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "megakernel/cuda/device_job.h"
#include "megakernel/kernel_layout.h"

namespace tilefire::testing {
namespace {

constexpr uint64_t kShared = 227 * 1024 - 1024;

Program decode_program(const char* preset, uint32_t workers, uint32_t tokens = 1, DType dtype = DType::bf16) {
  CompileOptions options;
  options.workers = workers;
  options.tokens = tokens;
  options.max_context = 4096;
  return compile_model(preset_spec(preset, dtype), options);
}

TEST(KernelLayout, StagesBesideTheWorkspace) {
  EXPECT_EQ(weight_stage_count(kShared, 0, 32768), 7u);             // 231424 / 32768 = 7.06
  EXPECT_EQ(weight_stage_count(kShared, 2000, 32768), 6u);          // 8000 bytes of workspace leave 6
  EXPECT_EQ(weight_stage_count(1 << 20, 0, 32768), kDeviceMaxStages);  // at most 8
  EXPECT_EQ(weight_stage_count(kShared, 40000, 32768), 2u);         // 160000 bytes leave 71424: 2
  EXPECT_EQ(weight_stage_count(kShared, 45000, 32768), 0u);         // 51424 left: one stage is not a ring
  EXPECT_EQ(weight_stage_count(kShared, 60000, 32768), 0u);         // a workspace beyond the memory
  EXPECT_EQ(weight_stage_count(kShared, 100, 0), 0u);
}

TEST(KernelLayout, DecodeWorkspaceIsTheWidestInputRowAndResults) {
  // 1B: the down projection reads rows of K = 8192 (FFN); 8B: K = 14336. A decode tile's workspace is
  // K input floats, its results and 64 more, rounded up to 32 floats; its rows are far fewer than K.
  const uint32_t one_b = tile_workspace_floats(decode_program("llama-3.2-1b", 132));
  EXPECT_GE(one_b, 8192u + 64);
  EXPECT_LT(one_b, 8192u + 64 + 2048);
  EXPECT_EQ(one_b % 32, 0u);
  EXPECT_EQ(weight_stage_count(kShared, one_b, kDeviceStageBytes), 6u);
  const uint32_t eight_b = tile_workspace_floats(decode_program("llama-3.1-8b", 132));
  EXPECT_GE(eight_b, 14336u + 64);
  EXPECT_LT(eight_b, 14336u + 64 + 2048);
  EXPECT_EQ(weight_stage_count(kShared, eight_b, kDeviceStageBytes), 5u);
  // Four tokens share a pass: four input rows and their results, which leave 3 stages.
  const uint32_t four = tile_workspace_floats(decode_program("llama-3.2-1b", 132, 4));
  EXPECT_GE(four, 4u * 8192 + 64);
  EXPECT_LT(four, 4u * (8192 + 2048) + 64);
  EXPECT_EQ(weight_stage_count(kShared, four, kDeviceStageBytes), 3u);
  // The workspace holds input rows of K floats whatever the weights' dtype: f32 weights, K the same.
  EXPECT_EQ(tile_workspace_floats(decode_program("llama-3.2-1b", 132, 1, DType::f32)), one_b);
}

}  // namespace
}  // namespace tilefire::testing
