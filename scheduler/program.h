#pragma once
// The Program: the task/event format shared by the host encoder (graph/compile) and every executor (the
// CPU worker pool, the CUDA megakernel, the simulator). Tasks and events are PODs in flat arrays, so the
// whole dependency protocol is readable here:
//  - a task is one tile of one fused op node; it waits on events and then signals events;
//  - an event is a counter with a trigger count (the signals it gets per step). Counters only grow: in
//    step s (1, 2, ...) a waiter needs counter >= trigger_count * s, so nothing is reset between steps.
#include <cstdint>
#include <string>
#include <vector>

#include "ops/dtype.h"
#include "ops/tile.h"

namespace tilefire {

struct alignas(32) TaskDesc {
  OpCode op = OpCode::noop;
  uint16_t layer = 0;
  uint32_t node = 0;  // index into Program::nodes (and the op node's position in topological order)
  uint32_t tile_begin = 0;
  uint32_t tile_end = 0;
  uint32_t wait_begin = 0;  // into Program::waits
  uint32_t signal_begin = 0;  // into Program::signals
  uint16_t wait_count = 0;
  uint16_t signal_count = 0;
  uint32_t tile_index = 0;  // index of this tile within its node
};
static_assert(sizeof(TaskDesc) == 32 && alignof(TaskDesc) == 32, "TaskDesc is one 32-byte record");

struct EventDesc {
  uint32_t trigger_count = 0;  // signals per step
};
static_assert(sizeof(EventDesc) == 4);

enum class SlotKind : uint8_t {
  weight,      // bound to a checkpoint tensor by name (read-only)
  weight_f32,  // a checkpoint vector (norm weight, bias) converted to f32 at bind time
  activation,  // [rows, cols] f32, owned by the backend
  kv_cache,    // [sequences, kv_heads, cache_rows, head_dim] f32, owned by the engine across steps (SlotDesc::cache_rows)
  constant,    // f32 values stored in Program::constants
  window,      // [rows, cols] f32 in this rank's symmetric window (tensor parallelism): peers read it
};

struct SlotDesc {
  SlotKind kind = SlotKind::activation;
  DType dtype = DType::f32;
  uint64_t rows = 0;  // elements = rows * cols (kv cache: rows = sequences * kv_heads * cache_rows)
  uint64_t cols = 0;
  uint64_t constant_offset = 0;  // kind == constant: first element in Program::constants
  std::string name;  // checkpoint tensor name for weights; a descriptive name otherwise
  // A tensor-parallel rank's part of a checkpoint tensor [full_rows, full_cols]: rows [row_begin,
  // row_begin + rows) and columns [col_begin, col_begin + cols). full_rows == 0: the whole tensor.
  uint64_t full_rows = 0, full_cols = 0;
  uint64_t row_begin = 0, col_begin = 0;
  // Head granularity: the columns one head owns in this slot, when it is not the model's head_dim (the
  // split-KV records: a KV head's chunk); 0: the compile's head width.
  uint32_t head_cols = 0;
  // kind == kv_cache: the rows one (sequence, KV head) holds: max_context, or a sliding window's ring
  // (ops/tile.h, kv_cache_row).
  uint32_t cache_rows = 0;
  // kind == weight_f32: added to every value as it is loaded (Gemma's norms: stored as w, scaled by 1 + w).
  float value_offset = 0.0f;
  bool sliced() const { return full_rows != 0; }
};

struct NodeDesc {
  OpParams params;            // the op's parameter record
  uint32_t first_task = 0;    // tasks of a node are contiguous
  uint32_t task_count = 0;
  uint32_t done_event = 0xffffffffu;  // signalled by every tile of the node, when some consumer needs all
};

enum class Placement : uint8_t {
  static_queues,  // per-worker queues in topological order (lowest overhead)
  dynamic_queue,  // one ready queue; a task is pushed when its last input event fires
};

enum class EventGranularity : uint8_t {
  tile,  // a consumer waits on exactly the producer tiles whose output overlaps what it reads
  op,    // a consumer waits for the whole producer op
  head,  // a consumer waits on head-wide bands of what it reads (every producer tile writing a band)
};

struct Program {
  std::vector<NodeDesc> nodes;    // op nodes in topological order
  std::vector<TaskDesc> tasks;    // tiles, node by node (so task order is topological)
  std::vector<EventDesc> events;
  std::vector<uint32_t> waits;    // event ids; TaskDesc::wait_begin/wait_count index it
  std::vector<uint32_t> signals;  // event ids; TaskDesc::signal_begin/signal_count index it
  std::vector<SlotDesc> slots;
  std::vector<float> constants;
  // Static placement: one queue of task ids per worker, each in topological order.
  std::vector<std::vector<uint32_t>> queues;
  Placement placement = Placement::static_queues;
  EventGranularity granularity = EventGranularity::tile;
  uint32_t workers = 1;
  uint32_t tokens = 1;          // tokens per step (1 at decode, the prompt length at prefill)
  size_t scratch_floats = 0;    // per-worker scratch any tile may need
  uint32_t collective_flags = 0;  // tensor parallelism: flag slots its collective tasks use

  uint32_t slot_index(const std::string& name) const;  // kNoSlot when absent
};

// Size in bytes of a slot's storage.
uint64_t slot_bytes(const SlotDesc& slot);

// A digest of which tasks a program runs where: each task's op and node, the static queues, the
// placement. Tensor-parallel ranks wait on each other inside collective tasks, so they must agree on
// these; ranks in separate processes compare this digest instead of their programs.
uint64_t placement_digest(const Program& program);

// `tasks` noop tasks, task t in static queue t % workers; with `chain`, each waits for the one before
// (a hand-made test program: the CUDA watchdog test's chain).
Program noop_program(uint32_t tasks, bool chain, uint32_t workers);

// A weight matrix of the calibration chain: `rows` outputs over `cols` inputs.
struct ChainMatrix {
  uint32_t rows = 0;
  uint32_t cols = 0;
};

// The cpu device's calibration program (megakernel/simulate.cpp fits the device's bandwidth, dispatch and
// signal to traced steps of it), with a transformer's traffic: one lm_head node per matrix, in a chain.
// Node n streams matrices[n] of `wdtype`, cut into tiles of about `tile_bytes` (whole rounds of
// `workers` tiles, two rounds at least, at most one row each); each tile reads the first cols_n floats
// of the node before's output (which every worker wrote) after waiting on that node's done event.
// Tile i of every node is on worker i mod workers. Slots: 0 the norm weight, 1 .. nodes + 1 the
// activations (node n reads slot n + 1, writes the first rows_n floats of slot n + 2), each [1, width]
// f32 with width the largest rows or cols; then one weight slot [rows_n, cols_n] per node.
Program matrix_chain_program(const std::vector<ChainMatrix>& matrices, uint64_t tile_bytes, uint32_t workers, DType wdtype);

// The weight bytes a task's tile streams (its op's weight_ranges; none for ops that read no weights).
WeightRanges task_weight_ranges(const Program& program, const TaskDesc& task);

}  // namespace tilefire
