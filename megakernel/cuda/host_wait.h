#pragma once
// The host's waits for its megakernel, bounded by the step deadline (CudaOptions::step_deadline_ms), and
// the process's record of the kernels it gave up on (docs/CUDA.md, "The host's deadline").
//
// A kernel that outlives the deadline cannot be stopped from the host, and cudaFree, cudaFreeHost,
// cudaStreamDestroy or a new kernel on its GPU would wait for it for ever. Its executor hands the kernel's
// stream and mailbox (which the kernel may still write) to the record and fails for good; what is freed
// on that GPU meanwhile is kept there too, and nothing new may start on it. Every look at the record
// reaps the kernels that have ended since (their watchdog fired, or they finished late) and only then
// frees what they held.
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace tilefire {

// One wait of the host for its kernel. It spins for the first 2 ms (a whole decode step on a GPU, where a
// sleep would add latency), then sleeps 10 to 100 us between looks (a longer step loses about that plus
// the timer's slack, some 50 us on Linux; the host emulation's CTA threads get the cores), and expires at
// the deadline.
class HostWait {
 public:
  explicit HostWait(uint32_t deadline_ms)
      : start_(Clock::now()), deadline_(start_ + std::chrono::milliseconds(deadline_ms)) {}
  bool expired() const { return Clock::now() >= deadline_; }
  void pause() {
    ++looks_;
    if (Clock::now() - start_ < std::chrono::milliseconds(2)) {
      _mm_pause();
      return;
    }
    sleep_us_ = std::min<uint32_t>(100, sleep_us_ + 10);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
  }
  uint64_t looks() const { return looks_; }
  bool sleeping() const { return sleep_us_ != 0; }
  uint64_t waited_ms() const {
    return uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start_).count());
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, deadline_;
  uint64_t looks_ = 0;
  uint32_t sleep_us_ = 0;
};

// The record of kernels the host gave up on. Thread-safe.
// Takes over a hung kernel's stream and mailbox; they are freed when the stream drains.
void record_hung_kernel(int device, cudaStream_t stream, void* mailbox);
// Kernels in the record that still run (reaping the rest).
uint32_t hung_kernels_still_running();
// Whether one still runs on `device`.
bool device_held_by_hung_kernel(int device);
[[noreturn]] void refuse_held_device(int device);  // a DeviceError that says so
// While a hung kernel holds `device`, these keep what they are given until it ends and return true;
// otherwise they return false and the caller frees as usual.
bool keep_memory_while_held(int device, void* memory);
// The same for memory on `device` that kernels on any GPU of `group` may read (a tensor-parallel group's
// windows): kept while a hung kernel holds any of them, then freed on `device`.
bool keep_group_memory_while_held(const std::vector<int>& group, int device, void* memory);
bool keep_executor_while_held(int device, cudaStream_t stream, void* mailbox);

// cuda_executor.cu: stops the process's resident kernel, if one runs (it holds every SM of its GPU, so a
// cudaFree there would wait for it); the record calls it before it frees what an ended kernel held.
void stop_running_resident_kernel();

}  // namespace tilefire
