// transport/device_checks.h on a GPU.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <vector>

#include "transport/cuda/device_flags.cuh"
#include "transport/device_checks.h"
#if defined(TILEFIRE_HAVE_NCCL)
#include <nccl.h>
#include <nccl_device.h>
#endif

namespace tilefire {

namespace {

// Device memory of one check, freed on every way out of it (TILEFIRE_CUDA_CHECK returns early).
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { cudaFree(data_); }
  cudaError_t allocate(uint64_t count) { return cudaMalloc(&data_, count * sizeof(T)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
};

__host__ __device__ float contribution(uint32_t rank, uint32_t epoch, uint32_t i) {
  return float((rank * 7 + epoch * 13 + i * 3) % 1001) * 0.0078125f - 3.0f * float(rank);  // k / 128: exact in f32
}

__device__ uint64_t timer_ns() { return device::ptx::global_timer_ns(); }

// CTA r is rank r. inputs: [ranks][2][count] (two buffers, alternating by epoch parity); out: [ranks][count].
__global__ void virtual_rank_allreduce(float* inputs, float* out, unsigned long long* flags, uint32_t ranks,
                                       uint32_t count, uint32_t steps, uint64_t timeout_ns, uint32_t* timed_out) {
  __shared__ uint32_t proceed;
  const uint32_t rank = blockIdx.x;
  for (uint32_t epoch = 1; epoch <= steps; ++epoch) {
    float* mine = inputs + (uint64_t(rank) * 2 + (epoch & 1)) * count;
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) mine[i] = contribution(rank, epoch, i);
    __syncthreads();
    if (threadIdx.x == 0) {
      device::publish_epoch(flags + rank, epoch);  // publish, then wait for the peers
      proceed = 1;
      const uint64_t start = timer_ns();
      for (uint32_t peer = 0; peer < ranks && proceed; ++peer)
        while (device::load_acquire_system_u64(flags + peer) < epoch)
          if (timer_ns() - start > timeout_ns) {
            atomicExch(timed_out, 1u);
            proceed = 0;
            break;
          }
    }
    __syncthreads();
    if (!proceed) return;
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
      float sum = 0.0f;
      for (uint32_t peer = 0; peer < ranks; ++peer) sum += __ldcg(inputs + (uint64_t(peer) * 2 + (epoch & 1)) * count + i);
      out[uint64_t(rank) * count + i] = sum;
    }
    __syncthreads();
  }
}

#define TILEFIRE_CUDA_CHECK(call)                                                    \
  do {                                                                                \
    const cudaError_t status = (call);                                                \
    if (status != cudaSuccess) {                                                      \
      result.error = std::string(#call) + ": " + cudaGetErrorString(status);          \
      return result;                                                                  \
    }                                                                                 \
  } while (0)

bool device_usable(int device, DeviceCheckResult& result) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
    result.not_run_because = "no CUDA device";
    return false;
  }
  return true;
}

}  // namespace

DeviceCheckResult check_virtual_rank_allreduce(int device, uint32_t ranks, uint32_t count, uint32_t steps) {
  DeviceCheckResult result;
  if (!device_usable(device, result)) return result;
  TILEFIRE_CUDA_CHECK(cudaSetDevice(device));
  DeviceArray<float> inputs_memory, out_memory;
  DeviceArray<unsigned long long> flags_memory;
  DeviceArray<uint32_t> timed_out_memory;
  TILEFIRE_CUDA_CHECK(inputs_memory.allocate(uint64_t(ranks) * 2 * count));
  TILEFIRE_CUDA_CHECK(out_memory.allocate(uint64_t(ranks) * count));
  TILEFIRE_CUDA_CHECK(flags_memory.allocate(ranks));
  TILEFIRE_CUDA_CHECK(timed_out_memory.allocate(1));
  float *inputs = inputs_memory.get(), *out = out_memory.get();
  unsigned long long* flags = flags_memory.get();
  uint32_t* timed_out = timed_out_memory.get();
  TILEFIRE_CUDA_CHECK(cudaMemset(flags, 0, ranks * sizeof(unsigned long long)));
  TILEFIRE_CUDA_CHECK(cudaMemset(timed_out, 0, sizeof(uint32_t)));
  uint64_t timeout_ns = 5000000000ull;
  void* arguments[] = {&inputs, &out, &flags, &ranks, &count, &steps, &timeout_ns, &timed_out};
  // Cooperative: every rank (CTA) must be resident, since they wait on each other.
  TILEFIRE_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(&virtual_rank_allreduce), dim3(ranks),
                                                  dim3(256), arguments, 0, nullptr));
  TILEFIRE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> host(uint64_t(ranks) * count);
  uint32_t late = 0;
  TILEFIRE_CUDA_CHECK(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  TILEFIRE_CUDA_CHECK(cudaMemcpy(&late, timed_out, sizeof(uint32_t), cudaMemcpyDeviceToHost));
  if (late) {
    result.error = "a virtual rank waited more than 5 s for a peer";
    return result;
  }
  result.ran = true;
  for (uint32_t r = 0; r < ranks; ++r)
    for (uint32_t i = 0; i < count; ++i) {
      float expected = 0.0f;
      for (uint32_t p = 0; p < ranks; ++p) expected += contribution(p, steps, i);
      result.mismatches += host[uint64_t(r) * count + i] != expected;
    }
  return result;
}

#if defined(TILEFIRE_HAVE_NCCL)
namespace {

// One CTA: write the window through the local pointer, sync the LSA barrier (acq_rel: it publishes the
// writes and acquires the peers'), then sum every LSA peer's copy (one peer here) in rank order.
__global__ void nccl_window_kernel(ncclDevComm comm, ncclWindow_t window, uint32_t count, float* result) {
  ncclLsaBarrierSession<ncclCoopCta> barrier{ncclCoopCta(), comm, ncclTeamTagLsa(), blockIdx.x};
  float* local = static_cast<float*>(ncclGetLocalPointer(window, 0));
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) local[i] = contribution(uint32_t(comm.lsaRank), 1, i);
  barrier.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    float sum = 0.0f;
    for (int peer = 0; peer < comm.lsaSize; ++peer) sum += static_cast<const float*>(ncclGetLsaPointer(window, 0, peer))[i];
    result[i] = sum;
  }
}

}  // namespace

DeviceCheckResult check_nccl_single_rank_window(int device, uint32_t count) {
  DeviceCheckResult result;
  if (!device_usable(device, result)) return result;
  auto nccl = [&](ncclResult_t status, const char* what) {
    if (status != ncclSuccess && result.error.empty()) result.error = std::string(what) + ": " + ncclGetErrorString(status);
    return status == ncclSuccess;
  };
  ncclComm_t comm = nullptr;
  if (!nccl(ncclCommInitAll(&comm, 1, &device), "ncclCommInitAll")) return result;
  void* buffer = nullptr;
  ncclWindow_t window{};
  ncclDevComm dev_comm{};
  bool dev_comm_made = false;
  float* out = nullptr;
  const size_t bytes = (uint64_t(count) * sizeof(float) + 4095) / 4096 * 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT
  bool ok = nccl(ncclMemAlloc(&buffer, bytes), "ncclMemAlloc") &&
            nccl(ncclCommWindowRegister(comm, buffer, bytes, &window, NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister");
  if (ok) {
    ncclDevCommRequirements requirements;
    std::memset(&requirements, 0, sizeof(requirements));  // 2.28: no initializer macro yet
    requirements.lsaBarrierCount = 1;
    ok = dev_comm_made = nccl(ncclDevCommCreate(comm, &requirements, &dev_comm), "ncclDevCommCreate");
  }
  if (ok && cudaMalloc(&out, count * sizeof(float)) != cudaSuccess) {
    result.error = "cudaMalloc of the check's " + std::to_string(count) + " results failed";
    ok = false;
  }
  if (ok) {
    nccl_window_kernel<<<1, 256>>>(dev_comm, window, count, out);
    const cudaError_t status = cudaDeviceSynchronize();
    if (status != cudaSuccess) {
      result.error = std::string("the NCCL window kernel: ") + cudaGetErrorString(status);
    } else {
      std::vector<float> host(count);
      const cudaError_t copied = cudaMemcpy(host.data(), out, count * sizeof(float), cudaMemcpyDeviceToHost);
      if (copied != cudaSuccess) {
        result.error = std::string("copying the check's results back: ") + cudaGetErrorString(copied);
      } else {
        result.ran = true;
        for (uint32_t i = 0; i < count; ++i) result.mismatches += host[i] != contribution(0, 1, i);
      }
    }
  }
  cudaFree(out);  // nothing when the allocation failed
  if (dev_comm_made) ncclDevCommDestroy(comm, &dev_comm);
  if (window) ncclCommWindowDeregister(comm, window);
  if (buffer) ncclMemFree(buffer);
  ncclCommDestroy(comm);
  return result;
}
#else
DeviceCheckResult check_nccl_single_rank_window(int, uint32_t) {
  DeviceCheckResult result;
#if defined(TILEFIRE_DEVICE_EMULATION)
  result.not_run_because = "the host emulation of the device runs no NCCL";
#else
  result.not_run_because = "this build has no NCCL (nccl.h and libnccl were not found when it was configured)";
#endif
  return result;
}
#endif

}  // namespace tilefire
