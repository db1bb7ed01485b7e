#include "tests/common/test_models.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace tilefire::testing {

ModelSpec variant_spec(Variant variant) {
  ModelSpec spec = preset_spec("tiny", DType::f32);
  spec.layers = 2;  // two layers keep the double-precision reference fast
  switch (variant) {
    case Variant::llama: break;
    case Variant::llama3_rope:
      spec.rope_theta = 500000.0f;
      spec.rope_scaling.llama3 = true;
      spec.rope_scaling.factor = 32.0f;
      spec.rope_scaling.low_freq_factor = 1.0f;
      spec.rope_scaling.high_freq_factor = 4.0f;
      spec.rope_scaling.original_max_position = 64;  // small, so every branch of the scaling is hit at head_dim 32
      break;
    case Variant::qwen2_bias:
      spec.arch = Architecture::qwen2;
      spec.arch_name = "Qwen2ForCausalLM";
      spec.qkv_bias = true;
      spec.rms_eps = 1e-6f;
      break;
    case Variant::qwen3_qk_norm:
      spec.arch = Architecture::qwen3;
      spec.arch_name = "Qwen3ForCausalLM";
      spec.qk_norm = true;
      spec.head_dim = 64;  // given, not hidden / heads
      spec.rms_eps = 1e-6f;
      break;
    case Variant::tied: spec.tie_embeddings = true; break;
    case Variant::mistral:
    case Variant::mistral_window:
      spec.arch = Architecture::mistral;
      spec.arch_name = "MistralForCausalLM";
      spec.kv_heads = 4;
      if (variant == Variant::mistral_window) {
        spec.sliding_window = 7;
        spec.sliding_layers.assign(spec.layers, true);
      }
      break;
    case Variant::smollm3:
      spec.arch = Architecture::smollm3;
      spec.arch_name = "SmolLM3ForCausalLM";
      spec.tie_embeddings = true;
      spec.nope_layers = {false, true};
      break;
    case Variant::granite:
      spec.arch = Architecture::granite;
      spec.arch_name = "GraniteForCausalLM";
      spec.tie_embeddings = true;
      spec.rms_eps = 1e-6f;
      spec.embedding_multiplier = 6.0f;
      spec.residual_multiplier = 0.4f;
      spec.attention_multiplier = 2.0f;  // 11 times tiny's 1/sqrt(32): its random scores are small
      spec.logits_scaling = 3.0f;
      break;
    case Variant::gemma3:
      spec.arch = Architecture::gemma3;
      spec.arch_name = "Gemma3ForCausalLM";
      spec.tie_embeddings = true;
      spec.qk_norm = true;
      spec.rms_eps = 1e-6f;
      spec.mlp_activation = GateActivation::gelu_tanh;
      spec.embedding_multiplier = 16.0f;  // sqrt(hidden 256), exact in every dtype
      spec.query_pre_attn_scalar = 2;
      spec.rope_theta = 1e6f;
      spec.rope_scaling.linear = true;
      spec.rope_scaling.factor = 8.0f;
      spec.local_rope_theta = 1e4f;
      spec.sliding_window = 4;
      spec.sliding_layers = {true, false};
      break;
    case Variant::gemma2:
      spec.arch = Architecture::gemma2;
      spec.arch_name = "Gemma2ForCausalLM";
      spec.tie_embeddings = true;
      spec.rms_eps = 1e-6f;
      spec.mlp_activation = GateActivation::gelu_tanh;
      spec.embedding_multiplier = 16.0f;  // sqrt(hidden 256), exact in every dtype
      spec.query_pre_attn_scalar = 2;
      spec.attention_softcap = 0.5f;
      spec.final_logit_softcap = 5.0f;
      spec.sliding_window = 4;
      spec.sliding_layers = {true, false};
      break;
    case Variant::gemma:
      spec.arch = Architecture::gemma;
      spec.arch_name = "GemmaForCausalLM";
      spec.tie_embeddings = true;
      spec.rms_eps = 1e-6f;
      spec.mlp_activation = GateActivation::gelu_tanh;
      spec.embedding_multiplier = 16.0f;  // sqrt(hidden 256), exact in every dtype
      break;
    case Variant::qwen2_window:
      spec.arch = Architecture::qwen2;
      spec.arch_name = "Qwen2ForCausalLM";
      spec.qkv_bias = true;
      spec.sliding_window = 4;
      spec.sliding_layers = {false, true};
      break;
    case Variant::phi3:
    case Variant::phi3_longrope:
    case Variant::phi3_partial:
      spec.arch = Architecture::phi3;
      spec.arch_name = "Phi3ForCausalLM";
      spec.kv_heads = 4;
      if (variant == Variant::phi3) break;
      if (variant == Variant::phi3_partial) spec.rotary_dim = 24;
      spec.rope_scaling.longrope = true;
      spec.rope_scaling.original_max_position = 64;
      spec.rope_scaling.factor = float(spec.max_context) / 64.0f;  // as parse_hf_config reads the written config
      spec.rope_scaling.attention_factor = float(std::sqrt(1.0 + std::log(double(spec.rope_scaling.factor)) / std::log(64.0)));
      for (uint32_t i = 0; i < spec.rotated_dims() / 2; ++i) {
        // Phi-3.5's factors grow from 1 at the highest frequency to tens at the lowest; these as well.
        spec.rope_scaling.short_factor.push_back(1.0f + 0.05f * float(i));
        spec.rope_scaling.long_factor.push_back(1.0f + 1.5f * float(i * i) / 8.0f);
      }
      break;
  }
  return spec;
}

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::llama: return "llama";
    case Variant::llama3_rope: return "llama3_rope";
    case Variant::qwen2_bias: return "qwen2_bias";
    case Variant::qwen3_qk_norm: return "qwen3_qk_norm";
    case Variant::tied: return "tied";
    case Variant::mistral: return "mistral";
    case Variant::phi3: return "phi3";
    case Variant::phi3_longrope: return "phi3_longrope";
    case Variant::phi3_partial: return "phi3_partial";
    case Variant::mistral_window: return "mistral_window";
    case Variant::qwen2_window: return "qwen2_window";
    case Variant::smollm3: return "smollm3";
    case Variant::granite: return "granite";
    case Variant::gemma3: return "gemma3";
    case Variant::gemma2: return "gemma2";
    case Variant::gemma: return "gemma";
  }
  return "?";
}

TempDir::TempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("tilefire-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::filesystem::path write_test_model(const ModelSpec& spec, const std::filesystem::path& dir, DType dtype,
                                       uint64_t max_shard_bytes) {
  RandomWeightOptions options;
  options.dtype = dtype;
  options.seed = 0;
  options.max_shard_bytes = max_shard_bytes;
  ModelSpec typed = spec;
  typed.dtype = dtype;
  write_random_hf_folder(typed, options, dir);
  return dir;
}

std::string read_file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void overwrite_f32(const std::filesystem::path& folder, const std::string& tensor, uint64_t index, float value) {
  const std::filesystem::path file = folder / "model.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  uint64_t header_length = 0;
  if (bytes.size() < 8) throw std::runtime_error("overwrite_f32: " + file.string() + " is not a safetensors file");
  std::memcpy(&header_length, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_length));
  if (!header.contains(tensor) || header[tensor]["dtype"] != "F32")
    throw std::runtime_error("overwrite_f32: " + tensor + " is not an f32 tensor of " + file.string());
  const uint64_t offset = header[tensor]["data_offsets"][0].get<uint64_t>() + index * 4;
  if (offset >= header[tensor]["data_offsets"][1].get<uint64_t>())
    throw std::runtime_error("overwrite_f32: element " + std::to_string(index) + " is past the end of " + tensor);
  std::memcpy(bytes.data() + 8 + header_length + offset, &value, 4);
  std::ofstream(file, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace tilefire::testing
