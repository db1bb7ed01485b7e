#pragma once
// Rotary position embedding, Hugging Face rotate-half layout: element i pairs with i + head_dim/2.
#include <cstdint>
#include <vector>

namespace tilefire {

struct RopeScaling {
  bool llama3 = false;    // rope_scaling.rope_type == "llama3"
  bool longrope = false;  // "longrope" (Phi-3; its older name "su")
  bool linear = false;    // "linear" (Gemma 3's full layers): every frequency divided by factor
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  uint32_t original_max_position = 8192;
  // longrope: each frequency's divisor [head_dim / 2] for a context within original_max_position (short)
  // and past it (long), and the factor transformers multiplies cos and sin by (attention_factor).
  std::vector<float> short_factor, long_factor;
  float attention_factor = 1.0f;

  bool operator==(const RopeScaling&) const = default;
};

// inv_freq[i] = theta^(-2i / head_dim) for i < head_dim / 2, as transformers computes it, with:
// - Llama 3's frequency scaling when scaling.llama3 (wavelengths above original/low_freq_factor divided by
//   factor, below original/high_freq_factor kept, smoothly interpolated between);
// - linear scaling when scaling.linear: inv_freq[i] / factor (positions compressed by factor);
// - LongRoPE's when scaling.longrope: inv_freq[i] = 1 / (ext[i] * theta^(2i / head_dim)), ext the long
//   factors when `context` (the positions a sequence's KV cache holds) is past original_max_position, the
//   short ones otherwise. transformers picks by the length of each forward pass, so keys cached before a
//   sequence grows past it keep the short rotation; choosing once by the context (llama.cpp's rule) keeps
//   every position's rotation fixed, and is transformers' choice whenever the context is within it.
std::vector<float> rope_inverse_frequencies(uint32_t head_dim, float theta, const RopeScaling& scaling, uint32_t context = 0);

// What cos and sin are multiplied by: LongRoPE's attention_factor, 1 otherwise. (It scales the rotated
// dimensions only: with a partial rotation the rest of a head is passed through as it is, so it cannot be
// folded into the attention's scale.)
float rope_magnitude(const RopeScaling& scaling);

// Rotates one head in place: for i < hd/2, angle = float(position) * inv_freq[i] as a float32 product
// (like transformers' float32 path; the same bits as the exact product rounded once to float), then
// cos/sin of that float angle computed in double, rounded to float and multiplied by `magnitude` in float:
//   out[i] = x[i] * cos - x[i + hd/2] * sin;  out[i + hd/2] = x[i + hd/2] * cos + x[i] * sin.
// With a partial rotation, `head_dim` is the rotated leading dimensions (the rest is left as it is).
void rope_apply_head(float* head, uint32_t head_dim, uint32_t position, const float* inv_freq, float magnitude = 1.0f);

}  // namespace tilefire
