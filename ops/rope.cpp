// Rotary position embedding, bit-compatible in spirit with transformers' float32 path: inverse
// frequencies and angles are float32 values, so a model gives the same rotations here as in PyTorch
// (up to the last ulp of cos/sin, which we compute in double and round).
#include "ops/rope.h"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace tilefire {

std::vector<float> rope_inverse_frequencies(uint32_t head_dim, float theta, const RopeScaling& scaling, uint32_t context) {
  if (head_dim == 0 || head_dim % 2 != 0)
    throw std::invalid_argument("rope: head_dim must be even and non-zero, got " + std::to_string(head_dim));
  const uint32_t half = head_dim / 2;
  std::vector<float> inv_freq(half);  // [head_dim / 2]
  for (uint32_t i = 0; i < half; ++i) {
    // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)). The exponent is a float32
    // quotient; the power is taken in double and rounded to float; the reciprocal is a float32 division.
    const float exponent = float(2 * i) / float(head_dim);
    const float power = float(std::pow(double(theta), double(exponent)));
    inv_freq[i] = 1.0f / power;
  }
  if (scaling.longrope) {
    // transformers' _compute_longrope_parameters: 1.0 / (ext_factors * base ** (arange(0, dim, 2) / dim)), a
    // float32 product and a float32 division.
    const std::vector<float>& ext = context > scaling.original_max_position ? scaling.long_factor : scaling.short_factor;
    if (ext.size() != half)
      throw std::invalid_argument("rope: longrope needs " + std::to_string(half) + " factors, got " + std::to_string(ext.size()));
    for (uint32_t i = 0; i < half; ++i) {
      const float exponent = float(2 * i) / float(head_dim);
      const float power = float(std::pow(double(theta), double(exponent)));
      inv_freq[i] = 1.0f / (ext[i] * power);
    }
    return inv_freq;
  }
  if (scaling.linear) {  // transformers' _compute_linear_scaling_rope_parameters: a float32 division
    for (float& f : inv_freq) f /= scaling.factor;
    return inv_freq;
  }
  if (!scaling.llama3) return inv_freq;

  // transformers' _compute_llama3_parameters, elementwise on float32 tensors.
  const float factor = scaling.factor;
  const float low_freq_factor = scaling.low_freq_factor;
  const float high_freq_factor = scaling.high_freq_factor;
  const float original = float(scaling.original_max_position);
  const float low_freq_wavelen = original / low_freq_factor;   // longer than this: fully scaled
  const float high_freq_wavelen = original / high_freq_factor;  // shorter than this: kept
  const float two_pi = float(2.0 * std::numbers::pi);
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (wavelen < high_freq_wavelen) {
      // high frequency: unchanged
    } else {
      const float smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = (1.0f - smooth) * f / factor + smooth * f;
    }
  }
  return inv_freq;
}

float rope_magnitude(const RopeScaling& scaling) { return scaling.longrope ? scaling.attention_factor : 1.0f; }

void rope_apply_head(float* head, uint32_t head_dim, uint32_t position, const float* inv_freq, float magnitude) {
  const uint32_t half = head_dim / 2;
  const float pos = float(position);  // transformers: position_ids.float() @ inv_freq, in float32
  for (uint32_t i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    // transformers: emb.cos() * attention_scaling, in float32
    const float c = float(std::cos(double(angle))) * magnitude;
    const float s = float(std::sin(double(angle))) * magnitude;
    const float x0 = head[i];
    const float x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
}

}  // namespace tilefire
