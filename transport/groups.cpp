// The in-process and shared-memory back ends, and the bootstrap from the environment (transport/groups.h).
#include "transport/groups.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

namespace tilefire {

// --- in-process --------------------------------------------------------------------------------------

InProcessGroup::InProcessGroup(uint32_t ranks, uint64_t window_bytes, uint32_t flag_count, uint32_t timeout_ms)
    : window_bytes_(window_bytes), flag_count_(flag_count), timeout_ms_(timeout_ms) {
  for (uint32_t r = 0; r < ranks; ++r) {
    window_storage_.push_back(std::make_unique<unsigned char[]>(window_bytes + 64));  // zeroed
    flag_storage_.push_back(std::make_unique<uint64_t[]>(flag_count));                 // zeroed: epoch 0
    // 64-byte aligned, as the window slots inside it are laid out
    const auto address = reinterpret_cast<uintptr_t>(window_storage_.back().get());
    windows_.push_back(window_storage_.back().get() + ((64 - address % 64) % 64));
    flags_.push_back(flag_storage_.back().get());
  }
}

RankView InProcessGroup::view(uint32_t rank) const {
  return RankView{rank, ranks(), windows_.data(), flags_.data(), window_bytes_, flag_count_, timeout_ms_};
}

// --- bootstrap ---------------------------------------------------------------------------------------

namespace {

std::optional<uint32_t> env_number(const char* name) {
  const char* text = std::getenv(name);
  if (!text) return std::nullopt;
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 10);
  if (!*text || *end || value > 1u << 20) throw InputError(std::string(name) + " must be a non-negative integer, got '" + text + "'");
  return uint32_t(value);
}

}  // namespace

std::optional<Bootstrap> bootstrap_from_environment() {
  Bootstrap b;
  std::optional<uint32_t> rank = env_number("RANK"), size = env_number("WORLD_SIZE");
  if (rank || size) {
    if (!rank || !size) throw InputError("RANK and WORLD_SIZE must be set together");
    const char* meet = std::getenv("TILEFIRE_RENDEZVOUS");
    if (!meet || !*meet) throw InputError("RANK and WORLD_SIZE are set, but TILEFIRE_RENDEZVOUS (the group's meeting name) is not");
    b.rendezvous = meet;
    b.source = "environment";
  } else {
    rank = env_number("OMPI_COMM_WORLD_RANK");
    size = env_number("OMPI_COMM_WORLD_SIZE");
    if (!rank || !size) return std::nullopt;
    // Every process of one mpirun job sees the same job id.
    const char* job = std::getenv("PMIX_NAMESPACE");
    if (!job) job = std::getenv("OMPI_MCA_ess_base_jobid");
    b.rendezvous = std::string("mpirun-") + (job ? job : "job");
    b.source = "mpirun";
  }
  b.rank = *rank;
  b.ranks = *size;
  if (b.ranks == 0 || b.rank >= b.ranks)
    throw InputError("rank " + std::to_string(b.rank) + " is outside a world of " + std::to_string(b.ranks) + " ranks");
  for (char& c : b.rendezvous)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return b;
}

// --- shared memory across processes ------------------------------------------------------------------

namespace {

// A segment: this header, the nonces it has seen from each peer, the flags, then the window. `ready` is
// stored last, with release. The nonce tells a live segment from a stale one of the same name: a group
// forms only when every rank has echoed every other rank's nonce.
struct SegmentHeader {
  uint64_t magic;
  uint64_t window_bytes;
  uint64_t layout_key;   // the configuration every rank must share (model, program options)
  uint64_t nonce;        // random, per creation
  uint32_t flag_count;
  uint32_t ranks;
  uint32_t creator_pid;
  uint32_t ready;
  uint64_t reserved[2];
};
static_assert(sizeof(SegmentHeader) == 64);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free && std::atomic_ref<uint32_t>::is_always_lock_free,
              "flags shared across processes need lock-free atomics");
constexpr uint64_t kSegmentMagic = 0x54464e53484d3032ull;  // "TFNSHM02"

std::string segment_name(const std::string& rendezvous, uint32_t rank) {
  return "/tilefire." + rendezvous + "." + std::to_string(rank);
}

uint64_t seen_offset() { return sizeof(SegmentHeader); }
uint64_t flags_offset(uint32_t ranks) { return (seen_offset() + uint64_t(ranks) * 8 + 63) / 64 * 64; }
uint64_t window_offset(uint32_t ranks, uint32_t flag_count) {
  return (flags_offset(ranks) + uint64_t(flag_count) * 8 + 63) / 64 * 64;
}

bool process_alive(uint32_t pid) { return pid != 0 && (kill(pid_t(pid), 0) == 0 || errno == EPERM); }

uint64_t fresh_nonce() {
  std::random_device device;
  return (uint64_t(device()) << 32) ^ device() ^ uint64_t(getpid()) ^
         uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
}

uint64_t* seen_of(void* base) { return reinterpret_cast<uint64_t*>(static_cast<unsigned char*>(base) + seen_offset()); }

}  // namespace

SharedMemoryGroup::SharedMemoryGroup(const Bootstrap& bootstrap, uint64_t window_bytes, uint32_t flag_count,
                                     uint32_t timeout_ms, uint64_t layout_key)
    : bootstrap_(bootstrap), window_bytes_(window_bytes), flag_count_(flag_count), timeout_ms_(timeout_ms) {
  const uint32_t ranks = bootstrap.ranks, me = bootstrap.rank;
  const uint64_t bytes = window_offset(ranks, flag_count) + window_bytes;
  const std::string who = "rank " + std::to_string(me) + " of " + std::to_string(ranks) + " (group '" + bootstrap.rendezvous + "')";
  mappings_.resize(ranks);
  windows_.assign(ranks, nullptr);
  flags_.assign(ranks, nullptr);
  own_name_ = segment_name(bootstrap.rendezvous, me);

  // A segment of this name from an earlier run: refused while its creator lives, removed when it died.
  if (const int old = shm_open(own_name_.c_str(), O_RDONLY, 0600); old >= 0) {
    struct stat st {};
    uint32_t pid = 0;
    if (fstat(old, &st) == 0 && uint64_t(st.st_size) >= sizeof(SegmentHeader)) {
      void* header = mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, old, 0);
      if (header != MAP_FAILED) {
        pid = static_cast<const SegmentHeader*>(header)->creator_pid;
        munmap(header, sizeof(SegmentHeader));
      }
    }
    close(old);
    if (pid != uint32_t(getpid()) && process_alive(pid))
      throw TransportError(who + ": process " + std::to_string(pid) + " already holds this rank");
    shm_unlink(own_name_.c_str());
  }
  const int fd = shm_open(own_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw TransportError(who + ": cannot create shared memory " + own_name_ + ": " + std::strerror(errno));
  // Reserve the pages now: a tmpfs that is too small fails here with a message, not with SIGBUS later.
  if (const int status = posix_fallocate(fd, 0, off_t(bytes)); status != 0) {
    close(fd);
    shm_unlink(own_name_.c_str());
    throw TransportError(who + ": cannot reserve " + std::to_string(bytes) + " bytes of shared memory in /dev/shm: " +
                         std::strerror(status));
  }
  void* own = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (own == MAP_FAILED) {
    shm_unlink(own_name_.c_str());
    throw TransportError(who + ": cannot map " + own_name_ + ": " + std::strerror(errno));
  }
  mappings_[me] = {own, bytes};
  auto* header = static_cast<SegmentHeader*>(own);
  header->magic = kSegmentMagic;
  header->window_bytes = window_bytes;
  header->layout_key = layout_key;
  header->nonce = fresh_nonce();
  header->flag_count = flag_count;
  header->ranks = ranks;
  header->creator_pid = uint32_t(getpid());
  std::atomic_ref<uint32_t>(header->ready).store(1, std::memory_order_release);

  // Maps (again, when its creator replaced it) a peer's segment; false while it is not there or not ready.
  std::vector<ino_t> inodes(ranks, 0);
  auto map_peer = [&](uint32_t r) {
    const std::string name = segment_name(bootstrap.rendezvous, r);
    const int peer = shm_open(name.c_str(), O_RDWR, 0600);
    if (peer < 0) return false;
    struct stat st {};
    const bool sized = fstat(peer, &st) == 0 && uint64_t(st.st_size) >= sizeof(SegmentHeader);
    if (!sized || (mappings_[r].base && st.st_ino == inodes[r])) {
      close(peer);
      return mappings_[r].base != nullptr;
    }
    const uint64_t peer_bytes = uint64_t(st.st_size);
    void* base = mmap(nullptr, peer_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, peer, 0);
    close(peer);
    if (base == MAP_FAILED) return false;
    const auto* h = static_cast<const SegmentHeader*>(base);
    if (std::atomic_ref<const uint32_t>(h->ready).load(std::memory_order_acquire) != 1 || h->magic != kSegmentMagic) {
      munmap(base, peer_bytes);
      return false;
    }
    if (h->ranks != ranks || h->window_bytes != window_bytes || h->flag_count != flag_count || h->layout_key != layout_key ||
        peer_bytes != bytes) {
      munmap(base, peer_bytes);
      throw TransportError(who + ": rank " + std::to_string(r) + " joined with a different configuration (another model, "
                           "--tp, --threads, --policy or context): every rank must run the same command");
    }
    if (mappings_[r].base) munmap(mappings_[r].base, mappings_[r].bytes);
    mappings_[r] = {base, bytes};
    inodes[r] = st.st_ino;
    // Echo the peer's nonce: it forms the group only when every rank has seen its live segment.
    std::atomic_ref<uint64_t>(seen_of(own)[r]).store(h->nonce, std::memory_order_release);
    return true;
  };
  auto confirmed = [&](uint32_t r) {
    return r == me || (mappings_[r].base &&
                       std::atomic_ref<uint64_t>(seen_of(mappings_[r].base)[me]).load(std::memory_order_acquire) == header->nonce);
  };

  const auto start = std::chrono::steady_clock::now();
  try {
    for (;;) {
      bool all = true;
      for (uint32_t r = 0; r < ranks; ++r) {
        if (r == me || confirmed(r)) continue;
        map_peer(r);  // maps a new peer, or remaps one whose segment was replaced since
        all = all && confirmed(r);
      }
      if (all) break;
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms)) {
        std::string missing;
        for (uint32_t r = 0; r < ranks; ++r)
          if (!confirmed(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        throw TransportError(who + ": rank(s) " + missing + " never joined within " + std::to_string(timeout_ms) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (...) {
    for (const Mapping& mapping : mappings_)
      if (mapping.base) munmap(mapping.base, mapping.bytes);
    mappings_.clear();
    shm_unlink(own_name_.c_str());
    throw;
  }
  for (uint32_t r = 0; r < ranks; ++r) {
    auto* base = static_cast<unsigned char*>(mappings_[r].base);
    flags_[r] = reinterpret_cast<uint64_t*>(base + flags_offset(ranks));
    windows_[r] = base + window_offset(ranks, flag_count);
  }
}

SharedMemoryGroup::~SharedMemoryGroup() {
  for (const Mapping& mapping : mappings_)
    if (mapping.base) munmap(mapping.base, mapping.bytes);
  shm_unlink(own_name_.c_str());  // peers keep their mappings; the name goes with its creator
}

RankView SharedMemoryGroup::view() const {
  return RankView{bootstrap_.rank, bootstrap_.ranks, windows_.data(), flags_.data(), window_bytes_, flag_count_, timeout_ms_};
}

}  // namespace tilefire
