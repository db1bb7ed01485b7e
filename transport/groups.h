#pragma once
// The back ends that give each rank its RankView:
//  - InProcessGroup: ranks as thread groups of one process; the windows and flags are plain memory.
//  - SharedMemoryGroup: ranks as processes on one host; each rank creates a POSIX shared-memory segment
//    (flags, then the window) and maps every peer's, so loads and stores reach peers directly.
// Bootstrap (which rank am I, how many, where do we meet) comes from the environment: RANK, WORLD_SIZE
// and TILEFIRE_RENDEZVOUS, or the variables OpenMPI's mpirun sets (OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_SIZE, and its job id as the meeting name).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/rank_view.h"

namespace tilefire {

class InProcessGroup {
 public:
  InProcessGroup(uint32_t ranks, uint64_t window_bytes, uint32_t flag_count, uint32_t timeout_ms);
  uint32_t ranks() const { return uint32_t(windows_.size()); }
  RankView view(uint32_t rank) const;

 private:
  std::vector<std::unique_ptr<unsigned char[]>> window_storage_;
  std::vector<std::unique_ptr<uint64_t[]>> flag_storage_;
  std::vector<unsigned char*> windows_;
  std::vector<uint64_t*> flags_;
  uint64_t window_bytes_;
  uint32_t flag_count_, timeout_ms_;
};

struct Bootstrap {
  uint32_t rank = 0;
  uint32_t ranks = 1;
  std::string rendezvous;  // names the group's shared-memory segments
  std::string source;      // "environment" or "mpirun"
};
// Reads the environment; nullopt when neither RANK/WORLD_SIZE nor mpirun's variables are set. Throws
// InputError naming the variable when one is malformed or inconsistent (rank >= size, size != expected).
std::optional<Bootstrap> bootstrap_from_environment();

class SharedMemoryGroup {
 public:
  // Creates this rank's segment and maps every peer's, waiting up to timeout_ms for all of them to echo
  // this segment's nonce (so a stale segment of a dead run is never taken for a live peer; a peer that
  // replaces one is mapped again). Throws TransportError naming the ranks that never joined, a rank held
  // by a live process, or a peer whose layout_key (the configuration every rank must share) differs.
  SharedMemoryGroup(const Bootstrap& bootstrap, uint64_t window_bytes, uint32_t flag_count, uint32_t timeout_ms,
                    uint64_t layout_key = 0);
  ~SharedMemoryGroup();
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;
  RankView view() const;

 private:
  struct Mapping {
    void* base = nullptr;
    uint64_t bytes = 0;
  };
  Bootstrap bootstrap_;
  uint64_t window_bytes_;
  uint32_t flag_count_, timeout_ms_;
  std::vector<Mapping> mappings_;
  std::vector<unsigned char*> windows_;
  std::vector<uint64_t*> flags_;
  std::string own_name_;
};

}  // namespace tilefire
