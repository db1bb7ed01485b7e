// The host emulation of the CUDA device (megakernel/cuda/emulation/) checked on its own, so that what
// the CUDA path's emulated tests pass means something: small kernels against plain host references
// for the warp collectives and mma.sync (the PTX ISA's fragment layout), the mbarrier and bulk-copy
// protocol (a stage read before its barrier completes reads NaN), and the faults the emulation turns
// into a failed launch (a deadlock at a barrier, lanes in different collectives, a misaligned bulk
// copy or vector load). Built only with the emulation (label `emulation`).
#include "megakernel/cuda/emulation/device_prelude.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/cuda/ptx.cuh"
#include "ops/dtype.h"

namespace {

// --- kernels -------------------------------------------------------------------------------------------

// out[lane] = in[lane ^ mask] for masks 1, 2, 4, 8, 16 (out: [5][32]); votes[0..1] = all / any of lane < limit.
__global__ void shuffle_and_vote_kernel(const double* in, double* out, uint32_t limit, int* votes) {
  const uint32_t lane = threadIdx.x;
  for (int m = 0, mask = 1; mask < 32; ++m, mask <<= 1) out[m * 32 + lane] = __shfl_xor_sync(0xffffffffu, in[lane], mask);
  const int all = __all_sync(0xffffffffu, lane < limit), any = __any_sync(0xffffffffu, lane < limit);
  if (lane == 0) {
    votes[0] = all;
    votes[1] = any;
  }
}

// d = a * b + c for one 16x8x16 tile: a [16][16] and b_t [8][16] (b's columns) as bf16 bits, c and
// d [16][8] f32; each lane loads its fragments as the PTX ISA lays them out.
__global__ void mma_kernel(const uint16_t* a, const uint16_t* b_t, const float* c, float* d) {
  const uint32_t lane = threadIdx.x, group = lane >> 2, in_group = lane & 3;
  auto pair = [](const uint16_t* row, uint32_t col) { return uint32_t(row[col]) | (uint32_t(row[col + 1]) << 16); };
  const uint32_t fa[4] = {pair(a + group * 16, 2 * in_group), pair(a + (group + 8) * 16, 2 * in_group),
                          pair(a + group * 16, 2 * in_group + 8), pair(a + (group + 8) * 16, 2 * in_group + 8)};
  const uint32_t fb[2] = {pair(b_t + group * 16, 2 * in_group), pair(b_t + group * 16, 2 * in_group + 8)};
  float acc[4];
  for (uint32_t i = 0; i < 4; ++i) acc[i] = c[(group + (i >= 2 ? 8 : 0)) * 8 + 2 * in_group + (i & 1)];
  tilefire::device::ptx::mma_bf16_m16n8k16(acc, fa, fb);
  for (uint32_t i = 0; i < 4; ++i) d[(group + (i >= 2 ? 8 : 0)) * 8 + 2 * in_group + (i & 1)] = acc[i];
}

// Thread 0 bulk-copies `bytes` of `source` into shared memory on an mbarrier; every thread reads its
// word before anyone waits on the barrier (early: NaN, since the copy has not landed) and after its
// wait (late).
__global__ void bulk_copy_kernel(const float* source, uint32_t bytes, float* early, float* late) {
  __shared__ __align__(8) uint64_t full;
  unsigned char* stage = tilefire::emulation::dynamic_shared_memory();
  if (threadIdx.x == 0) {
    tilefire::device::ptx::mbarrier_init(&full, 1);
    tilefire::device::ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tilefire::device::ptx::mbarrier_arrive_expect_tx(&full, bytes);
    tilefire::device::ptx::bulk_copy_to_shared(stage, source, bytes, &full);
  }
  __syncthreads();
  const float* words = reinterpret_cast<const float*>(stage);
  early[threadIdx.x] = words[threadIdx.x];
  __syncthreads();  // every early read is done before anyone waits
  while (!tilefire::device::ptx::mbarrier_try_wait_parity(&full, 0)) {
  }
  late[threadIdx.x] = words[threadIdx.x];
}

__global__ void misaligned_bulk_copy_kernel(const unsigned char* source) {
  __shared__ __align__(8) uint64_t full;
  if (threadIdx.x != 0) return;
  tilefire::device::ptx::mbarrier_init(&full, 1);
  tilefire::device::ptx::mbarrier_arrive_expect_tx(&full, 32);
  tilefire::device::ptx::bulk_copy_to_shared(tilefire::emulation::dynamic_shared_memory(), source + 4, 32, &full);
}

// Thread 0 reads a float2 (8-byte aligned on a GPU) through __ldg at `floats` + 1: 4 bytes past alignment.
__global__ void misaligned_load_kernel(const float* floats, float* out) {
  if (threadIdx.x != 0) return;
  const float2 pair = __ldg(reinterpret_cast<const float2*>(floats + 1));
  out[0] = pair.x + pair.y;
}

// Thread 0 leaves; the others wait at a barrier that can never complete.
__global__ void deadlock_kernel() {
  if (threadIdx.x == 0) return;
  __syncthreads();
}

// Lane 0 votes while the other lanes shuffle.
__global__ void divergent_collective_kernel(int* out) {
  if (threadIdx.x == 0)
    out[0] = __any_sync(0xffffffffu, 1);
  else
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

// Reads the float just past a buffer of `count`.
__global__ void read_past_the_end_kernel(const float* buffer, uint32_t count, float* out) {
  if (threadIdx.x == 0) out[0] = buffer[count + 64];  // past the 256-byte rounding, into the guard page
}

// CTA 1 writes `data`, then signals `flag[0]` (after a fence when `fenced`); CTA 0 waits for the flag
// with an acquire load and copies the data to `out`: the megakernel's signal-and-wait between CTAs in
// small. CTA 1 first waits, with relaxed loads (no ordering for TSan), until CTA 0 has said on flag[1]
// that it runs: a CTA whose OS thread starts only after another CTA has finished (a loaded machine) can
// be ordered after it for TSan by the emulation's own bookkeeping (the stacks and fibers it hands on),
// and then the missing fence would go unreported (docs/CUDA.md, the emulation's limits).
__global__ void signal_between_ctas_kernel(float* data, uint32_t* flag, float* out, uint32_t fenced) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 1) {
    while (tilefire::device::ptx::load_relaxed_gpu(flag + 1) == 0) {
    }
    for (uint32_t i = 0; i < 16; ++i) data[i] = float(i) * 0.5f;
    if (fenced) __threadfence();
    atomicAdd(flag, 1u);
  } else {
    atomicAdd(flag + 1, 1u);  // relaxed: CTA 0 never fences
    while (tilefire::device::ptx::load_acquire_gpu(flag) == 0) {
    }
    for (uint32_t i = 0; i < 16; ++i) out[i] = data[i];
  }
}

const bool registered = tilefire::emulation::register_kernel_function<&shuffle_and_vote_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&mma_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&bulk_copy_kernel>(8) &&
                        tilefire::emulation::register_kernel_function<&misaligned_bulk_copy_kernel>(8) &&
                        tilefire::emulation::register_kernel_function<&misaligned_load_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&deadlock_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&divergent_collective_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&read_past_the_end_kernel>(0) &&
                        tilefire::emulation::register_kernel_function<&signal_between_ctas_kernel>(0);

// --- host side -------------------------------------------------------------------------------------

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<T*>(p);
}
template <class T>
std::vector<T> host_copy(const T* device, size_t count) {
  std::vector<T> host(count);
  EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

template <class... Args>
cudaError_t run_grid(void (*kernel)(Args...), uint32_t ctas, uint32_t threads, size_t dynamic_shared, Args... args) {
  void* arguments[] = {&args..., nullptr};
  const cudaError_t launched = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(ctas), dim3(threads),
                                                           arguments, dynamic_shared, nullptr);
  if (launched != cudaSuccess) return launched;
  return cudaDeviceSynchronize();
}
template <class... Args>
cudaError_t run(void (*kernel)(Args...), uint32_t threads, size_t dynamic_shared, Args... args) {
  return run_grid(kernel, 1, threads, dynamic_shared, args...);
}

// Runs `call` and returns what it printed to stderr: the emulation names each fault there, and a test that
// expects one checks the line instead of leaving it in the log, where it would read like a failure.
template <class Call>
std::string stderr_of(Call&& call) {
  testing::internal::CaptureStderr();
  call();
  return testing::internal::GetCapturedStderr();
}

// A fault fails the launch with cudaErrorLaunchFailure, sticky as on a GPU until the device is reset, and
// the emulation says which fault it was.
template <class Launch>
void expect_fault_then_reset(Launch&& launch, const std::string& reason) {
  cudaError_t status = cudaSuccess;
  const std::string printed = stderr_of([&] { status = launch(); });
  EXPECT_EQ(status, cudaErrorLaunchFailure);
  EXPECT_NE(printed.find("tilefire emulation: the kernel trapped: "), std::string::npos) << printed;
  EXPECT_NE(printed.find(reason), std::string::npos) << "expected \"" << reason << "\" in: " << printed;
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure) << "a launch failure is sticky";
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(CudaEmulation, ShufflesAndVotesFollowTheirDefinitions) {
  ASSERT_TRUE(registered);
  std::vector<double> in(32);
  for (uint32_t i = 0; i < 32; ++i) in[i] = 1.5 * i - 7.25;
  const double* d_in = device_copy(in);
  double* d_out = device_copy(std::vector<double>(5 * 32, 0.0));
  int* votes = device_copy(std::vector<int>(2, -1));
  for (uint32_t limit : {0u, 5u, 32u}) {
    ASSERT_EQ(run(&shuffle_and_vote_kernel, 32, 0, d_in, d_out, limit, votes), cudaSuccess);
    const std::vector<double> out = host_copy(d_out, 5 * 32);
    for (uint32_t m = 0; m < 5; ++m)
      for (uint32_t lane = 0; lane < 32; ++lane) EXPECT_EQ(out[m * 32 + lane], in[lane ^ (1u << m)]) << "mask " << (1u << m);
    const std::vector<int> v = host_copy(votes, 2);
    EXPECT_EQ(v[0], limit == 32 ? 1 : 0) << "all, limit " << limit;
    EXPECT_EQ(v[1], limit > 0 ? 1 : 0) << "any, limit " << limit;
  }
}

TEST(CudaEmulation, MmaComputesTheProductOfTheFragmentsItWasGiven) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> a(16 * 16), b_t(8 * 16);
  std::vector<float> c(16 * 8);
  for (auto& x : a) x = tilefire::f32_to_bf16(normal(rng));
  for (auto& x : b_t) x = tilefire::f32_to_bf16(normal(rng));
  for (auto& x : c) x = normal(rng);
  float* d = device_copy(std::vector<float>(16 * 8, 0.0f));
  ASSERT_EQ(run(&mma_kernel, 32, 0, static_cast<const uint16_t*>(device_copy(a)), static_cast<const uint16_t*>(device_copy(b_t)),
                static_cast<const float*>(device_copy(c)), d),
            cudaSuccess);
  const std::vector<float> got = host_copy(d, 16 * 8);
  for (uint32_t i = 0; i < 16; ++i)
    for (uint32_t j = 0; j < 8; ++j) {
      double want = c[i * 8 + j];
      for (uint32_t k = 0; k < 16; ++k)
        want += double(tilefire::bf16_to_f32(a[i * 16 + k])) * double(tilefire::bf16_to_f32(b_t[j * 16 + k]));
      EXPECT_NEAR(got[i * 8 + j], want, 1e-4 * (1.0 + std::fabs(want))) << "d[" << i << "][" << j << "]";
    }
}

TEST(CudaEmulation, ABulkCopyLandsOnlyWhenItsBarrierCompletes) {
  std::vector<float> source(64);
  for (uint32_t i = 0; i < 64; ++i) source[i] = float(i) + 0.5f;
  float* early = device_copy(std::vector<float>(64, 0.0f));
  float* late = device_copy(std::vector<float>(64, 0.0f));
  ASSERT_EQ(run(&bulk_copy_kernel, 64, 256, static_cast<const float*>(device_copy(source)), 256u, early, late), cudaSuccess);
  const std::vector<float> before = host_copy(early, 64), after = host_copy(late, 64);
  for (uint32_t i = 0; i < 64; ++i) {
    EXPECT_TRUE(std::isnan(before[i])) << "word " << i << " read before the barrier: " << before[i];
    EXPECT_EQ(after[i], source[i]) << "word " << i;
  }
}

TEST(CudaEmulation, AMisalignedBulkCopyFailsTheLaunch) {
  const unsigned char* source = device_copy(std::vector<unsigned char>(64, 1));
  expect_fault_then_reset([&] { return run(&misaligned_bulk_copy_kernel, 32, 64, source); },
                          "cp.async.bulk of 32 bytes from an address 4 bytes past 16-byte alignment");
}

// A vector load a GPU would fault on (a float2 at 4 mod 8) stops the emulated kernel (the aligned ones
// are every emulated megakernel test's).
TEST(CudaEmulation, AMisalignedVectorLoadFailsTheLaunch) {
  const float* floats = device_copy(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  float* out = device_copy(std::vector<float>(1, 0.0f));
  expect_fault_then_reset([&] { return run(&misaligned_load_kernel, 32, 0, floats, out); },
                          "__ldg of 8 bytes at an address not a multiple of 8");
}

TEST(CudaEmulation, ABarrierSomeThreadsNeverReachIsADeadlockNotAHang) {
  expect_fault_then_reset([] { return run(&deadlock_kernel, 64, 0); },
                          "deadlocked: every live thread waits for threads that cannot come");
}

TEST(CudaEmulation, LanesInDifferentCollectivesFailTheLaunch) {
  int* flags = device_copy(std::vector<int>(32, 0));
  expect_fault_then_reset([&] { return run(&divergent_collective_kernel, 32, 0, flags); },
                          "the lanes of warp 0 are in different warp collectives");
}

// A kernel that reads past an allocation faults at once (the guard page after it); a copy past one is
// refused.
TEST(CudaEmulation, AccessPastAnAllocationIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        const float* buffer = device_copy(std::vector<float>(64, 1.0f));
        float* out = device_copy(std::vector<float>(1, 0.0f));
        run(&read_past_the_end_kernel, 32, 0, buffer, 64u, out);
      },
      "device code accessed 0x[0-9a-f]+, byte 256 past the end of the 256-byte device allocation at 0x[0-9a-f]+");
  float* small = device_copy(std::vector<float>(64, 1.0f));
  std::vector<float> host(1000, 0.0f);
  cudaError_t copied = cudaSuccess;
  const std::string printed =
      stderr_of([&] { copied = cudaMemcpy(small, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice); });
  EXPECT_EQ(copied, cudaErrorInvalidValue);
  EXPECT_NE(printed.find("tilefire emulation: cudaMemcpy of 4000 bytes reaches outside every device allocation"),
            std::string::npos)
      << printed;
  EXPECT_EQ(cudaMemcpy(host.data(), small + 32, 32 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaFree(small), cudaSuccess);
}

// cudaMemcpy2DAsync (the KV cache's copies between sequence slots): rows of `width` bytes `pitch` apart
// on both sides, the bytes between rows left alone; a row past an allocation is refused, as one copy is.
TEST(CudaEmulation, ATwoDimensionalCopyMovesItsRowsOnly) {
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i);
  float* from = device_copy(values);
  float* to = device_copy(std::vector<float>(64, -1.0f));
  // 4 rows of 16 floats: the first 5 of each.
  ASSERT_EQ(cudaMemcpy2DAsync(to, 16 * sizeof(float), from, 16 * sizeof(float), 5 * sizeof(float), 4, cudaMemcpyDeviceToDevice, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  std::vector<float> back(64);
  ASSERT_EQ(cudaMemcpy(back.data(), to, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_EQ(back[i], i % 16 < 5 ? float(i) : -1.0f) << "float " << i;
  cudaError_t copied = cudaSuccess;
  const std::string printed = stderr_of([&] {
    copied = cudaMemcpy2DAsync(to, 32 * sizeof(float), from, 16 * sizeof(float), 5 * sizeof(float), 4, cudaMemcpyDeviceToDevice, nullptr);
  });
  EXPECT_EQ(copied, cudaErrorInvalidValue) << "rows 32 floats apart leave the 64 of the allocation";
  EXPECT_NE(printed.find("cudaMemcpy2DAsync"), std::string::npos) << printed;
  EXPECT_EQ(cudaFree(from), cudaSuccess);
  EXPECT_EQ(cudaFree(to), cudaSuccess);
}

// The emulated device has the memory its properties give: cudaMemGetInfo counts the allocations, and an
// allocation past what is free fails, as on a GPU, without breaking the runtime for later calls.
TEST(CudaEmulation, MemoryIsAsLargeAsThePropertiesSay) {
  cudaDeviceProp properties{};
  ASSERT_EQ(cudaGetDeviceProperties(&properties, 0), cudaSuccess);
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  EXPECT_EQ(total, properties.totalGlobalMem);
  EXPECT_LE(free_before, total);
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 1 << 20), cudaSuccess);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_before - free_after, size_t(1) << 20);
  void* too_large = nullptr;
  EXPECT_EQ(cudaMalloc(&too_large, free_after + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  EXPECT_EQ(cudaFree(buffer), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_EQ(free_after, free_before);
}

// A signal between CTAs carries the data written before it when a fence precedes it; under
// ThreadSanitizer (scripts/test-sanitizers' tsan build) the same signal without the fence is a reported race,
// which is how that build checks the megakernel's signals.
TEST(CudaEmulation, ASignalBetweenCtasCarriesTheDataAFenceOrdersBeforeIt) {
  const auto signal = [](uint32_t fenced) {
    float* data = device_copy(std::vector<float>(16, 0.0f));
    uint32_t* flag = device_copy(std::vector<uint32_t>(2, 0));
    float* out = device_copy(std::vector<float>(16, 0.0f));
    EXPECT_EQ(run_grid(&signal_between_ctas_kernel, 2, 32, 0, data, flag, out, fenced), cudaSuccess);
    return host_copy(out, 16);
  };
  const std::vector<float> got = signal(1);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(got[i], float(i) * 0.5f) << i;
#if defined(__SANITIZE_THREAD__)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(signal(0), "ThreadSanitizer: data race");
#endif
}

}  // namespace
