#pragma once
// A host emulation of a CUDA device, so that the megakernel's device code (megakernel/cuda/megakernel.cu,
// ops/cuda/*.cuh) and its host side (cuda_executor.cu) run where there is no GPU: in CI, on every change
// (docs/CUDA.md, "The host emulation").
//
// The model:
//  - a launch runs every CTA of the grid on its own OS thread, all at once (a cooperative grid is all
//    resident), and the CTA's threads as fibers on that OS thread, switched only where CUDA lets
//    threads wait for each other: barriers, warp collectives, mbarriers, and the polls of spin loops
//    (acquire loads, __nanosleep). Between CTAs the memory model is C++'s: acquire loads, release
//    stores and fences as the PTX says, relaxed atomics; a CTA whose threads all poll sleeps until
//    another CTA writes with an atomic or a release store (or a millisecond passes: the host's writes);
//  - a warp collective (shuffle, vote, __syncwarp, mma.sync) waits until all 32 lanes have given their
//    operands, then each lane reads what the instruction gives it; lanes that disagree on which
//    collective they are in, or a mask other than the full warp, stop the kernel with a message;
//  - mbarriers follow the PTX ISA: pending arrivals, a transaction count, a phase parity; a bulk copy
//    lands as late as it may, when a thread waits on its mbarrier (or every thread of the CTA waits),
//    and the bytes it will write read as NaN until then, so a tile that reads a stage before waiting
//    for it fails its comparison; a CTA that exits with copies still landing is a fault;
//  - dynamic shared memory and device allocations start filled with 0xff bytes (NaN as f32 and bf16),
//    so a read of memory nobody wrote is seen (static __shared__ variables start as zeros);
//  - a CTA whose every live thread waits at a barrier or collective no other thread can reach is a
//    deadlock: the kernel stops with a message naming the CTA, and the launch fails, as a trap does.
// It checks what the device code does, not how fast: nothing timed here says anything about a GPU.
#include <vector_types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

namespace tilefire::emulation {

// --- the device, as the emulated runtime reports it ------------------------------------------------
struct DeviceModel {
  uint32_t multiprocessors = 4;              // TILEFIRE_EMULATED_SMS overrides (1 to 64)
  uint32_t shared_per_block_optin = 232448;  // an H100/H200's 227 KiB
  uint32_t shared_per_multiprocessor = 233472;
  uint32_t max_threads_per_block = 1024;
  uint32_t max_threads_per_multiprocessor = 2048;
};
const DeviceModel& device_model();

// --- kernels ---------------------------------------------------------------------------------------
// A launch of a registered kernel: copies the arguments (as cudaLaunchKernel does) and runs the kernel
// body on every thread of every CTA.
class KernelArguments {
 public:
  virtual ~KernelArguments() = default;
  virtual void run() = 0;  // the kernel body with the copied arguments, on the calling emulated thread
};
using ArgumentCopier = KernelArguments* (*)(void** arguments);

struct KernelInfo {
  ArgumentCopier copy_arguments = nullptr;
  uint32_t static_shared_bytes = 0;
  uint32_t max_dynamic_shared_bytes = 0;  // cudaFuncAttributeMaxDynamicSharedMemorySize
};

void register_kernel(const void* entry, ArgumentCopier copier, uint32_t static_shared_bytes);
KernelInfo* find_kernel(const void* entry);  // null for a function never registered

template <class... Args>
class TypedKernelArguments final : public KernelArguments {
 public:
  TypedKernelArguments(void (*kernel)(Args...), void** arguments) : kernel_(kernel), values_(copy(arguments)) {}
  void run() override { std::apply(kernel_, values_); }

 private:
  using Values = std::tuple<std::remove_cvref_t<Args>...>;
  static Values copy(void** arguments) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Values(*static_cast<const std::tuple_element_t<I, Values>*>(arguments[I])...);
    }(std::index_sequence_for<Args...>{});
  }
  void (*kernel_)(Args...);
  Values values_;
};

// Registers `kernel` (a __global__ function compiled for the emulation) at static initialisation:
//   static const bool registered = tilefire::emulation::register_kernel_function<&my_kernel>(static_bytes);
template <auto Kernel>
bool register_kernel_function(uint32_t static_shared_bytes) {
  auto copier = [](void** arguments) -> KernelArguments* { return new TypedKernelArguments(Kernel, arguments); };
  register_kernel(reinterpret_cast<const void*>(Kernel), copier, static_shared_bytes);
  return true;
}

// CTAs of the kernel that fit on one SM at once (threads, then shared memory), as the occupancy query
// answers.
uint32_t blocks_per_multiprocessor(const KernelInfo& kernel, uint32_t threads, size_t dynamic_shared_bytes);

// A running grid; joined by the stream it was launched on.
class Grid;
// Starts the grid; `error` gets why it cannot start (then null is returned). A cooperative grid must
// fit on the device all at once.
Grid* launch_grid(const void* entry, dim3 grid, dim3 block, void** arguments, size_t dynamic_shared_bytes, bool cooperative,
                  std::string* error);
bool grid_finished(const Grid* grid);
// Waits for the grid and frees it; false when it trapped (then `message` says why).
bool join_grid(Grid* grid, std::string* message);

// --- what the device code calls (through device_prelude.h and ptx_emulated.h) ---------------------
namespace detail {  // the running fiber's, set by the scheduler at every switch
extern thread_local const uint3* current_thread_index;
extern thread_local uint32_t current_lane;
}  // namespace detail
inline const uint3& thread_index() { return *detail::current_thread_index; }
inline uint32_t lane_id() { return detail::current_lane; }  // the calling thread's lane in its warp
const uint3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
unsigned char* dynamic_shared_memory();

void barrier_sync(uint32_t id, uint32_t threads);
// A warp collective: this lane's `count` words (at most kCollectiveWords) in, and the whole warp's
// words out: [32][kCollectiveWords], lane-major, readable until this lane's next collective.
constexpr uint32_t kCollectiveWords = 10;
enum class Collective : uint32_t { syncwarp = 1, shuffle, vote, mma };
const uint32_t* warp_collective(Collective kind, uint32_t mask, const uint32_t* words, uint32_t count);
void poll();  // a spin loop's iteration: the CTA's other threads run
void note_global_write();  // an atomic or a release store another CTA may be polling for
void note_fence();         // the calling thread fenced: its atomics until its next barrier are acq_rel
bool fenced();
[[noreturn]] void trap(const std::string& why);
uint64_t global_timer_ns();

void mbarrier_init(uint64_t* barrier, uint32_t arrivals);
void mbarrier_arrive(uint64_t* barrier, uint32_t expect_tx_bytes);
bool mbarrier_test_parity(uint64_t* barrier, uint32_t parity);
void bulk_copy_to_shared(void* destination, const void* source, uint32_t bytes, uint64_t* barrier);

}  // namespace tilefire::emulation
