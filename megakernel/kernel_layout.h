#pragma once
// The persistent kernel's shared memory as the host computes it (docs/CUDA.md): the workspace a tile of
// a program may use, and how many weight stages fit beside it. The cuda executor sizes its launches with
// these, and the simulator the weight prefetch of a device with shared memory (docs/SIMULATOR.md), so
// the two agree on a Hopper-class GPU at the default stage size (the executor stages nothing on sm_80
// or with --no-stage-weights).
#include <cstdint>

#include "scheduler/program.h"

namespace tilefire {

// Floats of shared memory a tile of `program` may use on the cuda backend, a multiple of 32: a matrix
// tile's input rows and results (the tensor-core body's results for a prefill), an attention tile's
// per-warp states (the ops' workspace layouts in ops/cuda/*.cuh). The cuda backend's weights are bf16;
// a simulated program of f32 weights gets its rows' true length.
uint32_t tile_workspace_floats(const Program& program);

// Weight stages of `stage_bytes` that fit in `shared_bytes` beside `workspace_floats`: at most
// kDeviceMaxStages, and 0 when fewer than two fit (the tiles then read their weights from global memory).
uint32_t weight_stage_count(uint64_t shared_bytes, uint32_t workspace_floats, uint32_t stage_bytes);

}  // namespace tilefire
