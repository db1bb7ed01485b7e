#pragma once
// The GPU back end for ranks of one process (docs/TENSOR_PARALLEL.md): rank r's window and flags live in
// the memory of GPU devices[r], and every rank's kernel reaches every other rank's through CUDA peer
// access (NVLink or PCIe P2P; enabled here, refused with the pair named when two GPUs cannot). Ranks
// that share a GPU ("virtual ranks": how a machine with fewer GPUs than ranks runs --tp) reach each
// other's memory directly. This header needs no CUDA headers; a build without CUDA reports that it has
// no CUDA backend.
//
// The views it gives hold device pointers: they bind window slots and fill each rank's DeviceRankView
// (megakernel/cuda/device_job.h); the host never loads or stores through them.
#include <cstdint>
#include <vector>

#include "transport/rank_view.h"

namespace tilefire {

class DeviceWindowGroup {
 public:
  // Asked before each window or flag array is freed, with the group's GPUs and the one the memory is on:
  // true when the caller has taken the memory instead. The megakernel passes CudaExecutor::
  // keep_if_group_held: while a kernel the host gave up on still runs on a GPU of the group, cudaFree there
  // would wait for it, and one freed elsewhere could be read by it (docs/CUDA.md, the host's deadline).
  using KeepMemory = bool (*)(const std::vector<int>& group_devices, int device, void* memory);

  // Zeroed windows of window_bytes and flag_count flags per rank; throws InputError naming the GPUs
  // that cannot reach each other, DeviceError when an allocation fails. Without `keep_while_held` every
  // free happens here.
  DeviceWindowGroup(const std::vector<int>& devices, uint64_t window_bytes, uint32_t flag_count, uint32_t timeout_ms,
                    KeepMemory keep_while_held = nullptr);
  ~DeviceWindowGroup();
  DeviceWindowGroup(const DeviceWindowGroup&) = delete;
  DeviceWindowGroup& operator=(const DeviceWindowGroup&) = delete;

  uint32_t ranks() const { return uint32_t(devices_.size()); }
  RankView view(uint32_t rank) const;

 private:
  void release() noexcept;

  std::vector<int> devices_;
  std::vector<unsigned char*> windows_;  // device memory, [ranks]
  std::vector<uint64_t*> flags_;         // device memory, [ranks]
  uint64_t window_bytes_;
  uint32_t flag_count_, timeout_ms_;
  KeepMemory keep_while_held_ = nullptr;
};

}  // namespace tilefire
