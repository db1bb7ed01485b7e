#pragma once
// The collective tile ops on the device. Tensor parallelism on GPUs runs over the NCCL device API's
// windows (docs/TENSOR_PARALLEL.md), which is not built yet: CudaExecutor::load refuses programs with
// collective tasks, saying so. Should one run anyway, it stops the kernel with an error record instead
// of computing without its peers.
#include "ops/cuda/device_tile.cuh"
#include "transport/collective_ops.h"

namespace tilefire::device {

__device__ __forceinline__ void report_unsupported_on_device(DeviceTileContext& ctx) {
  if (threadIdx.x != 0) return;
  DeviceErrorRecord r;
  r.code = uint32_t(DeviceErrorCode::unsupported_op);
  r.cta = blockIdx.x;
  r.task = ctx.task;
  raise_device_error(ctx.mailbox, ctx.globals, r);
}

template <>
struct DeviceTile<OpCode::allreduce_residual> {
  using Params = AllreduceResidualParams;
  __device__ static void run(const Params&, TileRange, DeviceTileContext& ctx) { report_unsupported_on_device(ctx); }
};

template <>
struct DeviceTile<OpCode::allgather_logits> {
  using Params = AllgatherLogitsParams;
  __device__ static void run(const Params&, TileRange, DeviceTileContext& ctx) { report_unsupported_on_device(ctx); }
};

}  // namespace tilefire::device
