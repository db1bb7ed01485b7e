#pragma once
// Every inline-PTX instruction the device code uses, in one place, each as a small function; the rest
// of the device code is CUDA C++ alone. Under TILEFIRE_DEVICE_EMULATION (the host emulation that runs
// the megakernel in CI, megakernel/cuda/emulation/) the same functions come from ptx_emulated.h, which
// implements each instruction as the PTX ISA specifies it. Barriers, mbarriers and bulk copies take
// generic pointers to shared memory; the device versions convert them to shared-window addresses.
//
// TILEFIRE_DEVICE_SM90: the code that needs Hopper (bulk copies, mbarrier transaction counts) is
// compiled in; true for sm_90 device code and under the emulation, which models an sm_90 device.
// TILEFIRE_DEVICE_NOINLINE: __noinline__ (which the host compiler's library headers use as an
// attribute name, so the emulation cannot define it as a macro).
#include <cstdint>

#if defined(TILEFIRE_DEVICE_EMULATION)
#define TILEFIRE_DEVICE_SM90 1
#define TILEFIRE_DEVICE_NOINLINE __attribute__((noinline))
#include "megakernel/cuda/emulation/ptx_emulated.h"
#else
#define TILEFIRE_DEVICE_NOINLINE __noinline__
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TILEFIRE_DEVICE_SM90 1
#else
#define TILEFIRE_DEVICE_SM90 0
#endif

namespace tilefire::device::ptx {

__device__ __forceinline__ uint32_t shared_window_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// bar.sync: waits until `threads` threads (a multiple of 32) of the CTA reached barrier `id`.
__device__ __forceinline__ void barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// 16 bytes of memory that stays read-only for the kernel's life (weights), not kept in L1.
__device__ __forceinline__ uint4 load_readonly_v4(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Acquire loads and release stores at gpu scope (between the CTAs of a kernel) and at system scope
// (between GPUs, and between a GPU and the host).
__device__ __forceinline__ uint32_t load_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long load_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_system(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long load_acquire_system(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release_system(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_release_system(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// A flag another CTA may set at any time (the kernel's abort flag), read afresh without ordering.
__device__ __forceinline__ uint32_t load_relaxed_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// A peer's data, read at system scope (never a stale cached copy).
__device__ __forceinline__ float load_relaxed_system(const float* p) {
  float v;
  asm volatile("ld.relaxed.sys.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// d += a (16x16, row-major) * b (16x8, column-major): bf16 operands, f32 accumulators, one warp.
__device__ __forceinline__ void mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#if TILEFIRE_DEVICE_SM90
// mbarriers in shared memory (sm_90: with transaction counts for bulk copies).
__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_window_address(barrier)), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the bulk copies) and the CTA's threads.
__device__ __forceinline__ void fence_mbarrier_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_window_address(barrier)) : "memory");
}
// Arrives and adds `bytes` to the transaction count the phase also waits for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_window_address(barrier)), "r"(bytes)
               : "memory");
}
// True once the phase with the given parity has completed (a fresh barrier counts the phase before
// its first, parity 1, as completed); waits a bounded, hardware-chosen time before answering false.
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* barrier, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_window_address(barrier)), "r"(parity)
      : "memory");
  return done != 0;
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory by the bulk
// copy engine, completing that many bytes of `barrier`'s transaction count when they land.
__device__ __forceinline__ void bulk_copy_to_shared(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_window_address(destination)),
               "l"(source), "r"(bytes), "r"(shared_window_address(barrier))
               : "memory");
}
#endif

}  // namespace tilefire::device::ptx
#endif
