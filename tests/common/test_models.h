#pragma once
// Small model folders for tests: a spec derived from the `tiny` preset with one architecture feature
// switched on, written with random weights into a fresh temporary folder.
#include <filesystem>
#include <string>

#include "graph/weights.h"

namespace tilefire::testing {

// phi3: q/k/v and gate/up stored fused (Phi3ForCausalLM); phi3_longrope: that with LongRoPE, whose
// pretrained context (64) is below the engine's default context (tiny's 1024), so the long factors rotate.
// phi3_partial: that rotating 24 of each head's 32 dimensions (Phi-4-mini's partial_rotary_factor 0.75).
// mistral_window: Mistral with a sliding window of 7 positions on every layer; qwen2_window: Qwen2 with
// use_sliding_window, a window of 4 on its second layer only (layer_types), the first attending to all.
// smollm3: SmolLM3 (tied embeddings) whose second layer is NoPE (no RoPE on q and k).
// granite: Granite (tied embeddings) with all four multipliers away from 1, the logits' divisor not a power
// of two. gemma3: Gemma 3 (tied; sandwich norms stored as w for 1 + w, q/k norms, GeGLU), its first layer
// sliding (a window of 4, RoPE base 1e4) and its second full (base 1e6, linear scaling 8), scores scaled
// by query_pre_attn_scalar 2 (four times 1/sqrt(32): tiny's random scores are small). gemma2: Gemma 2
// (gemma3's layer without q/k norms or a local RoPE base), its first layer sliding (a window of 4), soft
// caps of 0.5 on the scores and 5 on the logits (small, so that they bite on tiny's small values; a logit cap
// of 1 saturated them into float ties that broke greedy agreement with the double reference). gemma: Gemma
// 1 (tied; Llama's layer with norms stored as w for 1 + w, GeGLU, the embedding scaled; no caps or window).
enum class Variant { llama, llama3_rope, qwen2_bias, qwen3_qk_norm, tied, mistral, phi3, phi3_longrope, phi3_partial,
                     mistral_window, qwen2_window, smollm3, granite, gemma3, gemma2, gemma };

ModelSpec variant_spec(Variant variant);
const char* variant_name(Variant variant);

// A fresh folder under the system temp directory, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A file's whole text, and a file written with `text` (throws if it cannot be written).
std::string read_file_text(const std::filesystem::path& path);
void write_file_text(const std::filesystem::path& path, const std::string& text);

// Writes the spec's random checkpoint (seed 0) into dir; returns the folder.
std::filesystem::path write_test_model(const ModelSpec& spec, const std::filesystem::path& dir, DType dtype = DType::f32,
                                       uint64_t max_shard_bytes = 0);

// Writes `value` over element `index` of an f32 tensor of the folder's model.safetensors (a NaN or an
// infinity planted in a weight). Throws when the tensor is not f32 or the index is past its end.
void overwrite_f32(const std::filesystem::path& folder, const std::string& tensor, uint64_t index, float value);

}  // namespace tilefire::testing
