// The record of kernels the host gave up on (host_wait.h).
#include "megakernel/cuda/host_wait.h"

#include <mutex>
#include <string>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire {

namespace {

struct HungKernel {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* mailbox = nullptr;  // mapped host memory
  // What was freed while the kernel ran: device memory (on this GPU, or on another GPU of its tensor-
  // parallel group, which its collectives may read), and the streams and mailboxes of other executors on
  // this GPU (tensor-parallel ranks sharing it).
  struct Memory {
    int device;
    void* pointer;
  };
  std::vector<Memory> memory;
  std::vector<cudaStream_t> streams;
  std::vector<void*> mailboxes;
};

std::mutex hung_mutex;
std::vector<HungKernel> hung_kernels;

// Runs `body` with `device` current, then makes the caller's device current again.
template <class Body>
auto on_device(int device, Body body) {
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  cudaSetDevice(device);
  auto result = body();
  if (restore) cudaSetDevice(current);
  return result;
}

void release(HungKernel& ended) {
  on_device(ended.device, [&] {
    cudaStreamDestroy(ended.stream);
    cudaFreeHost(ended.mailbox);
    for (cudaStream_t stream : ended.streams) cudaStreamDestroy(stream);
    for (void* mailbox : ended.mailboxes) cudaFreeHost(mailbox);
    return 0;
  });
  for (const HungKernel::Memory& memory : ended.memory) on_device(memory.device, [&] { return cudaFree(memory.pointer); });
}

// The kernel in the record that holds `device` (any device: -1), or null. Called with hung_mutex held.
HungKernel* holder_of(int device) {
  for (HungKernel& running : hung_kernels)
    if (device < 0 || running.device == device) return &running;
  return nullptr;
}

// Moves the kernels that ended out of the record into `ended`. Called with hung_mutex held.
void reap(std::vector<HungKernel>& ended) {
  for (auto it = hung_kernels.begin(); it != hung_kernels.end();) {
    const bool running = on_device(it->device, [&] { return cudaStreamQuery(it->stream) == cudaErrorNotReady; });
    if (running) {
      ++it;
      continue;
    }
    ended.push_back(std::move(*it));
    it = hung_kernels.erase(it);
  }
}

// Frees what the ended kernels held. A resident kernel holds every SM of its GPU, so it is stopped
// first (its stop may give up on it too). What an ended kernel held on a GPU that another hung kernel
// still holds, its own stream and mailbox included, is handed to that one: freeing it would wait. (Memory
// on a GPU no hung kernel holds is freed, even if a hung kernel on another GPU of its group might read it.)
void release_ended(std::vector<HungKernel>& ended) {
  if (ended.empty()) return;
  try {
    stop_running_resident_kernel();
  } catch (const std::exception&) {  // its owner reports it; what it held is looked after as any hung kernel's
  }
  std::vector<HungKernel> free_now;
  {
    std::lock_guard lock(hung_mutex);
    for (HungKernel& gone : ended) {
      // Memory goes to whichever hung kernel holds its own GPU, if one does.
      std::vector<HungKernel::Memory> free_memory;
      for (const HungKernel::Memory& memory : gone.memory) {
        if (HungKernel* holder = holder_of(memory.device)) holder->memory.push_back(memory);
        else free_memory.push_back(memory);
      }
      gone.memory = std::move(free_memory);
      HungKernel* survivor = holder_of(gone.device);
      if (!survivor) {
        free_now.push_back(std::move(gone));
        continue;
      }
      const auto move_all = [](auto& to, auto& from) { to.insert(to.end(), from.begin(), from.end()); };
      survivor->streams.push_back(gone.stream);
      survivor->mailboxes.push_back(gone.mailbox);
      move_all(survivor->memory, gone.memory);
      move_all(survivor->streams, gone.streams);
      move_all(survivor->mailboxes, gone.mailboxes);
    }
  }
  for (HungKernel& gone : free_now) release(gone);
}

// Reaps, then runs `use` on the kernel holding `device` (null when none) under the lock. Releasing what
// ended kernels held may stop a resident kernel, and that stop may give up on it: `use` runs once there
// was nothing to release, so it sees such a kernel.
template <class Use>
auto with_holder(int device, Use use) {
  for (;;) {
    std::vector<HungKernel> ended;
    {
      std::lock_guard lock(hung_mutex);
      reap(ended);
      if (ended.empty()) return use(holder_of(device));
    }
    release_ended(ended);
  }
}

}  // namespace

void record_hung_kernel(int device, cudaStream_t stream, void* mailbox) {
  std::lock_guard lock(hung_mutex);
  hung_kernels.push_back(HungKernel{device, stream, mailbox, {}, {}, {}});
}

uint32_t hung_kernels_still_running() {
  return with_holder(-1, [](HungKernel*) { return uint32_t(hung_kernels.size()); });
}

bool device_held_by_hung_kernel(int device) {
  return with_holder(device, [](HungKernel* holder) { return holder != nullptr; });
}

void refuse_held_device(int device) {
  throw DeviceError("CUDA device " + std::to_string(device) +
                    " is still held by a megakernel the host gave up waiting for (see the earlier error): "
                    "nothing new can start on it until that kernel ends");
}

bool keep_memory_while_held(int device, void* memory) {
  return with_holder(device, [&](HungKernel* holder) {
    if (holder) holder->memory.push_back({device, memory});
    return holder != nullptr;
  });
}

bool keep_group_memory_while_held(const std::vector<int>& group, int device, void* memory) {
  for (int held : group)
    if (with_holder(held, [&](HungKernel* holder) {
          if (holder) holder->memory.push_back({device, memory});
          return holder != nullptr;
        }))
      return true;
  return false;
}

bool keep_executor_while_held(int device, cudaStream_t stream, void* mailbox) {
  return with_holder(device, [&](HungKernel* holder) {
    if (holder) {
      if (stream) holder->streams.push_back(stream);
      if (mailbox) holder->mailboxes.push_back(mailbox);
    }
    return holder != nullptr;
  });
}

}  // namespace tilefire
