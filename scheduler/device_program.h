#pragma once
// The Program as one flat blob for a device: every array a persistent kernel reads, 64-byte aligned at
// offsets recorded in a header, so the host encodes it once, copies it with one memcpy, and the device
// (or a host test) reads it through DeviceProgramView without any pointer fix-up. Encoding and decoding
// are tested on the host (tests/scheduler/device_program_test.cpp); the CUDA backend only copies bytes.
//
// Beyond the Program itself the blob carries what a device scheduler needs precomputed:
//  - bsp queues: each worker's static queue regrouped node by node (the bulk-synchronous baseline runs
//    the same tiles on the same workers);
//  - the dynamic ready queue's tables: event -> waiting tasks, and the tasks that wait on nothing;
//  - per task, the weight bytes its tile streams (WeightStreamDesc), so a worker can fetch the next
//    task's weights while the current one still waits for its inputs.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/host_device.h"
#include "scheduler/program.h"

namespace tilefire {

constexpr uint32_t kDeviceProgramMagic = 0x54465047;  // "TFPG"
constexpr uint32_t kDeviceProgramVersion = 1;

// The weights one task streams: up to three byte ranges of weight slots, read row by row (rows of
// row_bytes each). row_bytes == 0: the task reads no weights.
struct WeightStreamDesc {
  struct Range {
    uint32_t slot = kNoSlot;
    uint32_t rows = 0;
    uint64_t offset = 0;  // bytes from the slot's start
  };
  Range ranges[3];
  uint32_t range_count = 0;
  uint32_t row_bytes = 0;
};
static_assert(sizeof(WeightStreamDesc) == 56);

struct DeviceProgramHeader {
  uint32_t magic = kDeviceProgramMagic;
  uint32_t version = kDeviceProgramVersion;
  uint32_t task_count = 0, event_count = 0, node_count = 0, slot_count = 0;
  uint32_t worker_count = 0;  // static queues (0 for a dynamically placed program)
  uint32_t tokens = 0;
  uint32_t initial_ready_count = 0;  // tasks that wait on nothing
  uint32_t max_task_weight_rows = 0;  // the most weight rows any one task streams
  uint8_t placement = 0;    // Placement
  uint8_t granularity = 0;  // EventGranularity
  uint8_t reserved[6] = {};
  // Byte offsets from the blob's start; each array is 64-byte aligned.
  uint64_t tasks = 0;          // TaskDesc[task_count]
  uint64_t waits = 0;          // uint32_t[]: event ids
  uint64_t signals = 0;        // uint32_t[]: event ids
  uint64_t triggers = 0;       // uint32_t[event_count]: signals per step
  uint64_t node_params = 0;    // OpParams[node_count]
  uint64_t node_done = 0;      // uint32_t[node_count]: done event or kNoSlot
  uint64_t node_first_task = 0;  // uint32_t[node_count + 1]: a node's tasks are [first, next first)
  uint64_t queue_begin = 0;    // uint32_t[worker_count + 1]: into queue_tasks and bsp_tasks
  uint64_t queue_tasks = 0;    // uint32_t[]: static queues, concatenated
  uint64_t bsp_tasks = 0;      // uint32_t[]: the same queues regrouped node by node
  uint64_t waiter_begin = 0;   // uint32_t[event_count + 1]: into waiters
  uint64_t waiters = 0;        // uint32_t[]: tasks waiting on each event
  uint64_t initial_ready = 0;  // uint32_t[initial_ready_count]
  uint64_t weight_streams = 0; // WeightStreamDesc[task_count]
  uint64_t total_bytes = 0;
};

// Typed pointers into an encoded blob (host or device memory alike).
struct DeviceProgramView {
  const DeviceProgramHeader* header = nullptr;
  const TaskDesc* tasks = nullptr;
  const uint32_t* waits = nullptr;
  const uint32_t* signals = nullptr;
  const uint32_t* triggers = nullptr;
  const OpParams* node_params = nullptr;
  const uint32_t* node_done = nullptr;
  const uint32_t* node_first_task = nullptr;
  const uint32_t* queue_begin = nullptr;
  const uint32_t* queue_tasks = nullptr;
  const uint32_t* bsp_tasks = nullptr;
  const uint32_t* waiter_begin = nullptr;
  const uint32_t* waiters = nullptr;
  const uint32_t* initial_ready = nullptr;
  const WeightStreamDesc* weight_streams = nullptr;
};

// `header` is the blob's header as the host holds it; `base` is where the blob lives (host or device).
TILEFIRE_HD inline DeviceProgramView view_device_program(const DeviceProgramHeader& header, const void* base) {
  const auto* b = static_cast<const unsigned char*>(base);
  DeviceProgramView v;
  v.header = reinterpret_cast<const DeviceProgramHeader*>(b);
  v.tasks = reinterpret_cast<const TaskDesc*>(b + header.tasks);
  v.waits = reinterpret_cast<const uint32_t*>(b + header.waits);
  v.signals = reinterpret_cast<const uint32_t*>(b + header.signals);
  v.triggers = reinterpret_cast<const uint32_t*>(b + header.triggers);
  v.node_params = reinterpret_cast<const OpParams*>(b + header.node_params);
  v.node_done = reinterpret_cast<const uint32_t*>(b + header.node_done);
  v.node_first_task = reinterpret_cast<const uint32_t*>(b + header.node_first_task);
  v.queue_begin = reinterpret_cast<const uint32_t*>(b + header.queue_begin);
  v.queue_tasks = reinterpret_cast<const uint32_t*>(b + header.queue_tasks);
  v.bsp_tasks = reinterpret_cast<const uint32_t*>(b + header.bsp_tasks);
  v.waiter_begin = reinterpret_cast<const uint32_t*>(b + header.waiter_begin);
  v.waiters = reinterpret_cast<const uint32_t*>(b + header.waiters);
  v.initial_ready = reinterpret_cast<const uint32_t*>(b + header.initial_ready);
  v.weight_streams = reinterpret_cast<const WeightStreamDesc*>(b + header.weight_streams);
  return v;
}

struct EncodedProgram {
  DeviceProgramHeader header;
  std::vector<unsigned char> blob;  // header.total_bytes bytes; starts with a copy of the header
};

// Encodes a validated Program. Throws std::runtime_error for a program the device format cannot carry
// (an unknown opcode, a wait or signal list longer than 65535).
EncodedProgram encode_device_program(const Program& program);

// The weights a task streams, from its op's weight_ranges (row_bytes from the op's matrix rows).
WeightStreamDesc weight_stream_of(const Program& program, const TaskDesc& task);

}  // namespace tilefire
