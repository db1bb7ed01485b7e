#pragma once
// What every tile op shares: the context a tile runs in (resolved tensor slots, the step's inputs, the
// worker's scratch), the regions a tile reads and writes (from which the compiler derives dependencies),
// and the fixed-size parameter record a Program stores per op node.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/host_device.h"
#include "ops/op_list.h"

namespace tilefire {

constexpr uint32_t kNoSlot = 0xffffffffu;

// A tile's extent in its op's tiling unit (output columns, heads, vocab rows: each op says which).
struct TileRange {
  uint32_t begin = 0;
  uint32_t end = 0;
};

// Inputs that change every step of the same Program.
struct StepInputs {
  const int32_t* tokens = nullptr;  // [tokens] the step's token ids (positions position0 ..)
  uint32_t tokens_count = 0;        // equals the Program's token count
  uint32_t position0 = 0;           // position of tokens[0] in the sequence
  uint64_t epoch = 0;               // tensor parallelism: the step's collective epoch (the same on every rank)
  // Several sequences in one step (a batched decode: one token of each): token m's position in its own
  // sequence and that sequence's KV cache slot. Null: every token is of sequence `sequence0`, token m at
  // position0 + m (a prefill chunk, or the decode step of one sequence).
  const uint32_t* positions = nullptr;  // [tokens]
  const uint32_t* sequences = nullptr;  // [tokens]
  uint32_t sequence0 = 0;
};

// Token m's position in its sequence, and its sequence's slot in the KV caches (kv_cache_row).
inline uint32_t token_position(const StepInputs& step, uint32_t m) { return step.positions ? step.positions[m] : step.position0 + m; }
inline uint32_t token_sequence(const StepInputs& step, uint32_t m) { return step.sequences ? step.sequences[m] : step.sequence0; }

// A KV cache holds `sequences` slots, each [kv_heads, cache_rows, head_dim]: row `row` of (sequence, KV
// head), in head_dim-float rows from the cache's start. Slot 0 alone is the layout of one sequence. A
// layer that sees every position has cache_rows = the engine's max_context and position p in row p; on
// the cpu backend a sliding-window layer keeps only a ring of cache_rows (sliding_cache_rows) rows,
// position p in row p % cache_rows, overwritten once the window has passed it. The cuda backend's
// caches never wrap (CompileOptions::sliding_rings; docs/CUDA.md), so its ops index rows by position.
TILEFIRE_HD inline size_t kv_cache_row(uint32_t sequence, uint32_t kv_head, uint32_t row, uint32_t kv_heads, uint32_t cache_rows) {
  return (size_t(sequence) * kv_heads + kv_head) * cache_rows + row;
}

// The rows a sliding-window layer's cache keeps per (sequence, KV head): the window, plus room for the
// most positions one step appends to one sequence (`step_tokens`: a prefill chunk, a checked draft) less
// one, so that a step's appends never overwrite a position one of its own tokens still sees, and a draft
// turned down never overwrote one the tokens after it see (a rewind of at most step_tokens - 1); rounded
// up to 16, the tensor-core prefill's key blocks (ops/cuda/prefill_attention.cuh), so no block of 16
// aligned positions straddles the ring's end. Never more than max_context (a ring that long never wraps),
// and max_context where the layer has no window (0).
TILEFIRE_HD constexpr uint32_t sliding_cache_rows(uint32_t window, uint32_t step_tokens, uint32_t max_context) {
  if (window == 0) return max_context;
  const uint64_t rows = (uint64_t(window) + (step_tokens == 0 ? 1 : step_tokens) - 1 + 15) / 16 * 16;
  return rows < max_context ? uint32_t(rows) : max_context;
}

// The first cache position a token at `position` attends to: 0 under full causal attention (`window` 0),
// else the first of the last `window` positions, itself included (transformers' sliding-window mask keeps
// key j for query i when j > i - window; so does llama.cpp's).
TILEFIRE_HD constexpr uint32_t first_visible_position(uint32_t position, uint32_t window) {
  return window != 0 && position >= window ? position + 1 - window : 0;
}

// Whether a ring of `cache_rows` rows for a window of `window` positions, into which positions up to
// `written_end` (exclusive) have been written since the sequence last started at position 0, still holds
// what a token at `position` sees before itself (positions [first_visible_position(position, window),
// position)): true at position 0, and when no later write reached those positions' rows. A prefix of a
// cached sequence can be reused (or a sequence rewound) to `position` only when this holds.
TILEFIRE_HD constexpr bool ring_holds_window_before(uint32_t position, uint32_t window, uint32_t cache_rows,
                                                    uint32_t written_end) {
  if (position == 0) return true;
  return uint64_t(first_visible_position(position, window)) + cache_rows >= written_end;
}

struct RankView;  // transport/rank_view.h

struct TileContext {
  void* const* slots = nullptr;  // [slot count] resolved pointers (host, device or peer window)
  const StepInputs* step = nullptr;
  float* scratch = nullptr;  // [Program::scratch_floats] private to the worker running the tile
  const RankView* ranks = nullptr;  // tensor parallelism: this rank's view of the group's windows

  template <class T>
  T* slot(uint32_t id) const { return static_cast<T*>(slots[id]); }
};

// A region of a tensor slot, in the slot's region unit (columns of an activation [tokens, columns];
// KV heads of a cache). Two tiles conflict when they touch overlapping regions of one slot.
struct Region {
  uint32_t slot = kNoSlot;
  uint32_t begin = 0;
  uint32_t end = 0;
};

struct TileFootprint {
  std::vector<Region> reads;
  std::vector<Region> writes;
};

// Weight bytes a tile will stream, so an executor can fetch them while the tile still waits for its
// inputs (what takes a megakernel toward full memory bandwidth). Ops that read no weights name none;
// an op may declare `static void weight_ranges(const Params&, TileRange, WeightRanges&)`.
struct WeightRanges {
  struct Range {
    uint32_t slot = kNoSlot;
    uint64_t offset = 0;  // bytes from the slot's start
    uint64_t bytes = 0;
  };
  Range ranges[3];
  uint32_t count = 0;
  void add(uint32_t slot, uint64_t offset, uint64_t bytes) {
    if (count < 3) ranges[count++] = {slot, offset, bytes};
  }
};

// Fixed-size storage for any op's parameter struct (all are trivially copyable PODs of slot ids and
// constants), so the Program keeps one array of them.
struct OpParams {
  static constexpr size_t kBytes = 120;
  OpCode op = OpCode::noop;
  uint16_t layer = 0;
  alignas(8) unsigned char bytes[kBytes] = {};

  template <class P>
  static OpParams make(OpCode op, uint16_t layer, const P& params) {
    static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= kBytes, "op params must be small PODs");
    OpParams record;
    record.op = op;
    record.layer = layer;
    std::memcpy(record.bytes, &params, sizeof(P));
    return record;
  }
  template <class P>
  TILEFIRE_HD const P& as() const {
    static_assert(std::is_trivially_copyable_v<P> && sizeof(P) <= kBytes);
    return *reinterpret_cast<const P*>(bytes);
  }
};
static_assert(sizeof(OpParams) == 128);

}  // namespace tilefire
