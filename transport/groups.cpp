// The in-process and shared-memory back ends, and the bootstrap from the environment (transport/groups.h).
#include "transport/groups.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tilefire {

// --- in-process --------------------------------------------------------------------------------------

InProcessGroup::InProcessGroup(uint32_t ranks, uint64_t window_bytes, uint32_t flag_count, uint32_t timeout_ms)
    : window_bytes_(window_bytes), flag_count_(flag_count), timeout_ms_(timeout_ms) {
  for (uint32_t r = 0; r < ranks; ++r) {
    window_storage_.push_back(std::make_unique<unsigned char[]>(window_bytes));  // zeroed
    flag_storage_.push_back(std::make_unique<uint64_t[]>(flag_count));            // zeroed: epoch 0
    windows_.push_back(window_storage_.back().get());
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

// A segment: this header, the flags, then the window. `ready` is stored last, with release.
struct SegmentHeader {
  uint64_t magic;
  uint64_t window_bytes;
  uint32_t flag_count;
  uint32_t ranks;
  uint32_t ready;
  uint32_t reserved;
};
constexpr uint64_t kSegmentMagic = 0x54464e53484d3031ull;  // "TFNSHM01"
constexpr uint64_t kFlagsOffset = 64;

std::string segment_name(const std::string& rendezvous, uint32_t rank) {
  return "/tilefire." + rendezvous + "." + std::to_string(rank);
}

uint64_t segment_bytes(uint64_t window_bytes, uint32_t flag_count) {
  return (kFlagsOffset + uint64_t(flag_count) * 8 + 63) / 64 * 64 + window_bytes;
}

}  // namespace

SharedMemoryGroup::SharedMemoryGroup(const Bootstrap& bootstrap, uint64_t window_bytes, uint32_t flag_count,
                                     uint32_t timeout_ms)
    : bootstrap_(bootstrap), window_bytes_(window_bytes), flag_count_(flag_count), timeout_ms_(timeout_ms) {
  const uint64_t bytes = segment_bytes(window_bytes, flag_count);
  const uint64_t window_offset = bytes - window_bytes;
  mappings_.resize(bootstrap.ranks);
  windows_.assign(bootstrap.ranks, nullptr);
  flags_.assign(bootstrap.ranks, nullptr);
  own_name_ = segment_name(bootstrap.rendezvous, bootstrap.rank);
  shm_unlink(own_name_.c_str());  // a segment left by an earlier run that crashed
  const int fd = shm_open(own_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw TransportError("rank " + std::to_string(bootstrap.rank) + ": cannot create shared memory " + own_name_ + ": " + std::strerror(errno));
  if (ftruncate(fd, off_t(bytes)) != 0) {
    close(fd);
    shm_unlink(own_name_.c_str());
    throw TransportError("rank " + std::to_string(bootstrap.rank) + ": cannot size shared memory " + own_name_ + " to " +
                         std::to_string(bytes) + " bytes: " + std::strerror(errno));
  }
  void* own = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (own == MAP_FAILED) {
    shm_unlink(own_name_.c_str());
    throw TransportError("rank " + std::to_string(bootstrap.rank) + ": cannot map " + own_name_ + ": " + std::strerror(errno));
  }
  auto* header = static_cast<SegmentHeader*>(own);
  header->magic = kSegmentMagic;
  header->window_bytes = window_bytes;
  header->flag_count = flag_count;
  header->ranks = bootstrap.ranks;
  std::atomic_ref<uint32_t>(header->ready).store(1, std::memory_order_release);
  mappings_[bootstrap.rank] = {own, bytes};

  // Map every peer's segment once it exists and is ready.
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < bootstrap.ranks; ++r) {
    while (!mappings_[r].base) {
      const std::string name = segment_name(bootstrap.rendezvous, r);
      const int peer = shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (peer >= 0 && fstat(peer, &st) == 0 && uint64_t(st.st_size) == bytes) {
        void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, peer, 0);
        close(peer);
        if (base != MAP_FAILED) {
          auto* h = static_cast<SegmentHeader*>(base);
          if (std::atomic_ref<uint32_t>(h->ready).load(std::memory_order_acquire) == 1 && h->magic == kSegmentMagic) {
            if (h->ranks != bootstrap.ranks || h->window_bytes != window_bytes || h->flag_count != flag_count) {
              munmap(base, bytes);
              throw TransportError("rank " + std::to_string(bootstrap.rank) + ": rank " + std::to_string(r) +
                                   " joined with a different group layout (a different model, --tp or program)");
            }
            mappings_[r] = {base, bytes};
            break;
          }
          munmap(base, bytes);
        }
      } else if (peer >= 0) {
        close(peer);
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms)) {
        std::string missing;
        for (uint32_t m = 0; m < bootstrap.ranks; ++m)
          if (!mappings_[m].base) missing += (missing.empty() ? "" : ", ") + std::to_string(m);
        for (const Mapping& mapping : mappings_)
          if (mapping.base) munmap(mapping.base, mapping.bytes);
        mappings_.clear();
        shm_unlink(own_name_.c_str());
        throw TransportError("rank " + std::to_string(bootstrap.rank) + " of " + std::to_string(bootstrap.ranks) +
                             ": rank(s) " + missing + " never joined group '" + bootstrap.rendezvous + "' within " +
                             std::to_string(timeout_ms) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  for (uint32_t r = 0; r < bootstrap.ranks; ++r) {
    auto* base = static_cast<unsigned char*>(mappings_[r].base);
    flags_[r] = reinterpret_cast<uint64_t*>(base + kFlagsOffset);
    windows_[r] = base + window_offset;
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
