#pragma once
// CUDA C++'s device built-ins for device code compiled by the host compiler under the host emulation
// (emulator.h). Included first by a translation unit that compiles a .cu file for the emulation
// (megakernel_emulated.cpp); the CUDA headers then give the host their types (uint4, float2, dim3,
// __nv_bfloat162 and its conversions), and this header the rest:
//  - threadIdx, blockIdx, blockDim, gridDim of the emulated thread;
//  - __shared__ variables as thread_local: one copy per CTA, since a CTA's threads share an OS thread;
//  - barriers, warp shuffles and votes through the emulator's collectives;
//  - atomics as relaxed C++ atomics and fences as sequentially consistent ones (CUDA's atomics are
//    relaxed, and __threadfence orders as a fence.sc does);
//  - __ldg / __ldcg / __ldcv as plain (volatile for __ldcv) loads of host memory, each at an address
//    aligned as its type must be on a GPU (else the kernel traps, as a misaligned load faults there).
#if !defined(TILEFIRE_DEVICE_EMULATION)
#error "device_prelude.h is for the host emulation: define TILEFIRE_DEVICE_EMULATION"
#endif

#define __shared__ static thread_local
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "megakernel/cuda/emulation/emulator.h"

#define threadIdx (::tilefire::emulation::thread_index())
#define blockIdx (::tilefire::emulation::block_index())
#define blockDim (::tilefire::emulation::block_dim())
#define gridDim (::tilefire::emulation::grid_dim())

using std::isfinite;
using std::isnan;

inline void __syncthreads() { ::tilefire::emulation::barrier_sync(0, blockDim.x * blockDim.y * blockDim.z); }

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::tilefire::emulation::warp_collective(::tilefire::emulation::Collective::syncwarp, mask, nullptr, 0);
}

// Width 32 only (the device code uses no other): the value of lane (this lane ^ lane_mask).
template <class T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint32_t words[2] = {0, 0};
  std::memcpy(words, &value, sizeof(T));
  const uint32_t* all = ::tilefire::emulation::warp_collective(::tilefire::emulation::Collective::shuffle, mask, words, 2);
  const uint32_t source = ::tilefire::emulation::lane_id() ^ uint32_t(lane_mask);
  if (source >= 32) return value;
  T out;
  std::memcpy(&out, all + source * ::tilefire::emulation::kCollectiveWords, sizeof(T));
  return out;
}

inline uint32_t warp_vote_count(unsigned mask, int predicate) {
  const uint32_t word = predicate ? 1u : 0u;
  const uint32_t* all = ::tilefire::emulation::warp_collective(::tilefire::emulation::Collective::vote, mask, &word, 1);
  uint32_t count = 0;
  for (uint32_t lane = 0; lane < 32; ++lane) count += all[lane * ::tilefire::emulation::kCollectiveWords];
  return count;
}
inline int __all_sync(unsigned mask, int predicate) { return warp_vote_count(mask, predicate) == 32; }
inline int __any_sync(unsigned mask, int predicate) { return warp_vote_count(mask, predicate) != 0; }

// A GPU faults on a load whose address is not a multiple of its type's size (a float2 at 4 mod 8, a
// uint4 at 8 mod 16), where the host reads it fine: such a load stops the emulated kernel instead, so
// a shape that misaligns one fails on CI rather than on the first GPU. (The CUDA headers' vector types
// carry their device alignment on the host too: alignof(uint4) is 16.)
template <class T>
inline const T* aligned_load_address(const T* p, const char* load) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0)
    ::tilefire::emulation::trap(std::string(load) + " of " + std::to_string(sizeof(T)) + " bytes at an address not a multiple of " +
                                std::to_string(alignof(T)));
  return p;
}
template <class T>
inline T __ldg(const T* p) {
  return *aligned_load_address(p, "__ldg");
}
template <class T>
inline T __ldcg(const T* p) {
  return *aligned_load_address(p, "__ldcg");
}
template <class T>
inline T __ldcv(const T* p) {
  return *const_cast<const volatile T*>(aligned_load_address(p, "__ldcv"));  // a fresh read every time
}

// A fence, and a mark on the calling thread that its atomics until its next barrier release and acquire
// (the fence-then-atomic pattern, written as ThreadSanitizer understands it: it does not model fences).
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ::tilefire::emulation::note_fence();
}
inline void __threadfence_system() { __threadfence(); }
inline void __nanosleep(unsigned) { ::tilefire::emulation::poll(); }
[[noreturn]] inline void __trap() { ::tilefire::emulation::trap("__trap()"); }

// An atomic read-modify-write of *p (relaxed, as CUDA's are; acquire-release after a fence of this
// thread's, see __threadfence), then a note that another CTA polling for it may move on.
template <class T, class Operation>
inline T device_atomic(T* p, Operation operation) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) ::tilefire::emulation::trap("a misaligned atomic");
  const std::memory_order order = ::tilefire::emulation::fenced() ? std::memory_order_acq_rel : std::memory_order_relaxed;
  const T old = operation(std::atomic_ref<T>(*p), order);
  ::tilefire::emulation::note_global_write();
  return old;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  return device_atomic(p, [&](std::atomic_ref<unsigned> a, std::memory_order order) { return a.fetch_add(v, order); });
}
inline int atomicAdd(int* p, int v) {
  return device_atomic(p, [&](std::atomic_ref<int> a, std::memory_order order) { return a.fetch_add(v, order); });
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return device_atomic(p, [&](std::atomic_ref<unsigned long long> a, std::memory_order order) { return a.fetch_add(v, order); });
}
inline unsigned atomicExch(unsigned* p, unsigned v) {
  return device_atomic(p, [&](std::atomic_ref<unsigned> a, std::memory_order order) { return a.exchange(v, order); });
}
inline unsigned long long atomicExch(unsigned long long* p, unsigned long long v) {
  return device_atomic(p, [&](std::atomic_ref<unsigned long long> a, std::memory_order order) { return a.exchange(v, order); });
}
inline unsigned atomicCAS(unsigned* p, unsigned expected, unsigned desired) {
  return device_atomic(p, [&](std::atomic_ref<unsigned> a, std::memory_order order) {
    a.compare_exchange_strong(expected, desired, order, std::memory_order_relaxed);
    return expected;  // the old value either way
  });
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  return device_atomic(p, [&](std::atomic_ref<unsigned> a, std::memory_order order) { return a.fetch_or(v, order); });
}
template <class T>
inline T atomic_max_of(T* p, T v) {
  return device_atomic(p, [&](std::atomic_ref<T> a, std::memory_order order) {
    T old = a.load(std::memory_order_relaxed);
    while (old < v && !a.compare_exchange_weak(old, v, order, std::memory_order_relaxed)) {
    }
    return old;
  });
}
inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) { return atomic_max_of(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return atomic_max_of(p, v); }

inline float __uint_as_float(unsigned bits) { return std::bit_cast<float>(bits); }
inline float __int_as_float(int bits) { return std::bit_cast<float>(bits); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }

// CUDA's min and max overloads for the types the device code passes.
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
