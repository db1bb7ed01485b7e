#pragma once
// The GPU side of the transport, checked on one GPU (several cannot be had here; docs/TENSOR_PARALLEL.md):
//  - virtual ranks: R CTAs of one cooperative kernel act as R ranks over one device window, with the
//    protocol of transport/rank_view.h on the device (flags stored with st.release.sys and read with
//    ld.acquire.sys, epochs that only grow, sums in rank order): every rank must get bitwise the sum;
//  - a one-rank NCCL 2.28 device communicator: ncclMemAlloc, ncclCommWindowRegister, ncclDevCommCreate,
//    then a kernel that writes through ncclGetLocalPointer, syncs an LSA barrier session and reads back
//    through ncclGetLsaPointer.
// In a build without CUDA (or without NCCL for the second) they report that instead of running.
#include <cstdint>
#include <string>

namespace tilefire {

struct DeviceCheckResult {
  bool ran = false;
  std::string not_run_because;  // when !ran: no device, no CUDA build, no NCCL
  uint64_t mismatches = 0;      // elements that differ from the host's rank-order sum
  std::string error;            // a CUDA or NCCL call that failed, or the kernel's timeout
};

DeviceCheckResult check_virtual_rank_allreduce(int device, uint32_t ranks, uint32_t count, uint32_t steps);
DeviceCheckResult check_nccl_single_rank_window(int device, uint32_t count);

}  // namespace tilefire
