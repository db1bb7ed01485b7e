#pragma once
// Element types of weights and the conversions between them. Activations are always f32 on the CPU
// backend (docs/PRECISION.md says why); weights are f32, bf16 or f16 as stored in the checkpoint.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tilefire {

enum class DType : uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

// Accepts the project's names (f32, bf16, f16) and the safetensors names (F32, BF16, F16).
inline std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "F32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "BF16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "F16" || s == "float16") return DType::f16;
  return std::nullopt;
}

constexpr std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet bit forced so the payload cannot round to infinity).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      bits = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, with overflow to infinity and gradual underflow.
inline uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absbits = bits & 0x7fffffffu;
  if (absbits > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absbits >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (absbits < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    if (absbits < 0x33000000u) return uint16_t(sign);  // below half the smallest subnormal
    uint32_t e = absbits >> 23;
    uint32_t mant = (absbits & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // value = mant * 2^(e-150) = (mant >> (126 - e)) * 2^-24, the f16 subnormal unit
    uint32_t result = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (result & 1u))) ++result;
    return uint16_t(sign | result);
  }
  uint32_t rounded = absbits + 0xfffu + ((absbits >> 13) & 1u);
  return uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

// Reads element i of a weight array of the given dtype as f32 (the scalar path; kernels vectorise).
inline float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
  }
  return 0.0f;
}

}  // namespace tilefire
