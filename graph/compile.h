#pragma once
// The compile pipeline: ModelSpec -> fused op nodes of one step -> tiles -> dependencies from regions ->
// events -> placement -> validated Program. Runs as a oneTBB flow graph (passes as nodes; the per-node
// and per-task work inside a pass in parallel).
#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_spec.h"
#include "scheduler/program.h"

namespace tilefire {

struct CompileOptions {
  uint32_t workers = 1;
  uint32_t tokens = 1;  // tokens per step: 1 at decode, the prompt length at prefill
  uint32_t max_context = 0;  // KV cache positions per sequence; 0: the model's max_context
  // The most tokens of one sequence any step of the engine runs (its prefill chunk; a checked draft is
  // fewer): a sliding-window layer's cache keeps a ring of its window plus this many positions less one
  // (ops/tile.h, sliding_cache_rows), not max_context. Every program of an engine shares its caches, so
  // all are compiled with the same; 0: `tokens`.
  uint32_t step_tokens = 0;
  // Whether sliding-window layers get rings (the cpu backend's engine asks for them) or whole caches of
  // max_context rows (the cuda backend: its attention ops index rows by position, docs/CUDA.md; and the
  // default, so `inspect` and `simulate` lay out a device's program as it runs).
  bool sliding_rings = false;
  std::string policy = "balanced";  // a placement policy (scheduler/policy.h): --policy
  EventGranularity granularity = EventGranularity::tile;
  uint32_t head_width = 0;  // head granularity: columns per band (compile_model sets the model's head_dim)
  // Split-KV attention at decode (ops/attention_chunk.h): chunks per KV head; 0: the fuse pass decides
  // (it splits when there are fewer attention tiles than workers); 1: never split.
  uint32_t kv_splits = 0;
  // The step's tokens are one decode token of each of `tokens` sequences, not a prompt (Engine::
  // generate_batch, the simulator's --batch): attention splits over KV positions as at decode, and the LM
  // head projects every token's row (logits [tokens, vocab]).
  bool batched_decode = false;
  // With batched_decode: the LM head projects only the step's last `logit_rows` rows (0: every row). A
  // step whose first rows are a prompt's chunk (Engine::step_sequences) needs the chunk's last row and the
  // decoding sequences' rows after it, not a logit row per prompt token.
  uint32_t logit_rows = 0;
  // A prefill whose LM head projects every token's row too (logits [tokens, vocab]): each prompt token's
  // probability after those before it (GenerateRequest::prompt_logprobs).
  bool prompt_logits = false;
  // Sequences the KV caches hold (slots of [kv_heads, cache rows, head_dim] each): the engine's
  // EngineOptions::sequences. Every program of an engine shares its caches, so all are compiled alike.
  uint32_t sequences = 1;
  uint32_t tiles_per_worker = 4;  // target tiles of each op per worker (more: more overlap, more sync)
  uint32_t max_tile_rows = 512;   // widest matmul tile, in weight rows
  uint32_t tp = 1;    // tensor-parallel ranks (graph/shard.cpp makes rank `rank`'s program)
  uint32_t rank = 0;
  // Past these a compile is refused (InputError), counting as it goes, so that sizes each within
  // config.json's bounds but adding up to no real model get a message rather than the OS killing the
  // process for its memory. Producer tiles count where a task reads part of a producer (a read of all of
  // it is one wait on its done event). Llama 3.1 405B's decode program is far within them: `inspect` of
  // it takes 0.5 s and 110 MB on 132 workers (241,421 tasks), 8.7 s and 280 MB on 4,096 (753,968 tasks);
  // 1024 layers of 1024 KV heads of dimension 8, 5.8 million tasks, 19 s and 2 GB (2-core VM).
  uint64_t most_tasks = 20'000'000;             // 640 MB of TaskDesc
  uint64_t most_producer_tiles = 400'000'000;  // 1.6 GB of tile indices, and more while finding the events
};

// Whether a step's LM head projects every token's row (a batched decode: each token is the next of its own
// sequence; a prompt's logprobs) rather than the last one's. Under tensor parallelism the logits
// all-gather carries every row.
inline bool logits_of_every_token(const CompileOptions& options) { return options.batched_decode || options.prompt_logits; }

// The rows the LM head projects (the last ones of the step): 1, every token's, or a batched step's
// logit_rows.
inline uint32_t lm_head_rows(const CompileOptions& options) {
  if (options.batched_decode && options.logit_rows != 0) return options.logit_rows;
  return logits_of_every_token(options) ? options.tokens : 1;
}

// One op node before tiling: the fused op's parameters and the tile width the tiler should use.
struct OpNode {
  OpParams params;
  uint32_t tile_width = 1;       // units per tile (the last tile may be narrower)
  std::vector<uint32_t> breaks;  // unit indices a tile must not cross (besides 0 and the end)
};

// The fused op graph of one step (topological order) and the slots it names: what the fuse pass makes of
// the unfused primitive graph (graph/primitive_graph.h, graph/fuse.cpp; docs/ARCHITECTURE.md).
struct OpGraph {
  std::vector<OpNode> nodes;
  std::vector<SlotDesc> slots;
  std::vector<float> constants;  // storage of the constant slots
  uint32_t collective_flags = 0;  // tensor parallelism: flag slots the collective nodes use
};

// Matmul tiles: about tiles_per_worker per worker, multiples of 16 weight rows, at most max_tile_rows.
uint32_t matmul_tile_width(uint32_t rows, const CompileOptions& options);

struct PrimitiveGraph;
// The fuse pass; throws std::runtime_error naming any primitive no fused op covers.
OpGraph fuse_primitive_graph(const PrimitiveGraph& graph, const CompileOptions& options);

// The shard pass (graph/shard.cpp): rank `options.rank` of `options.tp`'s part of an op graph built from
// the rank-local spec (local_spec below): weight slots become slices of the checkpoint's tensors, the O
// and down projections write partial sums to window slots that an allreduce_residual node reduces, and
// the LM head's rows go through an allgather node into the full logits. The LM head and gate/up, whose
// rows differ by one between ranks when the vocabulary or the FFN does not split evenly, get one tile
// width on every rank that gives every rank the same number of tiles (ranks must run the same tasks).
struct TensorParallelSplit;
ModelSpec local_spec(const ModelSpec& spec, const TensorParallelSplit& split, uint32_t rank);
OpGraph shard_op_graph(OpGraph local, const ModelSpec& spec, const TensorParallelSplit& split, const CompileOptions& options);

// Tiles, derives dependencies and events, places and validates. Throws std::runtime_error when the graph
// is malformed (a slot read that nothing produces) or the Program fails validation.
Program compile_graph(const OpGraph& graph, const CompileOptions& options);

// The whole pipeline from the model: build_primitive_graph, the fuse pass, then compile_graph's passes.
// Under tensor parallelism a rank other than 0 is placed as rank 0 (its queues, validated again for the
// rank's program), since ranks wait on each other in their collective tasks.
Program compile_model(const ModelSpec& spec, const CompileOptions& options);

// Slot names the engine binds by convention.
std::string kv_cache_slot_name(uint32_t layer, bool key);
constexpr const char* kLogitsSlotName = "logits";
constexpr const char* kRopeSlotName = "rope.inv_freq";

}  // namespace tilefire
