// The part of the CUDA runtime API that Tilefire's host code calls, over the host emulation
// (emulator.h): one emulated sm_90 device, device memory in host memory, streams that run one grid at
// a time in stream order, and the legacy default stream. Linked instead of libcudart into the
// emulated builds (tilefire_megakernel_emulated), never into the real ones.
//
// Semantics kept from the real runtime because the host code relies on them:
//  - a launch returns while the grid runs (the resident kernel, the host's doorbell);
//  - work on a stream waits for the grid launched before it on that stream; cudaFree and
//    cudaDeviceSynchronize wait for every grid (a resident kernel that never stops makes them wait for
//    ever, as on a GPU);
//  - device allocations end at an inaccessible page (a kernel that runs past one faults, with a line
//    naming the allocation: guard_pages.h), and copies
//    and memsets must stay inside allocations (or mapped host memory) on their device side;
//  - a grid that traps (__trap, or a fault the emulator finds) fails its stream with
//    cudaErrorLaunchFailure, and, as on a GPU, every later call fails with it too (a sticky error),
//    until cudaDeviceReset (which also frees every allocation).
#include <cuda_runtime.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "megakernel/cuda/emulation/emulator.h"
#include "megakernel/cuda/emulation/guard_pages.h"

struct CUstream_st {
  bool non_blocking = false;
  tilefire::emulation::Grid* running = nullptr;  // the last grid launched here, until joined
};

struct CUevent_st {
  bool recorded = false;
  double time_ms = 0;
};

namespace {

using tilefire::emulation::Grid;

std::mutex runtime_mutex;
CUstream_st legacy_stream;
std::set<CUstream_st*> streams = {&legacy_stream};
// A device allocation: its bytes (rounded up to 256) end where an inaccessible page begins, so a
// kernel that reads or writes past the end faults at once instead of reading a neighbour.
struct DeviceAllocation {
  void* mapping = nullptr;
  size_t mapping_bytes = 0;
  size_t bytes = 0;
};
std::map<uintptr_t, DeviceAllocation> device_allocations;  // by the address cudaMalloc returned
// The emulated device's memory (cudaDeviceProp::totalGlobalMem): cudaMalloc refuses past it, as a GPU
// does, and cudaMemGetInfo reports what the allocations leave of it.
constexpr size_t kGlobalMemoryBytes = size_t(16) << 30;
size_t device_allocated_bytes = 0;
std::map<uintptr_t, size_t> host_allocations;              // cudaHostAlloc's, by address: bytes

// Whether [p, p + bytes) lies inside one allocation of `allocations` (whose values give their sizes).
template <class Map, class Size>
bool inside(const Map& allocations, const void* p, size_t bytes, Size size_of) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return false;
  --it;
  return address + bytes <= it->first + size_of(it->second);
}

// Memory a copy or memset may touch on the device side: a device allocation or mapped host memory.
bool device_side(const void* p, size_t bytes) {
  std::lock_guard lock(runtime_mutex);
  return inside(device_allocations, p, bytes, [](const DeviceAllocation& a) { return a.bytes; }) ||
         inside(host_allocations, p, bytes, [](size_t n) { return n; });
}

void release(uintptr_t address, const DeviceAllocation& a) {
  tilefire::emulation::unwatch_guard_page(reinterpret_cast<const void*>(address));
  munmap(a.mapping, a.mapping_bytes);
}
cudaError_t sticky_error = cudaSuccess;
thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;  // per host thread, as the real runtime keeps it

CUstream_st* stream_of(cudaStream_t stream) { return stream ? stream : &legacy_stream; }

cudaError_t fail(cudaError_t error) {
  last_error = error;
  return error;
}

cudaError_t refuse_range(const char* call, size_t bytes) {
  std::fprintf(stderr, "tilefire emulation: %s of %zu bytes reaches outside every device allocation\n", call, bytes);
  return fail(cudaErrorInvalidValue);
}

// Waits for the stream's grid; a trap becomes the sticky launch failure. Called without the mutex held
// (the grid may take its time), with the grid taken off the stream first.
cudaError_t join(Grid* grid) {
  if (grid == nullptr) return cudaSuccess;
  std::string message;
  if (tilefire::emulation::join_grid(grid, &message)) return cudaSuccess;
  std::fprintf(stderr, "tilefire emulation: the kernel trapped: %s\n", message.c_str());
  std::lock_guard lock(runtime_mutex);
  sticky_error = cudaErrorLaunchFailure;
  return fail(cudaErrorLaunchFailure);
}

cudaError_t join_stream(CUstream_st* stream) {
  Grid* grid = nullptr;
  {
    std::lock_guard lock(runtime_mutex);
    grid = stream->running;
    stream->running = nullptr;
  }
  const cudaError_t status = join(grid);
  std::lock_guard lock(runtime_mutex);
  return sticky_error != cudaSuccess ? sticky_error : status;
}

// The legacy stream waits for blocking streams and they for it: its work joins them all.
cudaError_t join_for(CUstream_st* stream) {
  if (stream != &legacy_stream) return join_stream(stream);
  std::vector<CUstream_st*> blocking;
  {
    std::lock_guard lock(runtime_mutex);
    for (CUstream_st* s : streams)
      if (!s->non_blocking) blocking.push_back(s);
  }
  cudaError_t status = cudaSuccess;
  for (CUstream_st* s : blocking)
    if (const cudaError_t e = join_stream(s); e != cudaSuccess) status = e;
  return status;
}

cudaError_t join_all() {
  std::vector<CUstream_st*> all;
  {
    std::lock_guard lock(runtime_mutex);
    all.assign(streams.begin(), streams.end());
  }
  cudaError_t status = cudaSuccess;
  for (CUstream_st* s : all)
    if (const cudaError_t e = join_stream(s); e != cudaSuccess) status = e;
  return status;
}

cudaError_t sticky() {
  std::lock_guard lock(runtime_mutex);
  return sticky_error;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    default: return "cudaError (emulation)";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    default: return "an error of the emulated runtime";
  }
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t s = sticky();
  if (s != cudaSuccess) return s;
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t s = sticky();
  return s != cudaSuccess ? s : last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return sticky();
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  const tilefire::emulation::DeviceModel& model = tilefire::emulation::device_model();
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof(p->name), "Tilefire host emulation (sm_90, %u SMs)", model.multiprocessors);
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = int(model.multiprocessors);
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = model.shared_per_block_optin;
  p->sharedMemPerMultiprocessor = model.shared_per_multiprocessor;
  p->maxThreadsPerBlock = int(model.max_threads_per_block);
  p->maxThreadsPerMultiProcessor = int(model.max_threads_per_multiprocessor);
  p->warpSize = 32;
  p->cooperativeLaunch = 1;
  p->canMapHostMemory = 1;
  p->unifiedAddressing = 1;
  p->totalGlobalMem = kGlobalMemoryBytes;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  *can = device == 0 && peer == 0 ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int, unsigned int) { return fail(cudaErrorInvalidDevice); }

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  if (const cudaError_t s = sticky(); s != cudaSuccess) return s;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  DeviceAllocation a;
  {
    std::lock_guard lock(runtime_mutex);
    if (bytes > kGlobalMemoryBytes - device_allocated_bytes) return fail(cudaErrorMemoryAllocation);  // not sticky, as on a GPU
  }
  a.bytes = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  a.mapping_bytes = (a.bytes + page - 1) / page * page + page;
  a.mapping = mmap(nullptr, a.mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (a.mapping == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  unsigned char* guard = static_cast<unsigned char*>(a.mapping) + a.mapping_bytes - page;
  mprotect(guard, page, PROT_NONE);
  unsigned char* p = guard - a.bytes;  // 256-byte aligned: the guard is page aligned
  std::memset(p, 0xff, a.bytes);  // uninitialised device memory reads as NaN
  tilefire::emulation::watch_guard_page(p, a.bytes);  // a fault there names the allocation
  std::lock_guard lock(runtime_mutex);
  device_allocations[reinterpret_cast<uintptr_t>(p)] = a;
  device_allocated_bytes += a.bytes;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return sticky();
  join_all();  // cudaFree waits for the device
  std::lock_guard lock(runtime_mutex);
  auto it = device_allocations.find(reinterpret_cast<uintptr_t>(pointer));
  if (it == device_allocations.end()) return fail(cudaErrorInvalidValue);
  device_allocated_bytes -= it->second.bytes;
  release(it->first, it->second);
  device_allocations.erase(it);
  return sticky_error;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (const cudaError_t s = sticky(); s != cudaSuccess) return s;
  std::lock_guard lock(runtime_mutex);
  *free = kGlobalMemoryBytes - device_allocated_bytes;
  *total = kGlobalMemoryBytes;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int) {
  if (const cudaError_t s = sticky(); s != cudaSuccess) return s;
  const size_t rounded = (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(runtime_mutex);
  host_allocations[reinterpret_cast<uintptr_t>(p)] = rounded;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  std::lock_guard lock(runtime_mutex);
  if (host_allocations.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) return fail(cudaErrorInvalidValue);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int) {
  std::lock_guard lock(runtime_mutex);
  if (host_allocations.count(reinterpret_cast<uintptr_t>(host)) == 0) return fail(cudaErrorInvalidValue);
  *device = host;  // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (const cudaError_t s = join_for(&legacy_stream); s != cudaSuccess) return s;
  if (bytes && !device_side(pointer, bytes)) return refuse_range("cudaMemset", bytes);
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

// The sides of a copy that its kind says are on the device must lie inside allocations.
static cudaError_t copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, const char* call) {
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (bytes && ((to_device && !device_side(to, bytes)) || (from_device && !device_side(from, bytes))))
    return refuse_range(call, bytes);
  std::memcpy(to, from, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t s = join_for(&legacy_stream); s != cudaSuccess) return s;
  return copy(to, from, bytes, kind, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t s = join_for(stream_of(stream)); s != cudaSuccess) return s;
  return copy(to, from, bytes, kind, "cudaMemcpyAsync");
}

// Rows of `width` bytes, each side's rows `pitch` apart; both sides' spans checked as copy() checks one.
cudaError_t cudaMemcpy2DAsync(void* to, size_t to_pitch, const void* from, size_t from_pitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t s = join_for(stream_of(stream)); s != cudaSuccess) return s;
  if (width > to_pitch || width > from_pitch) return cudaErrorInvalidPitchValue;
  for (size_t row = 0; row < height; ++row)
    if (const cudaError_t s = copy(static_cast<char*>(to) + row * to_pitch, static_cast<const char*>(from) + row * from_pitch, width,
                                   kind, "cudaMemcpy2DAsync");
        s != cudaSuccess)
      return s;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return join_all(); }

// Waits for every grid, frees every allocation and clears the sticky error (a device reset).
cudaError_t cudaDeviceReset(void) {
  join_all();
  std::lock_guard lock(runtime_mutex);
  for (const auto& [address, allocation] : device_allocations) release(address, allocation);
  device_allocations.clear();
  sticky_error = cudaSuccess;
  last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  auto* s = new CUstream_st;
  s->non_blocking = (flags & cudaStreamNonBlocking) != 0;
  std::lock_guard lock(runtime_mutex);
  streams.insert(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  join_stream(stream);
  std::lock_guard lock(runtime_mutex);
  streams.erase(stream);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return join_for(stream_of(stream)); }

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = stream_of(stream);
  {
    std::lock_guard lock(runtime_mutex);
    if (s->running != nullptr && !tilefire::emulation::grid_finished(s->running)) return cudaErrorNotReady;
  }
  return join_stream(s);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const cudaError_t status = join_for(stream_of(stream));  // an event completes after the work before it
  event->recorded = true;
  event->time_ms = now_ms();
  return status;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) { return event->recorded ? sticky() : fail(cudaErrorInvalidResourceHandle); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(end->time_ms - start->time_ms);
  return cudaSuccess;
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* function) {
  const tilefire::emulation::KernelInfo* kernel = tilefire::emulation::find_kernel(function);
  if (kernel == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  *attributes = cudaFuncAttributes{};
  attributes->sharedSizeBytes = kernel->static_shared_bytes;
  attributes->maxDynamicSharedSizeBytes = int(kernel->max_dynamic_shared_bytes);
  attributes->maxThreadsPerBlock = int(tilefire::emulation::device_model().max_threads_per_block);
  attributes->numRegs = 0;  // no registers to count: the emulation says nothing about them
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
  tilefire::emulation::KernelInfo* kernel = tilefire::emulation::find_kernel(function);
  if (kernel == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || uint64_t(value) + kernel->static_shared_bytes > tilefire::emulation::device_model().shared_per_block_optin)
    return fail(cudaErrorInvalidValue);
  kernel->max_dynamic_shared_bytes = uint32_t(value);
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* function, int block_size, size_t dynamic_shared) {
  const tilefire::emulation::KernelInfo* kernel = tilefire::emulation::find_kernel(function);
  if (kernel == nullptr) return fail(cudaErrorInvalidDeviceFunction);
  *blocks = block_size > 0 ? int(tilefire::emulation::blocks_per_multiprocessor(*kernel, uint32_t(block_size), dynamic_shared)) : 0;
  return cudaSuccess;
}

static cudaError_t launch(const void* function, dim3 grid, dim3 block, void** arguments, size_t shared, cudaStream_t stream,
                          bool cooperative) {
  CUstream_st* s = stream_of(stream);
  if (const cudaError_t e = join_for(s); e != cudaSuccess) return e;  // stream order: after the grid before it
  std::string why;
  Grid* g = tilefire::emulation::launch_grid(function, grid, block, arguments, shared, cooperative, &why);
  if (g == nullptr) {
    std::fprintf(stderr, "tilefire emulation: launch refused: %s\n", why.c_str());
    return fail(tilefire::emulation::find_kernel(function) ? cudaErrorCooperativeLaunchTooLarge : cudaErrorInvalidDeviceFunction);
  }
  std::lock_guard lock(runtime_mutex);
  s->running = g;
  return cudaSuccess;
}

cudaError_t cudaLaunchCooperativeKernel(const void* function, dim3 grid, dim3 block, void** arguments, size_t shared,
                                        cudaStream_t stream) {
  return launch(function, grid, block, arguments, shared, stream, true);
}

cudaError_t cudaLaunchKernel(const void* function, dim3 grid, dim3 block, void** arguments, size_t shared, cudaStream_t stream) {
  return launch(function, grid, block, arguments, shared, stream, false);
}

}  // extern "C"
