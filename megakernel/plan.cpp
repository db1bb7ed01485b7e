// tilefire/plan.h: the tensor-parallel plan of a model, from graph/tensor_parallel.h.
#include "tilefire/plan.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "graph/model_spec.h"
#include "graph/tensor_parallel.h"
#include "graph/weights.h"
#include "megakernel/tool_spec.h"

namespace tilefire {

// In GiB, or in MiB or KiB below one of the next unit up (a --gpu-mem of 1MiB is not "0.00 GiB").
std::string readable_bytes(uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(text, sizeof(text), "%.2f MiB", double(bytes) / double(1ull << 20));
  else
    std::snprintf(text, sizeof(text), "%.2f KiB", double(bytes) / 1024.0);
  return text;
}

ModelSpec spec_for_tool(const std::string& model_dir, const std::string& preset, std::optional<DType> dtype, std::string* label) {
  if (!model_dir.empty()) {
    const std::filesystem::path config = std::filesystem::path(model_dir) / "config.json";
    std::error_code ignored;
    if (!std::filesystem::exists(model_dir, ignored))
      throw InputError("--model " + model_dir + ": no such folder (a model folder holds config.json)");
    if (!std::filesystem::is_directory(model_dir, ignored)) throw InputError("--model " + model_dir + ": not a folder");
    if (!std::filesystem::exists(config)) throw InputError("--model " + model_dir + ": no config.json in the folder");
    *label = model_dir;
    ModelSpec spec = parse_hf_config(config);
    if (dtype) spec.dtype = *dtype;
    // Whether the LM head is the embedding is the checkpoint's to say (ModelSpec::lm_head_tie_from_checkpoint):
    // the names of its tensors say it (read from the header or the index alone), where the folder has them;
    // a config alone is planned with a head of its own.
    const std::filesystem::path folder(model_dir);
    const bool stores_tensors = std::filesystem::exists(folder / "model.safetensors", ignored) ||
                                std::filesystem::is_symlink(folder / "model.safetensors", ignored) ||  // a dangling one: say so
                                std::filesystem::exists(folder / "model.safetensors.index.json", ignored);
    if (spec.lm_head_tie_from_checkpoint && stores_tensors) {
      const std::vector<std::string> names = stored_tensor_names(folder);
      spec.tie_embeddings = std::none_of(names.begin(), names.end(), [](const std::string& name) {
        return text_model_name(name) == std::optional<std::string>("lm_head.weight");
      });
    }
    return spec;
  }
  const std::string name = preset.empty() ? "tiny" : preset;
  *label = "preset " + name + " (" + std::string(dtype_name(dtype.value_or(DType::bf16))) + ")";
  return preset_spec(name, dtype.value_or(DType::bf16));
}

TensorParallelPlan plan_tensor_parallel(const std::string& model_dir, const std::string& preset, uint32_t tp,
                                        uint64_t gpu_memory_bytes, uint64_t kv_tokens) {
  TensorParallelPlan plan;
  const ModelSpec spec = spec_for_tool(model_dir, preset, std::nullopt, &plan.model);
  if (kv_tokens == 0) kv_tokens = std::min<uint64_t>(spec.max_context, 4096);
  if (kv_tokens > spec.max_context)
    throw InputError("--kv-tokens " + std::to_string(kv_tokens) + " exceeds the model's " + std::to_string(spec.max_context) +
                     " positions");
  const TensorParallelSplit split = split_tensor_parallel(spec, tp);
  plan.tp = tp;
  plan.heads = spec.heads;
  plan.kv_heads = spec.kv_heads;
  plan.ffn = spec.ffn;
  plan.vocab = spec.vocab;
  plan.layers = spec.layers;
  plan.kv_replicas = split.kv_replicas;
  plan.kv_tokens = kv_tokens;
  plan.gpu_memory_bytes = gpu_memory_bytes;
  plan.fits = true;
  uint64_t largest = 0;
  for (const RankShard& s : split.ranks) {
    const RankMemory m = rank_memory(spec, s, uint32_t(kv_tokens), 1, tp);  // on GPUs: no rings
    RankPlan r;
    r.rank = s.rank;
    r.q_head_begin = s.q_head_begin;
    r.q_heads = s.q_heads;
    r.kv_head_begin = s.kv_head_begin;
    r.kv_heads = s.kv_heads;
    r.ffn_begin = s.ffn_begin;
    r.ffn = s.ffn;
    r.vocab_begin = s.vocab_begin;
    r.vocab = s.vocab;
    r.weight_bytes = m.weight_bytes;
    r.kv_cache_bytes = m.kv_cache_bytes;
    r.workspace_bytes = m.workspace_bytes;
    r.total_bytes = m.total();
    r.exchanged_bytes_per_token_layer = exchanged_bytes_per_token_layer(spec, tp);
    r.logits_gather_bytes = logits_gather_bytes(spec, s);
    largest = std::max(largest, r.total_bytes);
    if (r.total_bytes > gpu_memory_bytes) plan.fits = false;
    plan.ranks.push_back(r);
  }
  plan.verdict = plan.fits ? "fits: the largest rank needs " + readable_bytes(largest) + " of " + readable_bytes(gpu_memory_bytes)
                           : "does not fit: the largest rank needs " + readable_bytes(largest) + " but a GPU has " + readable_bytes(gpu_memory_bytes) +
                                 " (more ranks, fewer --kv-tokens, or a larger --gpu-mem)";
  return plan;
}

}  // namespace tilefire
