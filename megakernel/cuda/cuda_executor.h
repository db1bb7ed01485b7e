#pragma once
// The CUDA megakernel's host side: one persistent kernel (one CTA per SM) runs a Program step after step
// (docs/CUDA.md). This header needs no CUDA headers; in a build without nvcc every entry point reports
// that the build has no CUDA backend (cuda_absent.cpp).
//
// Two ways to drive steps:
//  - launch: one cooperative launch per step (the grid is guaranteed co-resident, or the launch fails);
//  - resident: one launch, then the kernel waits on a doorbell in mapped host memory for each step the
//    host posts; 0 launches per step.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "megakernel/cpu/cpu_executor.h"  // ScheduleMode
#include "megakernel/cuda/device_job.h"  // kDeviceStageBytes
#include "scheduler/program.h"
#include "tilefire/errors.h"  // InputError, DeviceError
#include "transport/rank_view.h"

namespace tilefire {

struct CudaOptions {
  int device = 0;
  uint32_t ctas = 0;             // CTAs of the persistent grid; 0: one per SM (of its share of the SMs)
  uint32_t sm_share = 1;         // executors that share this GPU at once (tensor-parallel ranks on one GPU)
  uint32_t watchdog_ms = 10000;  // a wait longer than this stops the kernel with an error record
  // The host's bound on waiting for one step (or for a resident kernel to stop): past it the host gives up
  // on a kernel that hangs where no watchdog looks, reports the mailbox's words and keeps the GPU held
  // (docs/CUDA.md, "The host's deadline"). 0: 4 x the watchdog (or a tensor-parallel group's timeout, if
  // longer), at least 60 s (10 min on the emulation).
  uint32_t step_deadline_ms = 0;
  bool resident = false;         // keep the kernel alive across steps (doorbell) instead of a launch per step
  bool stage_weights = true;     // Hopper: stream weights through shared-memory stages ahead of the tasks
  uint32_t stage_bytes = kDeviceStageBytes;  // bytes per weight stage (a multiple of 16)
};

struct CudaStepResult {
  int32_t argmax = -1;     // the greedy token of the step's logits
  bool nonfinite = false;  // the logits held NaN or Inf
};

// Device memory (cudaMalloc), freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(uint64_t bytes);  // zeroed
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
  int device_ = 0;  // the GPU it is on (its free may have to wait for a kernel the host gave up on there)
};

class CudaProgram;  // a Program on the device: its blob, slot table and grow-only counters
struct CudaProgramDeleter {
  void operator()(CudaProgram* program) const;
};
using CudaProgramPtr = std::unique_ptr<CudaProgram, CudaProgramDeleter>;

class CudaExecutor {
 public:
  static constexpr uint32_t kMaxRanks = 8;  // tensor-parallel ranks a group on GPUs may have
  // Empty when a CUDA device can run the megakernel; otherwise the reason, for an error message.
  static std::string unavailable_reason(int device = 0);
  // CUDA devices visible to this process (0 when none, or in a build without CUDA).
  static int device_count();
  // Device-to-device copy bandwidth of a GPU, bytes read plus bytes written per second / 1e9: the ceiling
  // a decode step's achieved bandwidth is measured against. Best of several copies of `bytes`.
  static double measure_copy_bandwidth_gbs(int device, uint64_t bytes);

  explicit CudaExecutor(const CudaOptions& options);  // throws InputError naming what is missing
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  uint32_t workers() const;  // CTAs of the grid: programs are placed for this many workers
  std::string device_name() const;
  uint64_t free_memory_bytes() const;  // device memory free now on this executor's GPU (cudaMemGetInfo)
  const CudaOptions& options() const;
  uint64_t launches() const;  // kernel launches so far

  // Makes this executor's GPU the calling thread's current device. Every entry point here does it; an
  // owner that allocates DeviceBuffers itself calls it first (tensor-parallel ranks on several GPUs
  // are driven from several threads).
  void make_current() const;
  // Tensor parallelism: this executor runs `view.rank` of the group whose windows and flags (device
  // memory every rank's GPU reaches: transport/device_windows.h) `view` names. Programs with collective
  // tasks load only after this; a step's StepInputs::epoch is its collective epoch.
  void set_rank_view(const RankView& view);

  DeviceBuffer upload(const void* host, uint64_t bytes);
  // Copies into device memory that exists already (a rank's window, say); no kernel may be running.
  void upload_to(void* device, const void* host, uint64_t bytes);
  void download(void* host, const void* device, uint64_t bytes);
  // Copies within this GPU's memory (a KV cache slot's positions into another's: one row of bytes per KV
  // head, `pitch_bytes` apart on both sides), in order on the kernel's stream between steps; a resident
  // kernel is stopped first (it holds every SM, and the copies queue behind it on its stream). Returns
  // when they have landed.
  struct DeviceCopy {
    void* to = nullptr;
    const void* from = nullptr;
    uint64_t row_bytes = 0, rows = 0, pitch_bytes = 0;
  };
  void copy_within(const std::vector<DeviceCopy>& copies);

  // The Program must stay alive while the CudaProgram does. Throws InputError for a program the device
  // ops cannot run (weights other than bf16, head_dim above 256).
  CudaProgramPtr load(const Program& program, std::vector<void*> device_slots);
  void set_slot(CudaProgram& program, uint32_t slot, void* device_pointer);
  // With `trace`, every task's run is recorded on the device (its CTA as the worker, %globaltimer
  // nanoseconds) and appended to it.
  CudaStepResult run_step(CudaProgram& program, const StepInputs& inputs, ScheduleMode mode,
                          std::vector<TaskTiming>* trace = nullptr);
  // Switches between launch and resident mode between steps (stops a resident kernel).
  void set_resident(bool resident);
  // Kernels the host gave up waiting for (the step deadline) that still run: each holds its GPU (no
  // executor or DeviceBuffer can start there, and memory freed there is kept) until it ends. Each call
  // frees what the kernels that have ended since held (stopping a resident kernel first: call it from the
  // thread that drives the GPU).
  static uint32_t hung_kernels_running();
  // For memory allocated outside the executors (a tensor-parallel group's windows, which the kernels of
  // every GPU of the group read): while such a kernel holds a GPU of `group_devices`, takes `memory` (on
  // `device`; freed there when the kernel ends) and returns true; otherwise false, and the caller frees it.
  static bool keep_if_group_held(const std::vector<int>& group_devices, int device, void* memory);
  // Before allocating on `device` (a DeviceBuffer, a tensor-parallel group's windows: zeroing there
  // synchronizes the GPU): throws the DeviceError that says so if a kernel the host gave up on holds the
  // GPU, else stops the process's resident kernel (it holds every SM and never ends by itself) and
  // throws if that stop left the GPU held.
  static void prepare_for_allocation(int device);
  // Lets a resident kernel return (the next step starts it again). A resident kernel holds every SM, and
  // freeing device memory waits for the device: its owner, any other executor about to launch, and any
  // DeviceBuffer allocated or freed call this first (through the process's record of the running
  // resident kernel). Not thread-safe: one thread drives the GPU at a time.
  void stop_resident_kernel();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tilefire
