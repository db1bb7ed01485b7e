#pragma once
// The unfused op graph of one step: the model as the papers write it (norm, matmul, bias, rope, cache
// append, attention, add, swiglu), before the fuse pass turns it into fused tile ops (graph/fuse.cpp).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/model_spec.h"
#include "scheduler/program.h"

namespace tilefire {

enum class Primitive : uint8_t {
  embed,         // slots {table}: -> x (times scale)
  rmsnorm,       // slots {weight}: x -> x / rms(x) * weight
  matmul,        // slots {W [N, K]}: x -> x W^T (times scale)
  bias_add,      // slots {bias}: y -> y + bias
  head_rmsnorm,  // slots {weight [head_dim]}: each head of y normalised
  rope,          // slots {inv_freq}: each head of y rotated by its position
  kv_append,     // slots {cache}: y -> written at the step's positions (no output value)
  attention,     // slots {k cache, v cache}: q -> causal attention over the cache
  add,           // a, b -> a + b
  swiglu,        // gate, up -> act(gate) * up (act: the spec's mlp_activation, silu or the tanh GELU)
  last_token,    // x -> x[tokens - 1] (a batched decode: every row, or its last logit_rows)
};
std::string_view primitive_name(Primitive op);

constexpr uint32_t kNoValue = 0xffffffffu;

struct ValueDesc {
  std::string name;   // becomes the slot name if the value crosses fused ops
  uint32_t cols = 0;  // [tokens, cols], or [rows, cols] when last_token made it
  uint32_t rows = 0;  // 0: the step's tokens; else the last token's row, or a batched step's last logit_rows
};

struct PrimitiveNode {
  Primitive op = Primitive::add;
  uint16_t layer = 0;
  std::vector<uint32_t> inputs;  // values read
  uint32_t output = kNoValue;    // value written
  std::vector<uint32_t> slots;   // weights, caches, constants (see Primitive)
  float eps = 0;                 // rmsnorm, head_rmsnorm
  float scale = 1;               // embed, matmul: the output's factor (Granite's multipliers; 1 elsewhere)
};

struct PrimitiveGraph {
  ModelSpec spec;
  uint32_t max_context = 0;
  // The most tokens of one sequence a step of the engine appends (CompileOptions::step_tokens); 0: no
  // rings (CompileOptions::sliding_rings false), every cache max_context rows.
  uint32_t step_tokens = 1;
  // Rows of layer `layer`'s K and V caches per (sequence, KV head): max_context, or a sliding window's
  // ring (ops/tile.h, sliding_cache_rows).
  uint32_t cache_rows(uint32_t layer) const;
  std::vector<ValueDesc> values;
  std::vector<PrimitiveNode> nodes;  // topological order
  std::vector<SlotDesc> slots;       // weights, caches, constants (activations come from values)
  std::vector<float> constants;
};

struct CompileOptions;
PrimitiveGraph build_primitive_graph(const ModelSpec& spec, const CompileOptions& options);

}  // namespace tilefire
