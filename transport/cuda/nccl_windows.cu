// transport/nccl_windows.h with NCCL 2.28 (docs/TENSOR_PARALLEL.md; the calls and their requirements:
// ../shared/notes/nccl-device-api.md).
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <system_error>
#include <string>
#include <thread>
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

// Where a rank stands in NCCL's set-up, as its meeting flag `id_flag` says (rank 0 first stores 1 there:
// its id is ready). Epochs only grow, so a peer reads the furthest stage each rank reached.
constexpr uint64_t kEnteredNcclSetUp = 2;
constexpr uint64_t kFinishedNcclSetUp = 3;

// NCCL's set-up calls are collective: one rank that dies after the id went round, or a network NCCL
// cannot cross, would leave the others inside ncclCommInitRank for ever. So the communicator is
// non-blocking and each collective call is polled against one deadline; past it the meeting's flags
// name the ranks that never came, and the communicator is aborted (State's destructor).
class NcclSetUp {
 public:
  NcclSetUp(const RankView& meeting, uint32_t id_flag, uint32_t timeout_ms)
      : meeting_(meeting), id_flag_(id_flag), timeout_ms_(timeout_ms),
        deadline_(std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms)) {}

  // Waits until `comm` has finished the call that returned `returned` (ncclInProgress on a non-blocking
  // communicator, or ncclSuccess). Throws TransportError on an NCCL error or past the deadline.
  void finish(ncclComm_t comm, ncclResult_t returned, const std::string& what) const {
    if (returned != ncclSuccess && returned != ncclInProgress) throw failed(returned, what);
    if (comm == nullptr) throw failed(ncclInternalError, what + " gave no communicator");
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
      if (query != ncclSuccess) throw failed(query, what);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) throw failed(state, what);
      if (std::chrono::steady_clock::now() >= deadline_) throw TransportError(overdue(what));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  TransportError failed(ncclResult_t status, const std::string& what) const {
    return TransportError("NCCL: " + what + " on rank " + std::to_string(meeting_.rank) + " failed: " +
                          ncclGetErrorString(status) + " (" + ncclGetLastError(nullptr) + ")");
  }

  std::string overdue(const std::string& what) const {
    std::string absent;
    for (uint32_t r = 0; r < meeting_.ranks; ++r) {
      const uint64_t stage = std::atomic_ref<uint64_t>(meeting_.flags[r][id_flag_]).load(std::memory_order_acquire);
      if (stage < kEnteredNcclSetUp) absent += (absent.empty() ? "" : ", ") + std::to_string(r);
    }
    const std::string head = "rank " + std::to_string(meeting_.rank) + " of " + std::to_string(meeting_.ranks) +
                             ": NCCL's set-up (" + what + ") did not finish within " + std::to_string(timeout_ms_) + " ms: ";
    if (!absent.empty()) return head + "rank(s) " + absent + " never reached it: they died or never started";
    return head + "every rank reached it, so NCCL itself is stuck (a peer that died inside it, or a network it "
                  "cannot cross; NCCL_DEBUG=INFO shows where)";
  }

  const RankView& meeting_;
  uint32_t id_flag_, timeout_ms_;
  std::chrono::steady_clock::time_point deadline_;
};

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
  // The abort runs on a thread of its own, waited for at most kAbortWaitMs: NCCL documents that it
  // stops a set-up in progress, but if it ever blocked (a set-up stuck in its bootstrap), the error that
  // led here must still reach the user. Past the wait the communicator and the window are left to the
  // process's exit rather than freed under it.
  ~State() {
    cudaSetDevice(device);
    if (comm) {
      try {
        auto done = std::make_shared<std::promise<void>>();
        std::future<void> aborted = done->get_future();
        std::thread([comm = comm, device = device, done] {
          cudaSetDevice(device);
          ncclCommAbort(comm);
          done->set_value();
        }).detach();
        if (aborted.wait_for(std::chrono::milliseconds(kAbortWaitMs)) != std::future_status::ready) return;
      } catch (const std::system_error&) {  // no thread to be had: abort here, as before
        ncclCommAbort(comm);
      }
    }
    if (memory) ncclMemFree(memory);
  }
  static constexpr uint32_t kAbortWaitMs = 10000;
};

bool NcclWindowGroup::built() { return true; }

NcclWindowGroup::NcclWindowGroup(const RankView& meeting, uint32_t id_flag, int device, uint64_t window_bytes,
                                 uint32_t flag_count, uint32_t timeout_ms, uint32_t setup_timeout_ms)
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
  // NCCL_COMM_BLOCKING=1 makes every communicator blocking whatever its config says: the set-up then
  // waits for its peers with no deadline of ours. Said once, not refused: it is the user's setting.
  if (const char* blocking = std::getenv("NCCL_COMM_BLOCKING"); blocking && std::string(blocking) == "1") {
    static std::once_flag warned;
    std::call_once(warned, [] {
      std::fprintf(stderr, "tilefire: warning: NCCL_COMM_BLOCKING=1 makes NCCL's set-up blocking, so --tp-timeout-ms cannot "
                           "bound it: a rank that dies during it leaves the others waiting\n");
    });
  }
  publish_flag(meeting, id_flag, kEnteredNcclSetUp);
  const NcclSetUp setup(meeting, id_flag, setup_timeout_ms);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&s.comm, int(s.ranks), id, int(s.rank), &config);
  setup.finish(s.comm, init, "ncclCommInitRank");

  // One symmetric window: the collectives' buffers, then the flags, each at a 4 KiB boundary; zeroed
  // before any peer can see it.
  const uint64_t bytes = aligned(window_bytes) + aligned(uint64_t(flag_count) * sizeof(uint64_t));
  check_nccl(ncclMemAlloc(&s.memory, bytes), "ncclMemAlloc (" + std::to_string(bytes) + " bytes)");
  check_cuda(cudaMemset(s.memory, 0, bytes), "zeroing the NCCL window");
  check_cuda(cudaDeviceSynchronize(), "zeroing the NCCL window");
  setup.finish(s.comm, ncclCommWindowRegister(s.comm, s.memory, bytes, &s.window, NCCL_WIN_COLL_SYMMETRIC),
               "ncclCommWindowRegister");
  ncclDevCommRequirements requirements;
  std::memset(&requirements, 0, sizeof(requirements));  // 2.28: no initializer macro yet; no barriers needed
  setup.finish(s.comm, ncclDevCommCreate(s.comm, &requirements, &s.dev_comm), "ncclDevCommCreate");
  publish_flag(meeting, id_flag, kFinishedNcclSetUp);

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
