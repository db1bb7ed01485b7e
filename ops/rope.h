#pragma once
// Rotary position embedding, Hugging Face rotate-half layout: element i pairs with i + head_dim/2.
#include <cstdint>
#include <vector>

namespace tilefire {

struct RopeScaling {
  bool llama3 = false;  // rope_scaling.rope_type == "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  uint32_t original_max_position = 8192;
};

// inv_freq[i] = theta^(-2i / head_dim) for i < head_dim / 2, with Llama 3's frequency scaling applied
// when scaling.llama3 (wavelengths above original/low_freq_factor divided by factor, below
// original/high_freq_factor kept, smoothly interpolated between), as transformers computes it.
std::vector<float> rope_inverse_frequencies(uint32_t head_dim, float theta, const RopeScaling& scaling);

// Rotates one head in place: for i < hd/2, angle = float(position) * inv_freq[i] as a float32 product
// (like transformers' float32 path; the same bits as the exact product rounded once to float), then
// cos/sin of that float angle computed in double and rounded to float:
//   out[i] = x[i] * cos - x[i + hd/2] * sin;  out[i + hd/2] = x[i + hd/2] * cos + x[i] * sin.
void rope_apply_head(float* head, uint32_t head_dim, uint32_t position, const float* inv_freq);

}  // namespace tilefire
