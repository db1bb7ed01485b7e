// transport/device_windows.h with CUDA.
#include <cuda_runtime.h>

#include <string>

#include "tilefire/errors.h"
#include "transport/device_windows.h"

namespace tilefire {

namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw DeviceError("CUDA: " + what + " failed: " + cudaGetErrorString(status));
}

void* zeroed_device_memory(int device, uint64_t bytes, const std::string& what) {
  check(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "allocating " + what + " (" + std::to_string(bytes) + " bytes) on GPU " + std::to_string(device));
  cudaError_t status = cudaMemset(p, 0, bytes);
  if (status == cudaSuccess) status = cudaDeviceSynchronize();
  if (status != cudaSuccess) {
    cudaFree(p);
    check(status, "zeroing " + what);
  }
  return p;
}

}  // namespace

DeviceWindowGroup::DeviceWindowGroup(const std::vector<int>& devices, uint64_t window_bytes, uint32_t flag_count,
                                     uint32_t timeout_ms, KeepMemory keep_while_held)
    : devices_(devices), window_bytes_(window_bytes), flag_count_(flag_count), timeout_ms_(timeout_ms),
      keep_while_held_(keep_while_held) {
  // Every GPU of the group must reach every other's memory: the collective tiles load peers' windows
  // and flags directly.
  for (int a : devices_)
    for (int b : devices_) {
      if (a == b) continue;
      int can = 0;
      check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
      if (!can)
        throw InputError("--tp on the cuda backend: GPU " + std::to_string(a) + " cannot reach the memory of GPU " +
                         std::to_string(b) + " (no CUDA peer access over NVLink or PCIe); choose GPUs that can with "
                         "CUDA_VISIBLE_DEVICES");
      check(cudaSetDevice(a), "cudaSetDevice");
      const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();  // enabled by an earlier group of this process: fine, and not sticky
      else
        check(status, "enabling peer access from GPU " + std::to_string(a) + " to GPU " + std::to_string(b));
    }
  try {
    for (uint32_t r = 0; r < devices_.size(); ++r) {
      windows_.push_back(static_cast<unsigned char*>(zeroed_device_memory(devices_[r], window_bytes_, "rank " + std::to_string(r) + "'s window")));
      flags_.push_back(static_cast<uint64_t*>(
          zeroed_device_memory(devices_[r], uint64_t(flag_count_) * sizeof(uint64_t), "rank " + std::to_string(r) + "'s flags")));
    }
  } catch (...) {
    release();
    throw;
  }
}

DeviceWindowGroup::~DeviceWindowGroup() { release(); }

void DeviceWindowGroup::release() noexcept {
  const auto free_on = [&](int device, void* memory) {
    if (keep_while_held_ && keep_while_held_(devices_, device, memory)) return;
    cudaSetDevice(device);
    cudaFree(memory);
  };
  for (size_t r = 0; r < windows_.size(); ++r) free_on(devices_[r], windows_[r]);
  for (size_t r = 0; r < flags_.size(); ++r) free_on(devices_[r], flags_[r]);
  windows_.clear();
  flags_.clear();
}

RankView DeviceWindowGroup::view(uint32_t rank) const {
  RankView v;
  v.rank = rank;
  v.ranks = ranks();
  v.windows = windows_.data();
  v.flags = flags_.data();
  v.window_bytes = window_bytes_;
  v.flag_count = flag_count_;
  v.timeout_ms = timeout_ms_;
  return v;
}

}  // namespace tilefire
