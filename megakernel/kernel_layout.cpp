// The persistent kernel's shared memory, computed on the host (kernel_layout.h).
#include "megakernel/kernel_layout.h"

#include <algorithm>

#include "megakernel/cuda/device_job.h"
#include "ops/all_ops.h"
#include "scheduler/device_program.h"

namespace tilefire {

uint32_t tile_workspace_floats(const Program& program) {
  // Matrix tiles: xs [pass tokens, K] then dots [pass tokens, the task's rows], then a few doubles.
  const uint64_t pass_tokens = std::min(program.tokens, kDeviceMaxPassTokens);
  uint64_t floats = 64;
  for (const TaskDesc& task : program.tasks) {
    const WeightStreamDesc s = weight_stream_of(program, task);
    uint64_t rows = 0;
    for (uint32_t r = 0; r < s.range_count; ++r) rows += s.ranges[r].rows;
    if (rows == 0) continue;  // no weights: no input rows staged (64 floats, as any task)
    const uint64_t K = s.row_bytes / dtype_size(program.slots[s.ranges[0].slot].dtype);  // bf16 on the cuda backend
    floats = std::max<uint64_t>(floats, pass_tokens * (K + rows) + 64);
    if (task_uses_tensor_cores(program.tokens, uint32_t(K), uint32_t(rows)))  // prefill on tensor cores
      floats = std::max<uint64_t>(floats, gemm_workspace_floats(uint32_t(rows)));
  }
  for (const NodeDesc& node : program.nodes) {  // attention tiles: [warps][head_dim + 2] states
    if (node.params.op == OpCode::causal_attention)
      floats = std::max<uint64_t>(floats, uint64_t(kDeviceConsumerWarps) * (node.params.as<CausalAttentionParams>().head_dim + 2));
    if (node.params.op == OpCode::attention_chunk)
      floats = std::max<uint64_t>(floats, uint64_t(kDeviceConsumerWarps) * (node.params.as<AttentionChunkParams>().head_dim + 2));
  }
  return uint32_t((floats + 31) / 32 * 32);
}

uint32_t weight_stage_count(uint64_t shared_bytes, uint32_t workspace_floats, uint32_t stage_bytes) {
  const uint64_t workspace_bytes = uint64_t(workspace_floats) * 4;
  if (stage_bytes == 0 || workspace_bytes >= shared_bytes) return 0;
  const uint64_t stages = std::min<uint64_t>(kDeviceMaxStages, (shared_bytes - workspace_bytes) / stage_bytes);
  return stages >= 2 ? uint32_t(stages) : 0;
}

}  // namespace tilefire
