#pragma once
// noop on the device: nothing (the scheduler's own cost per task, and hand-made test programs).
#include "ops/cuda/device_tile.cuh"
#include "ops/noop.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::noop> {
  using Params = NoopParams;
  __device__ static void run(const Params&, TileRange, DeviceTileContext&) {}
};

}  // namespace tilefire::device
