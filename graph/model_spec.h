#pragma once
// ModelSpec: the shape of a Llama-family decoder, read from a Hugging Face config.json or a preset.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/activation.h"  // GateActivation
#include "ops/dtype.h"
#include "tilefire/errors.h"  // InputError: every loader and parser error
#include "ops/rope.h"  // RopeScaling

namespace tilefire {

// phi3: Llama's layer with q/k/v stored as one qkv_proj and gate/up as one gate_up_proj (split on load).
// smollm3: Llama's layer, with RoPE left out on some layers (NoPE: `no_rope_layers`).
// granite: Llama's layer with four multipliers (embedding, residual, attention, logits: see ModelSpec).
// gemma2: Gemma 2: sandwich norms stored as (1 + w), GeGLU, a scaled embedding, every other layer sliding,
// soft caps on the attention scores and the final logits.
// gemma3: Gemma 3's text model: Gemma 2's layer with q/k norms and without (default) caps, five of six layers
// sliding with their own RoPE base.
// gemma: Gemma 1 (GemmaForCausalLM: gemma-2b, gemma-7b, CodeGemma): Llama's layer with norms stored as
// (1 + w), GeGLU and a scaled embedding; no window, no caps.
enum class Architecture : uint8_t { llama, mistral, qwen2, qwen3, phi3, smollm3, granite, gemma3, gemma2, gemma };

struct ModelSpec {
  Architecture arch = Architecture::llama;
  std::string arch_name;  // as in config.json, e.g. "LlamaForCausalLM"
  uint32_t vocab = 0;
  uint32_t hidden = 0;
  uint32_t layers = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;  // given, or hidden / heads
  uint32_t rotary_dim = 0;  // the leading dimensions of each q and k head RoPE rotates (Phi-4-mini: 3/4); 0: all
  uint32_t ffn = 0;       // intermediate_size
  uint32_t max_context = 0;  // max_position_embeddings
  // Sliding-window attention (Mistral, Phi-3, Qwen with use_sliding_window): a token in a sliding layer
  // sees the last `sliding_window` positions, itself included; sliding_layers[l] says whether layer l
  // slides (sized `layers` when sliding_window is set, empty otherwise). 0: every layer sees all before it.
  uint32_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // SmolLM3's NoPE layers: nope_layers[l] says layer l leaves q and k unrotated (sized `layers`, or empty:
  // every layer rotates).
  std::vector<bool> nope_layers;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_embeddings = false;
  bool qkv_bias = false;  // Qwen2: q/k/v projections carry biases
  bool qk_norm = false;   // Qwen3: per-head RMSNorm of q and k before RoPE
  // Granite's multipliers (1 for every other architecture): the embedding rows times embedding_multiplier;
  // each attention and MLP output times residual_multiplier before its residual add; attention scores
  // times attention_multiplier in place of 1/sqrt(head_dim) (0: that default); logits divided by
  // logits_scaling. Gemma sets embedding_multiplier too: gemma_embedding_scale.
  float embedding_multiplier = 1.0f;
  float residual_multiplier = 1.0f;
  float attention_multiplier = 0.0f;
  float logits_scaling = 1.0f;
  GateActivation mlp_activation = GateActivation::silu;  // the MLP's gate: SwiGLU, or GeGLU (Gemma)
  // Gemma 3: the RoPE base of its sliding layers (rope_local_base_freq), unscaled; the full layers use
  // rope_theta and rope_scaling. 0: every layer uses rope_theta and rope_scaling.
  float local_rope_theta = 0.0f;
  // Gemma 2 and 3: attention scores times query_pre_attn_scalar^-1/2 (0: not given; Gemma 1 has none).
  uint32_t query_pre_attn_scalar = 0;
  // Gemma's logit soft caps (soft_capped, ops/attention.h): the attention scores after their scale
  // (attn_logit_softcapping) and the logits (final_logit_softcapping); 0: none. Gemma 2 has both.
  float attention_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
  DType dtype = DType::f32;  // torch_dtype of the checkpoint (the loader checks every matrix against it)
  // The text model of a multimodal checkpoint (Gemma3ForConditionalGeneration: Gemma 3 4B, 12B, 27B;
  // Mistral3ForConditionalGeneration: Mistral Small 3.1, 3.2; LlavaForConditionalGeneration), its config
  // under config.json's text_config and its tensors under language_model.model.* (as published) or
  // model.language_model.* (as transformers >= 4.52 saves them). The image encoder is not read (Tilefire
  // takes text), and the logits are never soft-capped, as those classes compute them.
  bool multimodal_checkpoint = false;
  // Whether the LM head is the embedding is for the checkpoint to say (a Mistral3 config.json that states
  // no top-level tie_word_embeddings, over a text_config that does not tie: transformers 4.x and v5 read it
  // differently). Until the tensors are checked, tie_embeddings is false: the larger model, for plans.
  bool lm_head_tie_from_checkpoint = false;
  int32_t bos_token = -1;
  std::vector<int32_t> eos_tokens;

  uint32_t q_dim() const { return heads * head_dim; }
  uint32_t kv_dim() const { return kv_heads * head_dim; }
  uint32_t group() const { return heads / kv_heads; }  // query heads per KV head
  uint32_t rotated_dims() const { return rotary_dim ? rotary_dim : head_dim; }
  // The factor attention scores (q . k) are multiplied by before the softmax.
  float attention_scale() const;
  bool layer_rotates(uint32_t layer) const { return layer >= nope_layers.size() || !nope_layers[layer]; }
  // The window layer `layer`'s attention runs with (0: full causal attention).
  uint32_t attention_window(uint32_t layer) const {
    return sliding_window != 0 && layer < sliding_layers.size() && sliding_layers[layer] ? sliding_window : 0;
  }
  // The checkpoint holds self_attn.qkv_proj ([q_dim + 2 kv_dim, hidden]: q, k, v rows in turn) and
  // mlp.gate_up_proj ([2 ffn, hidden]: gate rows, then up), each read as its parts.
  bool fused_projections() const { return arch == Architecture::phi3; }
  // The Gemma family (Gemma 1, 2 and 3): (1 + w) norms, the embedding scaled by sqrt(hidden), GeGLU.
  bool is_gemma() const { return arch == Architecture::gemma || arch == Architecture::gemma2 || arch == Architecture::gemma3; }
  // Gemma 2's and 3's sandwich norms: each attention and MLP output normalised (post_attention_layernorm,
  // post_feedforward_layernorm) before its residual add, the MLP's input by pre_feedforward_layernorm.
  // Gemma 1's layer is Llama's (post_attention_layernorm normalises the MLP's input).
  bool sandwich_norms() const { return arch == Architecture::gemma2 || arch == Architecture::gemma3; }
  // Added to every RMSNorm weight on load: Gemma stores w and scales by (1 + w).
  float norm_weight_offset() const { return is_gemma() ? 1.0f : 0.0f; }
  // Whether layer `layer` rotates with local_rope_theta (a Gemma 3 sliding layer).
  bool layer_uses_local_rope(uint32_t layer) const {
    return local_rope_theta != 0.0f && layer < sliding_layers.size() && sliding_layers[layer];
  }
  uint64_t parameter_count() const;
};

// Whether `path` names something other than a regular file (a FIFO, a device, a socket): reading one
// would block or never end, so the readers of config and JSON files refuse it first. False when
// nothing is there (opening it then says so).
bool is_special_file(const std::filesystem::path& path);

// Parses config.json; throws InputError naming the file and key on anything missing or wrong.
ModelSpec parse_hf_config(const std::filesystem::path& config_json);
// Parses the text of a config.json; `origin` names it in messages.
ModelSpec parse_hf_config_text(const std::string& text, const std::string& origin);
// Gemma's embedding factor: sqrt(hidden) rounded to the checkpoint's dtype (transformers holds it as a
// float32 buffer and casts it to the embedding table's dtype before the product). Set as the spec's
// embedding_multiplier where its dtype is known: the config's, then the stored matrices' on load.
float gemma_embedding_scale(uint32_t hidden, DType dtype);

// Checks the spec's internal consistency (heads divide, head_dim even, ...); throws InputError.
void validate_spec(const ModelSpec& spec, const std::string& origin);

// Presets: preset_names(). Throws InputError for others.
ModelSpec preset_spec(const std::string& name, DType dtype = DType::f32);
std::vector<std::string> preset_names();

// The config.json text a Hugging Face checkpoint of this spec carries.
std::string to_hf_config_json(const ModelSpec& spec);

}  // namespace tilefire
