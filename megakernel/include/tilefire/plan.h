#pragma once
// Planning tensor parallelism before running it: how a model splits over N ranks and what each rank then
// needs (`tilefire plan`). Refuses, with the reason, a degree the model's shapes do not allow.
#include <cstdint>
#include <string>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire {

struct RankPlan {
  uint32_t rank = 0;
  uint32_t q_head_begin = 0, q_heads = 0;    // query heads [begin, begin + count)
  uint32_t kv_head_begin = 0, kv_heads = 0;  // KV heads held (a replica when KV heads are replicated)
  uint32_t ffn_begin = 0, ffn = 0;           // FFN columns
  uint32_t vocab_begin = 0, vocab = 0;       // LM-head rows
  uint64_t weight_bytes = 0, kv_cache_bytes = 0, workspace_bytes = 0, total_bytes = 0;
  uint64_t exchanged_bytes_per_token_layer = 0;  // read from peers: two one-shot all-reduces of the hidden state
  uint64_t logits_gather_bytes = 0;              // read from peers once per step: the other ranks' logits
};

struct TensorParallelPlan {
  std::string model;  // folder or preset
  uint32_t tp = 1;
  uint32_t heads = 0, kv_heads = 0, ffn = 0, vocab = 0, layers = 0;
  uint32_t kv_replicas = 1;   // ranks holding each KV head (1: split, not replicated)
  uint64_t kv_tokens = 0;     // KV-cache positions planned for
  uint64_t gpu_memory_bytes = 0;
  bool fits = false;          // every rank's total fits in gpu_memory_bytes
  std::string verdict;        // one line: fits, or what does not
  std::vector<RankPlan> ranks;
};

// `model_dir` (its config.json) or, when empty, `preset` (bf16 weights). Throws InputError for a bad model
// or a TP degree the shapes do not allow, saying why.
TensorParallelPlan plan_tensor_parallel(const std::string& model_dir, const std::string& preset, uint32_t tp,
                                        uint64_t gpu_memory_bytes, uint64_t kv_tokens);

}  // namespace tilefire
