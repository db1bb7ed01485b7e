// The model presets: the shapes of published models, and two small test models (tiny, small), for
// random-weight runs, benchmarks and `plan`.
#include "graph/model_spec.h"

namespace tilefire {

namespace {

ModelSpec llama_shape(uint32_t vocab, uint32_t hidden, uint32_t layers, uint32_t heads, uint32_t kv_heads,
                      uint32_t head_dim, uint32_t ffn, uint32_t max_context) {
  ModelSpec spec;
  spec.arch = Architecture::llama;
  spec.arch_name = "LlamaForCausalLM";
  spec.vocab = vocab;
  spec.hidden = hidden;
  spec.layers = layers;
  spec.heads = heads;
  spec.kv_heads = kv_heads;
  spec.head_dim = head_dim;
  spec.ffn = ffn;
  spec.max_context = max_context;
  spec.rms_eps = 1e-5f;
  spec.rope_theta = 10000.0f;
  return spec;
}

ModelSpec as_qwen3(ModelSpec spec) {
  spec.arch = Architecture::qwen3;
  spec.arch_name = "Qwen3ForCausalLM";
  spec.qk_norm = true;
  spec.rms_eps = 1e-6f;
  spec.rope_theta = 1000000.0f;
  spec.bos_token = 151643;
  spec.eos_tokens = {151645};
  return spec;
}

// Gemma 3 1B (google/gemma-3-1b-it's config): every sixth layer full, the rest sliding over 512 positions.
ModelSpec gemma3_1b() {
  ModelSpec spec = llama_shape(262144, 1152, 26, 4, 1, 256, 6912, 32768);
  spec.arch = Architecture::gemma3;
  spec.arch_name = "Gemma3ForCausalLM";
  spec.rms_eps = 1e-6f;
  spec.rope_theta = 1e6f;
  spec.local_rope_theta = 1e4f;
  spec.query_pre_attn_scalar = 256;
  spec.qk_norm = true;
  spec.tie_embeddings = true;
  spec.mlp_activation = GateActivation::gelu_tanh;
  spec.sliding_window = 512;
  for (uint32_t l = 0; l < spec.layers; ++l) spec.sliding_layers.push_back((l + 1) % 6 != 0);
  spec.bos_token = 2;
  spec.eos_tokens = {1, 106};
  return spec;
}

// Gemma 2 2B (google/gemma-2-2b-it's config): even layers sliding over 4096 positions, soft caps 50 and 30.
ModelSpec gemma2_2b() {
  ModelSpec spec = llama_shape(256000, 2304, 26, 8, 4, 256, 9216, 8192);
  spec.arch = Architecture::gemma2;
  spec.arch_name = "Gemma2ForCausalLM";
  spec.rms_eps = 1e-6f;
  spec.query_pre_attn_scalar = 256;
  spec.attention_softcap = 50.0f;
  spec.final_logit_softcap = 30.0f;
  spec.tie_embeddings = true;
  spec.mlp_activation = GateActivation::gelu_tanh;
  spec.sliding_window = 4096;
  for (uint32_t l = 0; l < spec.layers; ++l) spec.sliding_layers.push_back(l % 2 == 0);
  spec.bos_token = 2;
  spec.eos_tokens = {1, 107};
  return spec;
}

RopeScaling llama3_scaling(float factor) {
  RopeScaling scaling;
  scaling.llama3 = true;
  scaling.factor = factor;
  scaling.low_freq_factor = 1.0f;
  scaling.high_freq_factor = 4.0f;
  scaling.original_max_position = 8192;
  return scaling;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "small", "llama-3.2-1b", "qwen3-0.6b", "gemma-3-1b", "gemma-2-2b", "llama-3.1-8b", "qwen3-8b"};
}

ModelSpec preset_spec(const std::string& name, DType dtype) {
  ModelSpec spec;
  if (name == "tiny") {
    spec = llama_shape(512, 256, 4, 8, 2, 32, 688, 1024);
    spec.bos_token = 1;
    spec.eos_tokens = {2};
  } else if (name == "small") {
    spec = llama_shape(32000, 1024, 8, 16, 4, 64, 2816, 2048);
    spec.bos_token = 1;
    spec.eos_tokens = {2};
  } else if (name == "llama-3.2-1b") {
    spec = llama_shape(128256, 2048, 16, 32, 8, 64, 8192, 131072);
    spec.rope_theta = 500000.0f;
    spec.rope_scaling = llama3_scaling(32.0f);
    spec.tie_embeddings = true;
    spec.bos_token = 128000;
    spec.eos_tokens = {128001};
  } else if (name == "qwen3-0.6b") {
    spec = as_qwen3(llama_shape(151936, 1024, 28, 16, 8, 128, 3072, 40960));
    spec.tie_embeddings = true;
  } else if (name == "gemma-3-1b") {
    spec = gemma3_1b();
  } else if (name == "gemma-2-2b") {
    spec = gemma2_2b();
  } else if (name == "llama-3.1-8b") {
    spec = llama_shape(128256, 4096, 32, 32, 8, 128, 14336, 131072);
    spec.rope_theta = 500000.0f;
    spec.rope_scaling = llama3_scaling(8.0f);
    spec.bos_token = 128000;
    spec.eos_tokens = {128001};
  } else if (name == "qwen3-8b") {
    spec = as_qwen3(llama_shape(151936, 4096, 36, 32, 8, 128, 12288, 40960));
  } else {
    std::string names;
    for (const auto& known : preset_names()) names += (names.empty() ? "" : ", ") + known;
    throw InputError("unknown preset '" + name + "' (expected one of " + names + ")");
  }
  spec.dtype = dtype;
  if (spec.is_gemma()) spec.embedding_multiplier = gemma_embedding_scale(spec.hidden, dtype);
  return spec;
}

}  // namespace tilefire
