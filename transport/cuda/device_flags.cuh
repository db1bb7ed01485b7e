#pragma once
// The flag protocol of transport/rank_view.h on the device, at system scope so that it holds between
// GPUs (and between a GPU and the host): a rank publishes epoch e in its own flag with a release store
// after a system fence (the data may have been written by other CTAs of its kernel, which the caller
// has acquired at gpu scope); a peer acquires the flag before it reads the data. Epochs only grow.
#include <cstdint>

#include "ops/cuda/ptx.cuh"

namespace tilefire::device {

__device__ __forceinline__ unsigned long long load_acquire_system_u64(const unsigned long long* p) {
  return ptx::load_acquire_system(p);
}

// Publishes `epoch` in `flag`: every write this thread has observed (its own, and those it acquired
// from other CTAs) is visible to a peer that acquires the new value.
__device__ __forceinline__ void publish_epoch(unsigned long long* flag, unsigned long long epoch) {
  __threadfence_system();
  ptx::store_release_system(flag, epoch);
}

}  // namespace tilefire::device
