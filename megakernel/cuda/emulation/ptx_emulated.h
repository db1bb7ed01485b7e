#pragma once
// ops/cuda/ptx.cuh under the host emulation: each instruction as the PTX ISA specifies it, over the
// emulator (emulator.h). Loads that the device code spins on poll, so the CTA's other threads run.
#include <vector_types.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "megakernel/cuda/emulation/emulator.h"

namespace tilefire::device::ptx {

namespace detail {
template <class T>
inline std::atomic_ref<T> aligned_atomic(const T* p, const char* instruction) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0) emulation::trap(std::string(instruction) + " at a misaligned address");
  return std::atomic_ref<T>(*const_cast<T*>(p));
}
inline float bf16_to_float(uint32_t word, uint32_t half) {
  const uint32_t bits = ((word >> (16 * half)) & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
}  // namespace detail

inline void barrier_sync(uint32_t id, uint32_t threads) { emulation::barrier_sync(id, threads); }

inline uint4 load_readonly_v4(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) emulation::trap("ld.global.nc.v4.u32 at an address that is not 16-byte aligned");
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
}

inline uint64_t global_timer_ns() { return emulation::global_timer_ns(); }

// Every acquire load may be a spin loop's poll; every release store may be what another CTA polls for.
namespace detail {
template <class T>
inline T acquire(const T* p, const char* instruction) {
  emulation::poll();
  return aligned_atomic(p, instruction).load(std::memory_order_acquire);
}
template <class T>
inline void release(T* p, T v, const char* instruction) {
  aligned_atomic(p, instruction).store(v, std::memory_order_release);
  emulation::note_global_write();
}
}  // namespace detail
inline uint32_t load_acquire_gpu(const uint32_t* p) { return detail::acquire(p, "ld.acquire.gpu.u32"); }
inline unsigned long long load_acquire_gpu(const unsigned long long* p) { return detail::acquire(p, "ld.acquire.gpu.u64"); }
inline uint32_t load_acquire_system(const uint32_t* p) { return detail::acquire(p, "ld.acquire.sys.u32"); }
inline unsigned long long load_acquire_system(const unsigned long long* p) { return detail::acquire(p, "ld.acquire.sys.u64"); }
inline void store_release_gpu(unsigned long long* p, unsigned long long v) { detail::release(p, v, "st.release.gpu.u64"); }
inline void store_release_system(uint32_t* p, uint32_t v) { detail::release(p, v, "st.release.sys.u32"); }
inline void store_release_system(unsigned long long* p, unsigned long long v) { detail::release(p, v, "st.release.sys.u64"); }
inline uint32_t load_relaxed_gpu(const uint32_t* p) {
  return detail::aligned_atomic(p, "ld.relaxed.gpu.u32").load(std::memory_order_relaxed);
}
inline float load_relaxed_system(const float* p) {
  return detail::aligned_atomic(p, "ld.relaxed.sys.f32").load(std::memory_order_relaxed);
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, with the fragment layouts of the PTX ISA
// ("Matrix Fragments for mma.m16n8k16 with floating point type"): groupID = lane >> 2, threadID_in_group
// = lane % 4; A's register j holds a(2j), a(2j+1) (the lower index in the low half), at row groupID
// (+ 8 for registers 1 and 3) and columns 2 threadID_in_group + {0, 1} (+ 8 for registers 2 and 3);
// B's register j holds rows 2 threadID_in_group + {0, 1} (+ 8 for register 1) of column groupID; C and
// D's element i sits at row groupID (+ 8 for i >= 2), column 2 threadID_in_group + (i & 1). Products
// of bf16 are exact in f32; they are summed in k order onto C.
inline void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  uint32_t words[10];
  std::memcpy(words, a, 16);
  std::memcpy(words + 4, b, 8);
  std::memcpy(words + 6, d, 16);
  const uint32_t* all = emulation::warp_collective(emulation::Collective::mma, 0xffffffffu, words, 10);
  const uint32_t lane = emulation::lane_id();
  const uint32_t group = lane >> 2, in_group = lane & 3;
  auto operand = [&](uint32_t holder, uint32_t word) { return all[holder * emulation::kCollectiveWords + word]; };
  for (uint32_t i = 0; i < 4; ++i) {
    const uint32_t row = group + (i >= 2 ? 8 : 0), column = 2 * in_group + (i & 1);
    float sum = d[i];
    for (uint32_t k = 0; k < 16; ++k) {
      const uint32_t a_holder = (row % 8) * 4 + (k % 8) / 2, a_register = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
      const uint32_t b_holder = column * 4 + (k % 8) / 2, b_register = k >= 8 ? 1 : 0;
      sum += detail::bf16_to_float(operand(a_holder, a_register), k & 1) *
             detail::bf16_to_float(operand(b_holder, 4 + b_register), k & 1);
    }
    d[i] = sum;
  }
}

inline void mbarrier_init(uint64_t* barrier, uint32_t arrivals) { emulation::mbarrier_init(barrier, arrivals); }
inline void fence_mbarrier_init() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void mbarrier_arrive(uint64_t* barrier) { emulation::mbarrier_arrive(barrier, 0); }
inline void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) { emulation::mbarrier_arrive(barrier, bytes); }
inline bool mbarrier_try_wait_parity(uint64_t* barrier, uint32_t parity) { return emulation::mbarrier_test_parity(barrier, parity); }
inline void bulk_copy_to_shared(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  emulation::bulk_copy_to_shared(destination, source, bytes, barrier);
}

}  // namespace tilefire::device::ptx
