// transport/nccl_windows.h with NCCL 2.28 (docs/TENSOR_PARALLEL.md; the calls and their requirements:
// ../shared/notes/nccl-device-api.md).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstring>
#include <string>
#include <vector>

#include "tilefire/errors.h"
#include "transport/nccl_windows.h"

namespace tilefire {

namespace {

constexpr uint64_t kWindowAlignment = 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT
constexpr uint32_t kMaxPeers = 64;

uint64_t aligned(uint64_t bytes) { return (bytes + kWindowAlignment - 1) / kWindowAlignment * kWindowAlignment; }

void check_cuda(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw DeviceError("CUDA: " + what + " failed: " + cudaGetErrorString(status));
}

void check_nccl(ncclResult_t status, const std::string& what) {
  if (status != ncclSuccess) throw TransportError("NCCL: " + what + " failed: " + ncclGetErrorString(status));
}

// This rank's place in its LSA team and every member's window address, as the device API computes them.
__global__ void read_lsa_addresses(ncclDevComm comm, ncclWindow_t window, unsigned long long* addresses, int* team) {
  team[0] = comm.lsaRank;
  team[1] = comm.lsaSize;
  for (int peer = 0; peer < comm.lsaSize && peer < int(kMaxPeers); ++peer)
    addresses[peer] = reinterpret_cast<unsigned long long>(ncclGetLsaPointer(window, 0, peer));
}

}  // namespace

struct NcclWindowGroup::State {
  int device = 0;
  uint32_t rank = 0, ranks = 1;
  uint64_t window_bytes = 0;
  uint32_t flag_count = 0, timeout_ms = 0;
  ncclComm_t comm = nullptr;
  void* memory = nullptr;  // this rank's window, then its flags
  ncclWindow_t window{};
  ncclDevComm dev_comm{};
  std::vector<unsigned char*> windows;  // [ranks] device addresses on this rank's GPU
  std::vector<uint64_t*> flags;

  // Never waits for a peer: a group torn down after a peer died must not hang. ncclCommAbort frees the
  // communicator's resources without the collective deregistration; the memory is freed after it.
  ~State() {
    cudaSetDevice(device);
    if (comm) ncclCommAbort(comm);
    if (memory) ncclMemFree(memory);
  }
};

bool NcclWindowGroup::built() { return true; }

NcclWindowGroup::NcclWindowGroup(const RankView& meeting, uint32_t id_flag, int device, uint64_t window_bytes,
                                 uint32_t flag_count, uint32_t timeout_ms)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.device = device;
  s.rank = meeting.rank;
  s.ranks = meeting.ranks;
  s.window_bytes = window_bytes;
  s.flag_count = flag_count;
  s.timeout_ms = timeout_ms;
  if (meeting.window_bytes < sizeof(ncclUniqueId)) throw std::logic_error("NcclWindowGroup: the meeting window is too small");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");

  // Rank 0's id reaches the others through the host group they have all joined.
  ncclUniqueId id;
  if (s.rank == 0) {
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::memcpy(meeting.windows[0], &id, sizeof(id));
    publish_flag(meeting, id_flag, 1);
  } else {
    wait_flag(meeting, 0, id_flag, 1, "NCCL id from rank 0");
    std::memcpy(&id, meeting.windows[0], sizeof(id));
  }
  check_nccl(ncclCommInitRank(&s.comm, int(s.ranks), id, int(s.rank)), "ncclCommInitRank (rank " + std::to_string(s.rank) + ")");

  // One symmetric window: the collectives' buffers, then the flags, each at a 4 KiB boundary; zeroed
  // before any peer can see it.
  const uint64_t bytes = aligned(window_bytes) + aligned(uint64_t(flag_count) * sizeof(uint64_t));
  check_nccl(ncclMemAlloc(&s.memory, bytes), "ncclMemAlloc (" + std::to_string(bytes) + " bytes)");
  check_cuda(cudaMemset(s.memory, 0, bytes), "zeroing the NCCL window");
  check_cuda(cudaDeviceSynchronize(), "zeroing the NCCL window");
  check_nccl(ncclCommWindowRegister(s.comm, s.memory, bytes, &s.window, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister");
  ncclDevCommRequirements requirements;
  std::memset(&requirements, 0, sizeof(requirements));  // 2.28: no initializer macro yet; no barriers needed
  check_nccl(ncclDevCommCreate(s.comm, &requirements, &s.dev_comm), "ncclDevCommCreate");

  // The peers' addresses, from the device API (pure arithmetic on the window's flat LSA mapping).
  unsigned long long* addresses = nullptr;
  int* team = nullptr;
  check_cuda(cudaMalloc(&addresses, kMaxPeers * sizeof(unsigned long long)), "cudaMalloc");
  check_cuda(cudaMalloc(&team, 2 * sizeof(int)), "cudaMalloc");
  read_lsa_addresses<<<1, 1>>>(s.dev_comm, s.window, addresses, team);
  std::vector<unsigned long long> host_addresses(kMaxPeers, 0);
  int host_team[2] = {-1, -1};
  cudaError_t status = cudaDeviceSynchronize();
  if (status == cudaSuccess)
    status = cudaMemcpy(host_addresses.data(), addresses, kMaxPeers * sizeof(unsigned long long), cudaMemcpyDeviceToHost);
  if (status == cudaSuccess) status = cudaMemcpy(host_team, team, sizeof(host_team), cudaMemcpyDeviceToHost);
  cudaFree(addresses);
  cudaFree(team);
  check_cuda(status, "reading the peers' window addresses");
  if (host_team[1] != int(s.ranks) || host_team[0] != int(s.rank))
    throw InputError("--tp " + std::to_string(s.ranks) + " on GPUs: rank " + std::to_string(s.rank) + " is rank " +
                     std::to_string(host_team[0]) + " of an NCCL LSA team of " + std::to_string(host_team[1]) +
                     "; the collective tiles load their peers' memory directly, so every rank must be on one node "
                     "with peer access (NVLink or PCIe P2P) to every other, in rank order");
  const uint64_t flags_offset = aligned(window_bytes);
  for (uint32_t r = 0; r < s.ranks; ++r) {
    auto* base = reinterpret_cast<unsigned char*>(host_addresses[r]);
    s.windows.push_back(base);
    s.flags.push_back(reinterpret_cast<uint64_t*>(base + flags_offset));
  }
}

NcclWindowGroup::~NcclWindowGroup() = default;

RankView NcclWindowGroup::view() const {
  const State& s = *state_;
  RankView v;
  v.rank = s.rank;
  v.ranks = s.ranks;
  v.windows = s.windows.data();
  v.flags = s.flags.data();
  v.window_bytes = s.window_bytes;
  v.flag_count = s.flag_count;
  v.timeout_ms = s.timeout_ms;
  return v;
}

}  // namespace tilefire
