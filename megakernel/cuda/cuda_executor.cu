// The CUDA megakernel's host side (megakernel/cuda/cuda_executor.h): device memory, loading programs,
// launching the persistent kernel or posting steps to the resident one, and turning the device's error
// record into a message that names the stuck task, its op and tile, the event, its counter and target.
#include "megakernel/cuda/cuda_executor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include "megakernel/cuda/device_job.h"
#include "megakernel/cuda/host_wait.h"
#include "megakernel/cuda/megakernel_launch.h"
#include "megakernel/kernel_layout.h"
#include "ops/all_ops.h"
#include "scheduler/device_program.h"
#include "scheduler/validator.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw DeviceError(std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                      cudaGetErrorString(status) + ")");
}

std::string wait_description(const DeviceErrorRecord& r) {
  switch (DeviceWaitKind(r.wait_kind)) {
    case DeviceWaitKind::event:
      return "event " + std::to_string(r.event) + " (counter " + std::to_string(r.counter) + ", target " +
             std::to_string(r.target) + ")";
    case DeviceWaitKind::bsp_barrier:
      return "the bsp barrier after op node " + std::to_string(r.event) + " (arrivals " + std::to_string(r.counter) +
             ", target " + std::to_string(r.target) + ")";
    case DeviceWaitKind::ready_queue:
      return "ready-queue entry " + std::to_string(r.event) + " (stamped step " + std::to_string(r.counter) +
             ", needed " + std::to_string(r.target) + ")";
    case DeviceWaitKind::weight_stage:
      return "weight stage " + std::to_string(r.event);
    case DeviceWaitKind::peer_flag:
      return "rank " + std::to_string(r.peer) + "'s flag " + std::to_string(r.event) + " (at epoch " +
             std::to_string(r.counter) + ", needed " + std::to_string(r.target) +
             "): that rank died, never arrived, or its kernel is not running beside this one";
  }
  return "?";
}

std::string describe_error(const DeviceErrorRecord& r) {
  std::string task = r.task == kNoSlot ? std::string("(no task yet)")
                                       : "task " + std::to_string(r.task) + " (" +
                                             std::string(op_name(OpCode(r.op))) + ", layer " + std::to_string(r.layer) +
                                             ", tile [" + std::to_string(r.tile_begin) + ", " + std::to_string(r.tile_end) + "))";
  switch (DeviceErrorCode(r.code)) {
    case DeviceErrorCode::watchdog:
      return "megakernel watchdog: CTA " + std::to_string(r.cta) + " waited " + std::to_string(r.waited_ms) +
             " ms in " + task + " for " + wait_description(r) + "; the step was stopped";
    case DeviceErrorCode::unknown_opcode:
      return "megakernel: CTA " + std::to_string(r.cta) + " met an unknown opcode " + std::to_string(r.op) + " in " + task;
    case DeviceErrorCode::none:
      break;
  }
  return "megakernel: error code " + std::to_string(r.code);
}

// What the device ops support; anything else is refused at load with the reason.
void check_supported(const Program& program) {
  for (const NodeDesc& node : program.nodes) {
    std::string problem;
    visit_op(node.params.op, [&](auto op) {
      using Params = typename decltype(op)::Params;
      const Params& p = node.params.as<Params>();
      if constexpr (requires { p.wdtype; }) {
        if (p.wdtype != DType::bf16) problem = "weights must be bf16 on the cuda backend";
      }
      if constexpr (requires { p.dtype; }) {
        if (p.dtype != DType::bf16) problem = "the embedding table must be bf16 on the cuda backend";
      }
      if constexpr (requires { p.head_dim; }) {
        if (p.head_dim > kDeviceMaxHeadDim) problem = "head_dim " + std::to_string(p.head_dim) + " is above 256";
      }
    });
    if (!problem.empty()) throw InputError(std::string(op_name(node.params.op)) + ": " + problem);
  }
}

// The resident kernel of this process, if one runs. While it waits on its doorbell it holds every SM's
// shared memory, so nothing else that needs an SM can start: no other executor's launch, no memset, and
// cudaFree (which waits for the device) would never return. Whatever needs the device first stops it.
std::mutex resident_mutex;
CudaExecutor* resident_owner = nullptr;

}  // namespace

void stop_running_resident_kernel() {
  CudaExecutor* owner = nullptr;
  {
    std::lock_guard lock(resident_mutex);
    owner = resident_owner;
  }
  if (owner) owner->stop_resident_kernel();
}

namespace {

// Frees device memory, or keeps it while a kernel the host gave up on still runs on its GPU (asked again
// after the resident kernel's stop, which may itself give up on that kernel).
void free_device_memory(void* memory, int device) {
  if (keep_memory_while_held(device, memory)) return;
  try {
    stop_running_resident_kernel();
  } catch (const std::exception&) {  // the resident kernel failed (its owner reports it); free anyway
  }
  if (keep_memory_while_held(device, memory)) return;
  cudaFree(memory);
}

}  // namespace

// --- DeviceBuffer -----------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check(cudaGetDevice(&device_), "cudaGetDevice");
  CudaExecutor::prepare_for_allocation(device_);
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    data_ = nullptr;
    throw DeviceError("CUDA: cannot allocate " + std::to_string(bytes) + " bytes of device memory: " + cudaGetErrorString(status));
  }
  check(cudaMemset(data_, 0, bytes), "cudaMemset");
  // The kernel runs on a non-blocking stream, which does not wait for the legacy stream's memset.
  check(cudaStreamSynchronize(nullptr), "zeroing device memory");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) free_device_memory(data_, device_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) free_device_memory(data_, device_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

// --- CudaProgram ------------------------------------------------------------------------------------

class CudaProgram {
 public:
  const Program* program = nullptr;
  DeviceProgramHeader header;
  DeviceBuffer blob;
  std::vector<void*> slots;  // host mirror of the device slot table
  DeviceBuffer slot_table;
  bool slots_dirty = false;
  DeviceBuffer events, satisfied, ready_list, counters;
  DeviceBuffer trace;  // [task_count] DeviceTaskTiming, allocated by the first traced step
  uint32_t workspace_floats = 0;
  std::string bsp_violation;  // why a bsp step of this program would run a task before its input ("": none)
  uint32_t steps = 0, dynamic_steps = 0, bsp_steps = 0;
  uint32_t push_base = 0, pop_base = 0;  // the device's ready-list counters, as the host predicts them
};

void CudaProgramDeleter::operator()(CudaProgram* program) const { delete program; }

namespace {

// The traced step's records as TaskTimings (the CTA as the worker). Every task runs once per step, so a
// record from another step means the kernel skipped a task: refused rather than drawn.
void append_device_trace(const CudaProgram& p, uint32_t kernel_step, std::vector<TaskTiming>& out) {
  std::vector<DeviceTaskTiming> records(p.header.task_count);
  check(cudaMemcpy(records.data(), p.trace.get(), records.size() * sizeof(DeviceTaskTiming), cudaMemcpyDeviceToHost),
        "reading the step's trace");
  for (uint32_t t = 0; t < records.size(); ++t) {
    const DeviceTaskTiming& r = records[t];
    if (r.kernel_step != kernel_step)
      throw DeviceError("--trace: task " + std::to_string(t) + " has no record of step " + std::to_string(kernel_step));
    out.push_back({t, r.cta, int64_t(r.start_ns), int64_t(r.end_ns)});
  }
}

}  // namespace

// --- CudaExecutor -----------------------------------------------------------------------------------

struct CudaExecutor::State {
  CudaOptions options;
  cudaDeviceProp properties{};
  uint32_t ctas = 0;
  uint32_t max_dynamic_shared = 0;
  cudaStream_t stream = nullptr;
  Mailbox* mailbox = nullptr;         // mapped host memory
  Mailbox* mailbox_device = nullptr;  // its device alias
  DeviceBuffer globals;
  DeviceBuffer tokens;                // launch mode: the step's tokens
  DeviceBuffer positions, sequences;  // launch mode: a step of several sequences' positions and slots
  uint32_t kernel_steps = 0;
  uint64_t launches = 0;
  std::string broken;                 // the error that stopped the executor
  uint32_t deadline_ms = 0;           // the host's bound on waiting for a step or a stop
  bool hung = false;                  // the host gave up on its kernel: the stream and mailbox are the record's
  bool resident_running = false;
  uint32_t resident_workspace = 0;    // workspace floats the resident kernel was launched with
  CudaExecutor* executor = nullptr;   // the owner of this state (the process's resident-kernel record)
  DeviceBuffer rank_view;             // tensor parallelism: the DeviceRankView of this executor's rank

  uint32_t stage_count(uint32_t workspace_floats) const {
    // Bulk copies into stages are Hopper's (sm_90); before it the tiles read weights from global memory.
    if (!options.stage_weights || options.stage_bytes == 0 || properties.major < 9) return 0;
    return weight_stage_count(max_dynamic_shared, workspace_floats, options.stage_bytes);
  }

  KernelConfig config(uint32_t workspace_floats) const {
    KernelConfig c;
    c.mailbox = mailbox_device;
    c.globals = static_cast<DeviceGlobals*>(globals.get());
    c.stage_count = stage_count(workspace_floats);
    c.stage_bytes = c.stage_count ? options.stage_bytes : 0;
    c.watchdog_ns = uint64_t(options.watchdog_ms) * 1000000ull;
    return c;
  }

  // Another executor's resident kernel holds the SMs: it stops before this one launches or copies.
  void stop_other_resident() {
    CudaExecutor* other = nullptr;
    {
      std::lock_guard lock(resident_mutex);
      if (resident_owner != executor) other = resident_owner;
    }
    if (!other) return;
    other->stop_resident_kernel();
    // That stop may have given up on its kernel (and said so to its owner): then this GPU may be held.
    if (device_held_by_hung_kernel(options.device)) refuse_held_device(options.device);
  }

  void launch(const KernelConfig& config) {
    stop_other_resident();
    if (config.resident) {
      std::lock_guard lock(resident_mutex);
      resident_owner = executor;
    }
    KernelConfig copy = config;
    void* arguments[] = {&copy};
    ++launches;
    check(cudaLaunchCooperativeKernel(megakernel_entry(), dim3(ctas), dim3(kDeviceThreads), arguments,
                                      max_dynamic_shared, stream),
          "launching the megakernel");
  }

  // Stops with the device's error record if there is one, else with the CUDA error.
  [[noreturn]] void fail(const std::string& cuda_error) {
    const DeviceErrorRecord record = *const_cast<const DeviceErrorRecord*>(&mailbox->error);
    broken = record.code ? describe_error(record) : cuda_error;
    resident_running = false;
    throw DeviceError(broken);
  }

  // What the host waits for, for the message should it give up: "step N of " + `what` with a step. Its
  // text is built only then, not on every step.
  struct WaitingFor {
    const char* what;
    uint32_t step = 0;
    std::string text() const { return step ? "step " + std::to_string(step) + " of " + what : what; }
  };

  // The kernel's stream drained, or the step deadline passed: then the executor gives up (throws).
  cudaError_t wait_for_stream(WaitingFor waiting_for) {
    HostWait wait(deadline_ms);
    cudaError_t status;
    while ((status = cudaStreamQuery(stream)) == cudaErrorNotReady) {
      if (wait.expired()) {
        if ((status = cudaStreamQuery(stream)) != cudaErrorNotReady) break;  // it ended just now
        give_up(waiting_for, wait);
      }
      wait.pause();
    }
    return status;
  }

  // The host stops waiting for a kernel that outlived the step deadline: it cannot be stopped from here,
  // so its stream and mailbox go to the record of hung kernels (which frees them if it ever ends), and
  // this executor refuses everything from now on. The message gives the mailbox's words, which say how
  // far the kernel got.
  [[noreturn]] void give_up(WaitingFor waiting_for, const HostWait& wait) {
    const auto word = [](uint32_t& w) { return std::to_string(std::atomic_ref<uint32_t>(w).load(std::memory_order_acquire)); };
    // The kernel still runs: its record is read only once its code (stored last, with release) is set.
    const uint32_t code = std::atomic_ref<uint32_t>(mailbox->error.code).load(std::memory_order_acquire);
    std::string message = "the host gave up after " + std::to_string(wait.waited_ms()) + " ms waiting for " + waiting_for.text() +
                          " (the step deadline, --step-deadline-ms " + std::to_string(deadline_ms) + "): the mailbox reads done " +
                          word(mailbox->done) + ", doorbell " + word(mailbox->doorbell) + ", shutdown " + word(mailbox->shutdown) +
                          ", error code " + std::to_string(code) + ".";
    if (code) message += " The device reported: " + describe_error(*const_cast<const DeviceErrorRecord*>(&mailbox->error)) + ".";
    message += " It may still run, so CUDA device " + std::to_string(options.device) +
               " stays held (its memory is kept, nothing new starts on it) until the kernel ends";
    std::atomic_ref<uint32_t>(mailbox->shutdown).store(1, std::memory_order_release);  // a resident kernel may yet see it
    hung = true;
    broken = message;
    resident_running = false;
    {
      std::lock_guard lock(resident_mutex);
      if (resident_owner == executor) resident_owner = nullptr;
    }
    record_hung_kernel(options.device, stream, mailbox);
    throw DeviceError(message);
  }

  // The step deadline: the option's, or 4 x the longest wait the device's own bounds allow (the watchdog's,
  // a tensor-parallel peer's `tp_timeout_ms`), at least 60 s: a step may be a long prefill chunk. The host
  // emulation runs a step thousands of times slower than a GPU: 10 minutes at least there.
  void set_deadline(uint32_t tp_timeout_ms) {
    if (options.step_deadline_ms) {
      deadline_ms = options.step_deadline_ms;
      return;
    }
    const bool emulated = std::string_view(properties.name).starts_with("Tilefire host emulation");
    const uint64_t longest_wait = std::max(options.watchdog_ms, tp_timeout_ms);
    deadline_ms = uint32_t(std::clamp<uint64_t>(4 * longest_wait, emulated ? 600000 : 60000, UINT32_MAX));
  }

  void refuse_if_hung() const {
    if (hung) throw DeviceError("the cuda backend stopped after an earlier error: " + broken);
  }

  void stop_resident() {
    {
      std::lock_guard lock(resident_mutex);
      if (resident_owner == executor) resident_owner = nullptr;
    }
    if (!resident_running) return;
    std::atomic_ref<uint32_t>(mailbox->shutdown).store(1, std::memory_order_release);
    const cudaError_t status = wait_for_stream({"the resident megakernel to stop"});
    resident_running = false;
    std::atomic_ref<uint32_t>(mailbox->shutdown).store(0, std::memory_order_release);
    if (status != cudaSuccess) fail(std::string("the resident megakernel failed: ") + cudaGetErrorString(status));
  }
};

std::string CudaExecutor::unavailable_reason(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice)
    return std::string("this machine has no NVIDIA GPU driver or no CUDA device (") + cudaGetErrorString(status) + ")";
  if (status != cudaSuccess) return std::string("no usable CUDA device (") + cudaGetErrorString(status) + ")";
  if (count == 0) return "no CUDA device is visible";
  if (device < 0 || device >= count) return "CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " visible)";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "cannot read the properties of CUDA device " + std::to_string(device);
  if (p.major < 8)
    return std::string(p.name) + " has compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) +
           "; the megakernel is built for 8.0 (Ampere) and 9.0 (Hopper)";
  if (!p.cooperativeLaunch) return std::string(p.name) + " does not support cooperative launches";
  return "";
}

int CudaExecutor::device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

double CudaExecutor::measure_copy_bandwidth_gbs(int device, uint64_t bytes) {
  if (const std::string reason = unavailable_reason(device); !reason.empty()) throw InputError("--backend cuda: " + reason);
  check(cudaSetDevice(device), "cudaSetDevice");
  DeviceBuffer from(bytes), to(bytes);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  float best_ms = 0;
  for (int i = 0; i < 12; ++i) {  // the first copies warm the clocks up; the best of the rest counts
    check(cudaEventRecord(start), "cudaEventRecord");
    check(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice), "a device-to-device copy");
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 2 && (best_ms == 0 || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 2.0 * double(bytes) / (double(best_ms) * 1e-3) / 1e9;
}

CudaExecutor::CudaExecutor(const CudaOptions& options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = options;
  s.executor = this;
  if (const std::string reason = unavailable_reason(options.device); !reason.empty())
    throw InputError("--backend cuda: " + reason);
  if (options.stage_bytes % 16 != 0 || options.stage_bytes > 65536)
    throw InputError("cuda: the weight stage size must be a multiple of 16 bytes and at most 65536, got " +
                     std::to_string(options.stage_bytes));
  check(cudaSetDevice(options.device), "cudaSetDevice");
  check(cudaGetDeviceProperties(&s.properties, options.device), "cudaGetDeviceProperties");
  if (device_held_by_hung_kernel(options.device)) refuse_held_device(options.device);
  s.set_deadline(0);
  cudaFuncAttributes attributes{};
  check(cudaFuncGetAttributes(&attributes, megakernel_entry()), "reading the megakernel's attributes");
  s.max_dynamic_shared = uint32_t(s.properties.sharedMemPerBlockOptin - attributes.sharedSizeBytes);
  check(cudaFuncSetAttribute(megakernel_entry(), cudaFuncAttributeMaxDynamicSharedMemorySize, int(s.max_dynamic_shared)),
        "raising the megakernel's shared-memory limit");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, megakernel_entry(), kDeviceThreads, s.max_dynamic_shared),
        "the occupancy query");
  const uint32_t resident_limit = uint32_t(per_sm) * uint32_t(s.properties.multiProcessorCount);
  if (resident_limit == 0)
    throw DeviceError("the megakernel cannot be resident on " + std::string(s.properties.name) + ": it uses " +
                      std::to_string(attributes.numRegs) + " registers per thread and " +
                      std::to_string(attributes.sharedSizeBytes + s.max_dynamic_shared) + " bytes of shared memory per CTA");
  if (options.sm_share == 0 || options.sm_share > uint32_t(s.properties.multiProcessorCount))
    throw InputError("cuda: " + std::to_string(options.sm_share) + " executors cannot share the " +
                     std::to_string(s.properties.multiProcessorCount) + " SMs of " + s.properties.name);
  // Executors sharing the GPU (ranks whose kernels wait on each other) each take their share of the SMs,
  // so their grids can all be resident at once.
  s.ctas = options.ctas ? options.ctas : uint32_t(s.properties.multiProcessorCount) / options.sm_share;
  if (uint64_t(s.ctas) * options.sm_share > resident_limit)
    throw InputError("--ctas " + std::to_string(s.ctas) + (options.sm_share > 1 ? " for each of " + std::to_string(options.sm_share) + " ranks" : "") +
                     " is more than the " + std::to_string(resident_limit) + " CTAs that can be resident at once on " +
                     s.properties.name + " (a persistent grid must all be resident, and ranks sharing a GPU must all run at once)");
  check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    void* mailbox = nullptr;
    stop_running_resident_kernel();  // another executor's: pinning host memory may wait for the device
    if (device_held_by_hung_kernel(options.device)) refuse_held_device(options.device);  // that stop gave up on it
    check(cudaHostAlloc(&mailbox, sizeof(Mailbox), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc (mailbox)");
    s.mailbox = new (mailbox) Mailbox();
    void* alias = nullptr;
    check(cudaHostGetDevicePointer(&alias, mailbox, 0), "cudaHostGetDevicePointer");
    s.mailbox_device = static_cast<Mailbox*>(alias);
    s.globals = DeviceBuffer(sizeof(DeviceGlobals));
    s.tokens = DeviceBuffer(kMailboxTokens * sizeof(int32_t));
    s.positions = DeviceBuffer(kMailboxTokens * sizeof(uint32_t));
    s.sequences = DeviceBuffer(kMailboxTokens * sizeof(uint32_t));
  } catch (...) {  // no destructor runs for a constructor that throws: the stream and mailbox go here
    if (!keep_executor_while_held(options.device, s.stream, s.mailbox)) {
      cudaStreamDestroy(s.stream);
      if (s.mailbox) cudaFreeHost(s.mailbox);
    }
    throw;
  }
}

CudaExecutor::~CudaExecutor() {
  State& s = *state_;
  // A kernel the host gave up on owns the stream and the mailbox now; the device buffers are kept until
  // it ends (DeviceBuffer's destructor), and nothing here waits for it.
  if (s.hung) return;
  try {
    s.stop_resident();  // also forgets this executor as the process's resident owner
  } catch (const std::exception&) {  // nothing more to do at teardown
  }
  if (s.hung) return;  // it gave up on the resident kernel just now
  try {
    stop_running_resident_kernel();  // another executor's: freeing pinned memory may wait for the device
  } catch (const std::exception&) {
  }
  // Another executor's kernel the host gave up on holds this GPU (ranks sharing it; perhaps given up on
  // in the stop just above): destroying the stream or freeing pinned memory could wait for it.
  if (keep_executor_while_held(s.options.device, s.stream, s.mailbox)) return;
  if (s.stream) cudaStreamDestroy(s.stream);
  if (s.mailbox) cudaFreeHost(s.mailbox);
}

uint32_t CudaExecutor::hung_kernels_running() { return hung_kernels_still_running(); }
bool CudaExecutor::keep_if_group_held(const std::vector<int>& group_devices, int device, void* memory) {
  return keep_group_memory_while_held(group_devices, device, memory);
}
void CudaExecutor::prepare_for_allocation(int device) {
  // Refused first: a GPU already held gains nothing from stopping the resident kernel (which may be
  // another GPU's, and healthy).
  if (device_held_by_hung_kernel(device)) refuse_held_device(device);
  stop_running_resident_kernel();
  if (device_held_by_hung_kernel(device)) refuse_held_device(device);  // that stop gave up on its kernel
}

uint32_t CudaExecutor::workers() const { return state_->ctas; }
std::string CudaExecutor::device_name() const { return state_->properties.name; }
const CudaOptions& CudaExecutor::options() const { return state_->options; }
uint64_t CudaExecutor::launches() const { return state_->launches; }

void CudaExecutor::make_current() const { check(cudaSetDevice(state_->options.device), "cudaSetDevice"); }

uint64_t CudaExecutor::free_memory_bytes() const {
  make_current();
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

static_assert(CudaExecutor::kMaxRanks == kDeviceMaxRanks);

void CudaExecutor::set_rank_view(const RankView& view) {
  if (view.ranks > kDeviceMaxRanks)
    throw InputError("--tp " + std::to_string(view.ranks) + " on the cuda backend: at most " + std::to_string(kDeviceMaxRanks) +
                     " ranks");
  stop_resident_kernel();  // the running kernel may read the view
  state_->set_deadline(view.timeout_ms);  // a peer's flag may be waited for that long
  DeviceRankView device_view;
  device_view.rank = view.rank;
  device_view.ranks = view.ranks;
  device_view.timeout_ns = uint64_t(view.timeout_ms) * 1000000ull;
  for (uint32_t r = 0; r < view.ranks; ++r) {
    device_view.windows[r] = view.windows[r];
    device_view.flags[r] = reinterpret_cast<unsigned long long*>(view.flags[r]);
  }
  state_->rank_view = upload(&device_view, sizeof(device_view));
}

DeviceBuffer CudaExecutor::upload(const void* host, uint64_t bytes) {
  state_->refuse_if_hung();
  make_current();
  DeviceBuffer buffer(bytes);
  if (bytes) {
    check(cudaMemcpy(buffer.get(), host, bytes, cudaMemcpyHostToDevice), "copying to the device");
    // From pageable memory the call may return before the DMA lands; the kernel's stream must see it.
    check(cudaStreamSynchronize(nullptr), "copying to the device");
  }
  return buffer;
}

void CudaExecutor::upload_to(void* device, const void* host, uint64_t bytes) {
  state_->refuse_if_hung();
  make_current();
  if (bytes) {
    check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "copying to the device");
    check(cudaStreamSynchronize(nullptr), "copying to the device");  // as upload(): landed before the next kernel
  }
}

void CudaExecutor::download(void* host, const void* device, uint64_t bytes) {
  state_->refuse_if_hung();
  make_current();
  if (bytes) check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "copying from the device");
}

void CudaExecutor::copy_within(const std::vector<DeviceCopy>& copies) {
  State& s = *state_;
  if (!s.broken.empty()) throw DeviceError("the cuda backend stopped after an earlier error: " + s.broken);
  make_current();
  s.stop_other_resident();
  if (s.resident_running) s.stop_resident();
  for (const DeviceCopy& copy : copies)
    if (copy.row_bytes && copy.rows)
      check(cudaMemcpy2DAsync(copy.to, copy.pitch_bytes, copy.from, copy.pitch_bytes, copy.row_bytes, copy.rows,
                              cudaMemcpyDeviceToDevice, s.stream),
            "copying on the device");
  // On the kernel's stream, drained above; still waited for with the step deadline, as every wait is.
  check(s.wait_for_stream({"copies on the device"}), "copying on the device");
}

CudaProgramPtr CudaExecutor::load(const Program& program, std::vector<void*> device_slots) {
  State& s = *state_;
  s.refuse_if_hung();
  make_current();
  check_supported(program);
  const bool collective = std::any_of(program.nodes.begin(), program.nodes.end(), [](const NodeDesc& node) {
    return node.params.op == OpCode::allreduce_residual || node.params.op == OpCode::allgather_logits;
  });
  if (collective && s.rank_view.get() == nullptr)
    throw std::logic_error("cuda backend: a tensor-parallel program on an executor without a group (set_rank_view)");
  if (collective && s.options.resident)
    throw InputError("--resident cannot run --tp yet: each rank's resident kernel would hold the SMs another rank's "
                     "kernel needs on the same GPU (docs/TENSOR_PARALLEL.md); drop --resident");
  if (program.placement == Placement::static_queues && program.queues.size() != s.ctas)
    throw std::runtime_error("cuda backend: program placed for " + std::to_string(program.queues.size()) +
                             " workers, the grid has " + std::to_string(s.ctas) + " CTAs");
  if (device_slots.size() != program.slots.size()) throw std::runtime_error("cuda backend: slot table of the wrong size");
  const EncodedProgram encoded = encode_device_program(program);
  CudaProgramPtr loaded(new CudaProgram);
  CudaProgram& p = *loaded;
  p.program = &program;
  p.header = encoded.header;
  p.workspace_floats = tile_workspace_floats(program);
  p.bsp_violation = bsp_order_violation(program);
  if (uint64_t(p.workspace_floats) * 4 > s.max_dynamic_shared)
    throw InputError("cuda backend: a tile of this program needs " + std::to_string(uint64_t(p.workspace_floats) * 4) +
                     " bytes of shared memory, the device has " + std::to_string(s.max_dynamic_shared) +
                     " (smaller tiles: fewer rows per tile)");
  p.blob = upload(encoded.blob.data(), encoded.blob.size());
  p.slots = std::move(device_slots);
  p.slot_table = upload(p.slots.data(), p.slots.size() * sizeof(void*));
  p.events = DeviceBuffer(std::max<size_t>(1, program.events.size()) * sizeof(uint32_t));
  p.satisfied = DeviceBuffer(std::max<size_t>(1, program.tasks.size()) * sizeof(uint32_t));
  p.ready_list = DeviceBuffer(std::max<size_t>(1, program.tasks.size()) * sizeof(unsigned long long));
  p.counters = DeviceBuffer(4 * sizeof(uint32_t));
  // The trace records, here rather than at the first traced step: allocating while a tensor-parallel
  // peer's kernel on this GPU waits for this rank's launch could wait for that kernel.
  p.trace = DeviceBuffer(uint64_t(std::max<uint32_t>(1, p.header.task_count)) * sizeof(DeviceTaskTiming));
  return loaded;
}

void CudaExecutor::set_slot(CudaProgram& program, uint32_t slot, void* device_pointer) {
  program.slots.at(slot) = device_pointer;
  program.slots_dirty = true;
}

void CudaExecutor::stop_resident_kernel() { state_->stop_resident(); }

void CudaExecutor::set_resident(bool resident) {
  state_->refuse_if_hung();
  state_->stop_resident();
  state_->options.resident = resident;
}

CudaStepResult CudaExecutor::run_step(CudaProgram& p, const StepInputs& inputs, ScheduleMode mode,
                                     std::vector<TaskTiming>* trace) {
  State& s = *state_;
  if (!s.broken.empty()) throw DeviceError("the cuda backend stopped after an earlier error: " + s.broken);
  make_current();
  if (inputs.tokens_count == 0 || inputs.tokens_count > kMailboxTokens || inputs.tokens_count != p.header.tokens)
    throw std::runtime_error("cuda backend: a step of " + std::to_string(inputs.tokens_count) + " tokens for a program of " +
                             std::to_string(p.header.tokens));
  if (bool(inputs.positions) != bool(inputs.sequences))
    throw std::logic_error("cuda backend: a step of several sequences needs both their positions and their slots");
  if (p.slots_dirty) {
    if (s.resident_running) s.stop_resident();  // the table is read by the running kernel
    check(cudaMemcpyAsync(p.slot_table.get(), p.slots.data(), p.slots.size() * sizeof(void*), cudaMemcpyHostToDevice, s.stream),
          "updating a slot table");  // on the kernel's stream: ordered before the next launch
    check(s.wait_for_stream({"a slot table's copy to the device"}), "updating a slot table");
    p.slots_dirty = false;
  }
  const bool bsp = mode == ScheduleMode::bsp;
  if (bsp && !p.bsp_violation.empty()) throw std::runtime_error("cuda backend: this program cannot run as bsp: " + p.bsp_violation);
  const bool dynamic = !bsp && p.header.placement == uint8_t(Placement::dynamic_queue);
  DeviceJob job;
  job.program = static_cast<const unsigned char*>(p.blob.get());
  job.slots = static_cast<void* const*>(p.slot_table.get());
  job.events = static_cast<uint32_t*>(p.events.get());
  job.satisfied = static_cast<uint32_t*>(p.satisfied.get());
  job.ready_list = static_cast<unsigned long long*>(p.ready_list.get());
  job.counters = static_cast<uint32_t*>(p.counters.get());
  job.tokens_count = inputs.tokens_count;
  job.position0 = inputs.position0;
  job.sequence0 = inputs.sequence0;
  job.step = p.steps + 1;
  job.dynamic_step = p.dynamic_steps + (dynamic ? 1 : 0);
  job.bsp_step = p.bsp_steps + (bsp ? 1 : 0);
  job.push_base = p.push_base;
  job.pop_base = p.pop_base;
  job.kernel_step = s.kernel_steps + 1;
  job.bsp = bsp ? 1 : 0;
  job.stage_weights = s.options.stage_weights ? 1 : 0;
  job.workspace_floats = p.workspace_floats;
  job.ranks = static_cast<const DeviceRankView*>(s.rank_view.get());
  job.epoch = inputs.epoch;
  if (trace) {
    job.trace = static_cast<DeviceTaskTiming*>(p.trace.get());
  }

  if (s.options.resident) {
    // The resident kernel's shared memory is split for the program it was launched with (a decode
    // program leaves more room for weight stages than a prefill one): another program relaunches it.
    if (s.resident_running && s.resident_workspace != p.workspace_floats) s.stop_resident();
    std::memcpy(s.mailbox->tokens, inputs.tokens, inputs.tokens_count * sizeof(int32_t));
    job.tokens = s.mailbox_device->tokens;
    if (inputs.positions) {
      std::memcpy(s.mailbox->positions, inputs.positions, inputs.tokens_count * sizeof(uint32_t));
      std::memcpy(s.mailbox->sequences, inputs.sequences, inputs.tokens_count * sizeof(uint32_t));
      job.positions = s.mailbox_device->positions;
      job.sequences = s.mailbox_device->sequences;
    }
    s.mailbox->job = job;
    if (!s.resident_running) {
      s.resident_workspace = p.workspace_floats;
      KernelConfig config = s.config(s.resident_workspace);
      config.resident = 1;
      config.first_kernel_step = job.kernel_step;
      s.launch(config);
      s.resident_running = true;
    }
    std::atomic_ref<uint32_t>(s.mailbox->doorbell).store(job.kernel_step, std::memory_order_release);
    std::atomic_ref<uint32_t> done(s.mailbox->done);
    std::atomic_ref<uint32_t> error(s.mailbox->error.code);
    for (HostWait wait(s.deadline_ms); done.load(std::memory_order_acquire) != job.kernel_step; wait.pause()) {
      if (error.load(std::memory_order_acquire)) {
        // Every CTA leaves once the abort flag is up; the shutdown flag too, in case one is between steps.
        std::atomic_ref<uint32_t>(s.mailbox->shutdown).store(1, std::memory_order_release);
        s.wait_for_stream({"the resident megakernel to stop after its error"});
        std::atomic_ref<uint32_t>(s.mailbox->shutdown).store(0, std::memory_order_release);
        s.fail("");
      }
      // While spinning, a look at the stream every 4096 (a driver call); while sleeping, every look.
      if ((wait.looks() % 4096 == 4095 || wait.sleeping() || wait.expired()) && cudaStreamQuery(s.stream) != cudaErrorNotReady) {
        if (done.load(std::memory_order_acquire) == job.kernel_step) break;
        const cudaError_t status = cudaStreamSynchronize(s.stream);  // it has ended: this returns at once
        s.fail(std::string("the resident megakernel ended before finishing step ") + std::to_string(job.kernel_step) + ": " +
               cudaGetErrorString(status));
      }
      if (wait.expired() && done.load(std::memory_order_acquire) != job.kernel_step) s.give_up({"the resident megakernel", job.kernel_step}, wait);
    }
  } else {
    check(cudaMemcpyAsync(s.tokens.get(), inputs.tokens, inputs.tokens_count * sizeof(int32_t), cudaMemcpyHostToDevice, s.stream),
          "copying the step's tokens");
    job.tokens = static_cast<const int32_t*>(s.tokens.get());
    if (inputs.positions) {
      check(cudaMemcpyAsync(s.positions.get(), inputs.positions, inputs.tokens_count * sizeof(uint32_t), cudaMemcpyHostToDevice,
                            s.stream),
            "copying the step's positions");
      check(cudaMemcpyAsync(s.sequences.get(), inputs.sequences, inputs.tokens_count * sizeof(uint32_t), cudaMemcpyHostToDevice,
                            s.stream),
            "copying the step's sequences");
      job.positions = static_cast<const uint32_t*>(s.positions.get());
      job.sequences = static_cast<const uint32_t*>(s.sequences.get());
    }
    KernelConfig config = s.config(p.workspace_floats);
    config.job = job;
    s.launch(config);
    const cudaError_t status = s.wait_for_stream({"the megakernel", job.kernel_step});
    if (status != cudaSuccess || s.mailbox->error.code)
      s.fail(std::string("the megakernel failed: ") + cudaGetErrorString(status));
    if (std::atomic_ref<uint32_t>(s.mailbox->done).load(std::memory_order_acquire) != job.kernel_step)
      s.fail("the megakernel returned without finishing step " + std::to_string(job.kernel_step));
  }

  s.kernel_steps = job.kernel_step;
  p.steps = job.step;
  p.dynamic_steps = job.dynamic_step;
  p.bsp_steps = job.bsp_step;
  if (dynamic) {  // every task is pushed once except the initially ready; every CTA pops once past the end
    p.push_base += p.header.task_count - p.header.initial_ready_count;
    p.pop_base += p.header.task_count + s.ctas;
  }
  if (trace) append_device_trace(p, job.kernel_step, *trace);
  CudaStepResult result;
  const unsigned long long key = std::atomic_ref<unsigned long long>(s.mailbox->argmax_key).load(std::memory_order_acquire);
  result.argmax = key ? int32_t(argmax_index_of(key)) : -1;
  result.nonfinite = std::atomic_ref<uint32_t>(s.mailbox->nonfinite).load(std::memory_order_acquire) != 0;
  return result;
}

}  // namespace tilefire
