#pragma once
// What one rank of a tensor-parallel group sees: every rank's window (the same size and layout on every
// rank, so an offset names the same buffer everywhere) and every rank's signal flags. The protocol, one
// for every back end (threads in one process, processes over POSIX shared memory, GPUs over NCCL):
//  - a rank publishes "my data for collective slot `id` of epoch e is ready" by storing e into its own
//    flag `id` with release ordering (system scope on a GPU);
//  - a rank reads a peer's data only after loading that peer's flag `id` with acquire ordering and seeing
//    a value >= e. Epochs only grow, so nothing is ever reset;
//  - a wait longer than the timeout throws TransportError naming the waiting rank, the collective and
//    the peer, so a rank that dies or never arrives stops the others with a message, never a hang.
#include <atomic>
#include <cstdint>
#include <string>

#include "tilefire/errors.h"

namespace tilefire {

struct RankView {
  uint32_t rank = 0;
  uint32_t ranks = 1;
  unsigned char* const* windows = nullptr;  // [ranks] each rank's window
  uint64_t* const* flags = nullptr;         // [ranks] each rank's flags, flag_count each
  uint64_t window_bytes = 0;
  uint32_t flag_count = 0;
  uint32_t timeout_ms = 10000;

  template <class T>
  T* at(uint32_t peer, uint64_t offset) const { return reinterpret_cast<T*>(windows[peer] + offset); }
};

// Stores `epoch` into this rank's flag `id` (release): everything this rank wrote before is visible to
// a peer that sees the new value.
inline void publish_flag(const RankView& view, uint32_t id, uint64_t epoch) {
  std::atomic_ref<uint64_t>(view.flags[view.rank][id]).store(epoch, std::memory_order_release);
}

// Waits until `peer`'s flag `id` reaches `epoch` (acquire). Throws TransportError after view.timeout_ms.
void wait_flag(const RankView& view, uint32_t peer, uint32_t id, uint64_t epoch, const char* collective);

}  // namespace tilefire
