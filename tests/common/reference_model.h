#pragma once
// The oracle for end-to-end tests: a Llama-family forward pass written plainly, layer by layer, in double,
// reading the checkpoint's tensors by name (Phi-3's fused qkv_proj and gate_up_proj sliced here, as
// transformers does). It shares no code with the compiler, the scheduler, the loader's slicing or the ops
// (only the bf16/f16 -> f32 conversion), so it can disagree with them.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/weights.h"

namespace tilefire::testing {

class ReferenceModel {
 public:
  // `context`: the KV cache positions of the engine compared with (LongRoPE's factors depend on it; 0: the
  // engine's default, the model's max_position_embeddings up to 4096).
  ReferenceModel(const ModelSpec& spec, const WeightStore& weights, uint32_t context = 0);
  // Feeds tokens at the next positions and returns the last token's logits [vocab].
  std::vector<double> forward(const std::vector<int32_t>& tokens);
  void reset() { k_cache_.assign(spec_.layers, {}); v_cache_.assign(spec_.layers, {}); position_ = 0; }
  // Keeps the first `position` tokens (at most those fed).
  void rewind(uint32_t position) {
    for (auto* cache : {&k_cache_, &v_cache_})
      for (auto& layer : *cache) layer.resize(size_t(position) * spec_.kv_dim());
    position_ = position;
  }

 private:
  // The tensor `name` in double, converted on its first use and kept (the weights must not change while
  // this model lives): converting each tensor again at every token was most of a reference pass's time.
  const std::vector<double>& weight(const std::string& name) const;
  std::vector<double> forward_token(int32_t token);

  ModelSpec spec_;
  const WeightStore& weights_;
  mutable std::unordered_map<std::string, std::vector<double>> converted_;  // weight()'s tensors by name
  std::vector<double> inv_freq_;
  std::vector<double> local_inv_freq_;  // Gemma 3's sliding layers: rope_local_base_freq, unscaled
  double rope_magnitude_ = 1.0;  // LongRoPE's attention_factor: cos and sin are multiplied by it
  std::vector<std::vector<double>> k_cache_, v_cache_;  // [layer][position * kv_dim]
  uint32_t position_ = 0;
};

}  // namespace tilefire::testing
