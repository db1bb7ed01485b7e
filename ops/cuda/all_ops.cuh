#pragma once
// Every device op, and the dispatch: a switch generated from TILEFIRE_OP_LIST (ops/op_list.h), so the
// op list stays the single source. An op without a DeviceTile specialisation fails to compile here.
#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/attention_merge.cuh"
#include "ops/cuda/causal_attention.cuh"
#include "ops/cuda/collectives.cuh"
#include "ops/cuda/embed.cuh"
#include "ops/cuda/gate_up_swiglu.cuh"
#include "ops/cuda/lm_head.cuh"
#include "ops/cuda/matmul_residual.cuh"
#include "ops/cuda/noop.cuh"
#include "ops/cuda/norm_residual.cuh"
#include "ops/cuda/qkv_projection.cuh"

namespace tilefire::device {

// Runs one tile on the consumer warps; false for an unknown opcode.
__device__ __forceinline__ bool run_device_tile(OpCode op, const OpParams& params, TileRange tile, DeviceTileContext& ctx) {
  switch (op) {
#define TILEFIRE_DEVICE_DISPATCH(name, type)                                                          \
  case OpCode::name:                                                                                  \
    DeviceTile<OpCode::name>::run(params.as<typename DeviceTile<OpCode::name>::Params>(), tile, ctx); \
    return true;
    TILEFIRE_OP_LIST(TILEFIRE_DEVICE_DISPATCH)
#undef TILEFIRE_DEVICE_DISPATCH
    default:
      return false;
  }
}

}  // namespace tilefire::device
