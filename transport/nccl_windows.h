#pragma once
// The GPU back end for one rank per process (docs/TENSOR_PARALLEL.md): the NCCL 2.28 device API. Every
// rank's window and flags are one symmetric NCCL window (ncclMemAlloc + ncclCommWindowRegister), and
// each rank's kernel reaches its peers' through the addresses ncclGetLsaPointer gives (the LSA team:
// the GPUs of one node with peer access). The megakernel's collective tiles do not change: they get
// the same DeviceRankView as ranks of one process (transport/device_windows.h).
//
// NCCL refuses two ranks on one GPU, so this needs one GPU per rank. This header needs neither CUDA
// nor NCCL headers; a build without NCCL 2.28 reports that instead.
#include <cstdint>
#include <memory>

#include "transport/rank_view.h"

namespace tilefire {

class NcclWindowGroup {
 public:
  // True when this build has the NCCL 2.28 device API.
  static bool built();

  // Collective over the group's processes. Rank 0 makes the NCCL id and passes it to the others
  // through `meeting` (the same ranks' host group: the first 128 bytes of rank 0's window, then flag
  // `id_flag` at epoch 1), so every rank must already have joined it (its join has the timeout and
  // names a rank that never came). Then every rank joins the communicator on `device`, allocates and
  // registers its zeroed window (window_bytes, then flag_count flags) and reads its peers' addresses.
  // NCCL's collective set-up calls must all finish within setup_timeout_ms; past it a TransportError
  // names the ranks that never reached them (the meeting's `id_flag` records each rank's progress:
  // 2 on entering NCCL's set-up, 3 when done). timeout_ms is the collectives' peer wait (the view's).
  // Throws InputError when the ranks do not form one LSA team (several nodes, or GPUs without peer
  // access), TransportError or DeviceError when an NCCL or CUDA call fails.
  NcclWindowGroup(const RankView& meeting, uint32_t id_flag, int device, uint64_t window_bytes, uint32_t flag_count,
                  uint32_t timeout_ms, uint32_t setup_timeout_ms);

  // NCCL's set-up (connections, topology) can take seconds on a healthy node, so the engine gives it
  // at least this long, even under a short --tp-timeout-ms.
  static constexpr uint32_t kMinSetupTimeoutMs = 60000;
  ~NcclWindowGroup();
  NcclWindowGroup(const NcclWindowGroup&) = delete;
  NcclWindowGroup& operator=(const NcclWindowGroup&) = delete;

  // Device pointers (every rank's window and flags as this rank's GPU reaches them); the host never
  // loads or stores through them.
  RankView view() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tilefire
