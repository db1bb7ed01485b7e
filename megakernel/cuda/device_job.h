#pragma once
// What the host and the persistent kernel exchange, as PODs readable from both sides (plain C++: the
// host code that fills them needs no CUDA headers):
//  - DeviceJob: one step of one program (the program blob, its slots and grow-only counters, the step's
//    tokens and targets), passed by value at launch or posted through the mailbox in resident mode;
//  - Mailbox: mapped host memory the kernel and the host both see while the kernel runs: the doorbell
//    and job of resident mode, the step's greedy token, and the error record of the watchdog;
//  - the rule that decides which tasks stream their weights through shared memory, used identically by
//    the producer warp and the consumer warps of a CTA (and tested on the host).
#include <cstdint>

#include "ops/host_device.h"
#include "scheduler/device_program.h"

namespace tilefire {

constexpr uint32_t kDeviceConsumerWarps = 8;  // warps that run tiles
constexpr uint32_t kDeviceConsumerThreads = kDeviceConsumerWarps * 32;
constexpr uint32_t kDeviceThreads = kDeviceConsumerThreads + 32;  // + one producer warp (weight staging)
constexpr uint32_t kDeviceMaxPassTokens = 4;   // tokens a matmul tile handles per pass over its weights
constexpr uint32_t kDeviceMaxStages = 8;       // weight stages in shared memory, at most
constexpr uint32_t kDeviceStageBytes = 32768;  // bytes per weight stage by default (CudaOptions::stage_bytes)
constexpr uint32_t kDeviceMaxHeadDim = 256;
constexpr uint32_t kDeviceGemmMaxPassTokens = 64;     // tokens a tensor-core matrix tile takes per pass
constexpr uint32_t kDeviceGemmWorkspaceFloats = 24576;  // 96 KiB: its results, [pass tokens, rows], and more
constexpr uint32_t kMailboxTokens = 128;       // resident mode: tokens a posted step may carry
constexpr uint32_t kDeviceMaxRanks = 8;        // tensor-parallel ranks a collective tile reaches

enum class DeviceErrorCode : uint32_t { none = 0, watchdog = 1, unknown_opcode = 2 };
enum class DeviceWaitKind : uint32_t { event = 0, bsp_barrier = 1, ready_queue = 2, weight_stage = 3, peer_flag = 4 };

// The first error of a kernel run; the CTA that claims `code` fills the rest, then raises abort.
struct DeviceErrorRecord {
  uint32_t code = 0;  // DeviceErrorCode
  uint32_t cta = 0;
  uint32_t task = 0;
  uint32_t op = 0;  // OpCode
  uint32_t layer = 0;
  uint32_t tile_begin = 0, tile_end = 0;
  uint32_t wait_kind = 0;  // DeviceWaitKind
  uint32_t event = 0;      // the event (or counter) waited on
  uint32_t counter = 0;    // its value when the watchdog fired
  uint32_t target = 0;     // the value the task needed
  uint32_t waited_ms = 0;
  uint32_t peer = 0;       // peer_flag: the rank whose flag never reached the epoch
};

// One task's run on the device, for traces (--trace): %globaltimer when the consumer warps began it (its
// events were satisfied) and when they finished it, and the CTA that ran it.
struct DeviceTaskTiming {
  unsigned long long start_ns = 0, end_ns = 0;
  uint32_t cta = 0;
  uint32_t kernel_step = 0;  // the step that wrote the record (a stale record shows an older one)
};

// Tensor parallelism on GPUs (docs/TENSOR_PARALLEL.md): every rank's window and signal flags as this
// rank's kernel reaches them (its own GPU's memory, or a peer GPU's through peer access), in device
// memory. The protocol is transport/rank_view.h's at system scope: a rank stores the epoch into its own
// flag with st.release.sys, a peer loads it with ld.acquire.sys before reading the data it guards.
struct DeviceRankView {
  uint32_t rank = 0;
  uint32_t ranks = 1;
  uint64_t timeout_ns = 0;                       // a flag wait longer than this stops the kernel
  unsigned char* windows[kDeviceMaxRanks] = {};  // [ranks] each rank's window
  unsigned long long* flags[kDeviceMaxRanks] = {};  // [ranks] each rank's flags
};

struct DeviceJob {
  const unsigned char* program = nullptr;  // encoded blob (scheduler/device_program.h), device memory
  void* const* slots = nullptr;            // [slot_count] device pointers
  uint32_t* events = nullptr;              // [event_count] grow-only counters
  uint32_t* satisfied = nullptr;           // [task_count] dynamic queue: satisfied waits, grow-only
  unsigned long long* ready_list = nullptr;  // [task_count] dynamic queue: (step << 32) | task
  uint32_t* counters = nullptr;            // [0] ready pushes, [1] ready pops, [2] bsp arrivals (grow-only)
  const int32_t* tokens = nullptr;         // [tokens_count]
  uint32_t tokens_count = 0;
  uint32_t position0 = 0;
  // A step of several sequences (ops/tile.h StepInputs): each token's position and KV-cache slot; null:
  // token m of slot sequence0 at position0 + m.
  const uint32_t* positions = nullptr;     // [tokens_count]
  const uint32_t* sequences = nullptr;     // [tokens_count]
  uint32_t sequence0 = 0;
  uint32_t step = 0;          // 1-based steps of this program (event targets: trigger * step)
  uint32_t dynamic_step = 0;  // 1-based dynamic-queue steps of this program
  uint32_t bsp_step = 0;      // 1-based bsp steps of this program
  uint32_t push_base = 0, pop_base = 0;  // ready-list counters when the step began
  uint32_t kernel_step = 0;   // steps this executor has run, this one included
  uint32_t bsp = 0;           // 1: bulk-synchronous (a grid barrier between op nodes)
  uint32_t stage_weights = 0; // 1: stream weights through shared-memory stages where the rule allows
  uint32_t workspace_floats = 0;  // shared-memory floats a tile of this program may use
  DeviceTaskTiming* trace = nullptr;  // [task_count] when this step is traced; null otherwise
  const DeviceRankView* ranks = nullptr;  // tensor parallelism: the group (device memory); null otherwise
  unsigned long long epoch = 0;       // tensor parallelism: the step's collective epoch, the same on every rank
};

struct Mailbox {
  uint32_t doorbell = 0;  // resident: the kernel_step posted last
  uint32_t shutdown = 0;  // resident: 1 asks the kernel to return
  uint32_t done = 0;      // the kernel_step finished last
  uint32_t nonfinite = 0; // that step's logits held NaN or Inf
  unsigned long long argmax_key = 0;  // that step's greedy token, packed (see argmax_key_of)
  DeviceErrorRecord error;
  DeviceJob job;          // resident: the posted step
  int32_t tokens[kMailboxTokens] = {};
  uint32_t positions[kMailboxTokens] = {};  // resident: a step of several sequences' positions and slots
  uint32_t sequences[kMailboxTokens] = {};
};

// Device-memory state of one executor: the abort flag, the CTAs that finished, this step's argmax.
struct DeviceGlobals {
  uint32_t abort = 0;
  uint32_t ctas_done = 0;  // grow-only: gridDim * kernel_step when a step is over
  uint32_t nonfinite = 0;
  uint32_t error_claimed = 0;  // the first CTA to raise an error writes the mailbox's record
  unsigned long long argmax_key = 0;
};

struct KernelConfig {
  Mailbox* mailbox = nullptr;       // device alias of the mapped mailbox
  DeviceGlobals* globals = nullptr;
  DeviceJob job;                    // launch mode: the step
  uint32_t resident = 0;            // 1: wait for steps on the mailbox's doorbell until shutdown
  uint32_t first_kernel_step = 0;   // resident: the kernel_step of the first step to wait for
  uint32_t stage_bytes = 0;         // bytes per weight stage (0: no staging)
  uint32_t stage_count = 0;
  uint64_t watchdog_ns = 0;
};

// Logits and their index packed so that one 64-bit atomicMax finds the greedy token: the larger logit
// wins, and among equal logits the lower index (as std::max_element on the host). NaN never wins here;
// the nonfinite flag reports it.
TILEFIRE_HD inline unsigned long long argmax_key_of(float value, uint32_t index) {
  value += 0.0f;  // -0 becomes +0: equal to +0 here as in std::max_element, so the lower index wins
  uint32_t bits;
  __builtin_memcpy(&bits, &value, 4);
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xffffffffu - index);
}
TILEFIRE_HD inline uint32_t argmax_index_of(unsigned long long key) { return 0xffffffffu - uint32_t(key & 0xffffffffu); }

// Tokens per pass of the tensor-core path for a task of `rows` weight rows: the most (a multiple of 16)
// whose results fit the workspace it may take, or 0 when not even 16 tokens' do.
TILEFIRE_HD constexpr uint32_t gemm_pass_tokens(uint32_t rows) {
  for (uint32_t pass = kDeviceGemmMaxPassTokens; pass >= 16; pass -= 16)
    if (uint64_t(pass) * rows + pass + 64 <= kDeviceGemmWorkspaceFloats) return pass;
  return 0;
}
// Shared-memory floats of the tensor-core path: results [pass, rows], 1 / rms [pass], 8 doubles aligned.
TILEFIRE_HD constexpr uint32_t gemm_workspace_floats(uint32_t rows) { return gemm_pass_tokens(rows) * (rows + 1) + 64; }
// Whether a matrix tile runs on tensor cores: a prefill (more tokens than a vector pass takes), rows of
// K bf16 with K a multiple of 16 (the MMA's k), and results that fit; otherwise the vector path.
TILEFIRE_HD constexpr bool task_uses_tensor_cores(uint32_t tokens, uint32_t K, uint32_t rows) {
  return tokens > kDeviceMaxPassTokens && K % 16 == 0 && gemm_pass_tokens(rows) != 0;
}

// Whether a task's weights stream through the CTA's shared-memory stages (filled by the producer warp
// with bulk copies, ahead of the task's events) or are read from global memory by the tile itself. The
// producer and the consumers evaluate this for every task, so they agree on the chunk sequence.
TILEFIRE_HD inline bool task_streams_staged(const WeightStreamDesc& stream, uint32_t stage_bytes, uint32_t tokens,
                                            uint32_t placement, bool stage_weights) {
  if (!stage_weights || stage_bytes == 0 || stream.row_bytes == 0) return false;
  if (placement != 0 /* static queues */ || tokens > kDeviceMaxPassTokens) return false;
  if (stream.row_bytes % 16 != 0 || stream.row_bytes > stage_bytes) return false;
  for (uint32_t r = 0; r < stream.range_count; ++r)
    if (stream.ranges[r].offset % 16 != 0) return false;
  return true;
}

// One chunk of a staged weight stream, as the producer copies it into a stage and the consumers read it:
// `rows` rows from `first_row` of range `range`, bytes [byte_begin, byte_begin + bytes_per_row) of each,
// row i of the chunk at i * row_pitch in the stage.
struct StreamChunk {
  uint32_t range = 0, first_row = 0, rows = 0;
  uint32_t stream_row = 0;  // first_row counted over all the stream's ranges (the consumers' result row)
  uint32_t byte_begin = 0, bytes_per_row = 0, row_pitch = 0;
  bool segment = false;  // one segment of each row (else whole rows, consecutive in the stage)
  TILEFIRE_HD bool whole_rows() const { return !segment; }
  TILEFIRE_HD bool ends_rows(uint32_t row_bytes) const { return byte_begin + bytes_per_row == row_bytes; }
};

// Bytes of one row's segment when rows are too wide for every consumer warp to get a whole one per
// chunk: a stage shared by kDeviceConsumerWarps rows, in multiples of 512 bytes (32 lanes x 16 bytes, so
// each lane reads the same vectors of a row as it does from global memory: the same sums, bit for bit).
TILEFIRE_HD inline uint32_t stream_segment_bytes(uint32_t stage_bytes) { return stage_bytes / kDeviceConsumerWarps / 512 * 512; }

// The chunks of a staged stream in order; visit(chunk) returning false stops the walk. Narrow rows go
// whole, as many per chunk as fit. Wide rows (fewer than kDeviceConsumerWarps per stage, such as the
// 16 KiB rows of a K = 8192 projection) go as groups of kDeviceConsumerWarps rows, a segment of each row
// per chunk, so every consumer warp has a row in every chunk and carries its sums across the segments.
template <class Visit>
TILEFIRE_HD inline void for_each_stream_chunk(const WeightStreamDesc& stream, uint32_t stage_bytes, Visit&& visit) {
  const uint32_t per_chunk = stage_bytes / stream.row_bytes;
  const uint32_t segment = stream_segment_bytes(stage_bytes);
  const bool segmented = per_chunk < kDeviceConsumerWarps && segment >= 512;
  if (!segmented && per_chunk == 0) return;  // rows wider than a stage are never staged (task_streams_staged)
  uint32_t stream_row = 0;
  for (uint32_t r = 0; r < stream.range_count; ++r) {
    const uint32_t rows = stream.ranges[r].rows;
    if (!segmented) {
      for (uint32_t first = 0; first < rows; first += per_chunk) {
        const uint32_t n = rows - first < per_chunk ? rows - first : per_chunk;
        if (!visit(StreamChunk{r, first, n, stream_row + first, 0, stream.row_bytes, stream.row_bytes, false})) return;
      }
    } else {
      for (uint32_t first = 0; first < rows; first += kDeviceConsumerWarps) {
        const uint32_t n = rows - first < kDeviceConsumerWarps ? rows - first : kDeviceConsumerWarps;
        for (uint32_t begin = 0; begin < stream.row_bytes; begin += segment) {
          const uint32_t bytes = stream.row_bytes - begin < segment ? stream.row_bytes - begin : segment;
          if (!visit(StreamChunk{r, first, n, stream_row + first, begin, bytes, segment, true})) return;
        }
      }
    }
    stream_row += rows;
  }
}

}  // namespace tilefire
