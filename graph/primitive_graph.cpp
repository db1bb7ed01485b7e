// build_primitive_graph: one step of a Llama-family decoder, op by op, unfused.
#include "graph/primitive_graph.h"

#include <algorithm>

#include "graph/compile.h"
#include "ops/rope.h"
#include "ops/tile.h"  // sliding_cache_rows

namespace tilefire {

std::string_view primitive_name(Primitive op) {
  switch (op) {
    case Primitive::embed: return "embed";
    case Primitive::rmsnorm: return "rmsnorm";
    case Primitive::matmul: return "matmul";
    case Primitive::bias_add: return "bias_add";
    case Primitive::head_rmsnorm: return "head_rmsnorm";
    case Primitive::rope: return "rope";
    case Primitive::kv_append: return "kv_append";
    case Primitive::attention: return "attention";
    case Primitive::add: return "add";
    case Primitive::swiglu: return "swiglu";
    case Primitive::last_token: return "last_token";
  }
  return "?";
}

std::string kv_cache_slot_name(uint32_t layer, bool key) {
  return "layers." + std::to_string(layer) + (key ? ".k_cache" : ".v_cache");
}

namespace {

class PrimitiveBuilder {
 public:
  explicit PrimitiveBuilder(PrimitiveGraph& g) : g_(g) {}

  uint32_t slot(SlotKind kind, DType dtype, uint64_t rows, uint64_t cols, const std::string& name) {
    g_.slots.push_back({kind, dtype, rows, cols, 0, name});
    return uint32_t(g_.slots.size() - 1);
  }
  uint32_t matrix(const std::string& name, uint64_t rows, uint64_t cols) {
    return slot(SlotKind::weight, g_.spec.dtype, rows, cols, name);
  }
  uint32_t vector_f32(const std::string& name, uint64_t n) { return slot(SlotKind::weight_f32, DType::f32, 1, n, name); }
  // An RMSNorm's weight, with the architecture's offset added on load (Gemma's 1 + w).
  uint32_t norm_weight(const std::string& name, uint64_t n) {
    const uint32_t id = vector_f32(name, n);
    g_.slots[id].value_offset = g_.spec.norm_weight_offset();
    return id;
  }

  // Adds a node; returns its output value (a new value named `out_name` of `out_cols` columns).
  uint32_t node(Primitive op, uint16_t layer, std::vector<uint32_t> inputs, std::vector<uint32_t> slots,
                const std::string& out_name, uint32_t out_cols, float eps = 0, uint32_t rows = 0) {
    uint32_t out = kNoValue;
    if (!out_name.empty()) {
      g_.values.push_back({out_name, out_cols, rows});
      out = uint32_t(g_.values.size() - 1);
    }
    g_.nodes.push_back({op, layer, std::move(inputs), out, std::move(slots), eps});
    return out;
  }
  // The last node's output times `factor` (an embed or a matmul).
  uint32_t scaled(uint32_t value, float factor) {
    g_.nodes.back().scale = factor;
    return value;
  }

 private:
  PrimitiveGraph& g_;
};

}  // namespace

uint32_t PrimitiveGraph::cache_rows(uint32_t layer) const {
  return step_tokens == 0 ? max_context : sliding_cache_rows(spec.attention_window(layer), step_tokens, max_context);
}

PrimitiveGraph build_primitive_graph(const ModelSpec& spec, const CompileOptions& options) {
  PrimitiveGraph g;
  g.spec = spec;
  g.max_context = options.max_context ? options.max_context : spec.max_context;
  g.step_tokens = !options.sliding_rings ? 0 : options.step_tokens != 0 ? options.step_tokens : std::max(1u, options.tokens);
  PrimitiveBuilder b(g);
  const uint32_t hd = spec.head_dim, hidden = spec.hidden;

  // [rotated dims / 2] (a head's leading rotary_dim where only those rotate, as their own head_dim: the
  // exponent is over them); LongRoPE's factors are chosen by the context the KV caches hold (ops/rope.h).
  // Gemma 3's sliding layers rotate at their own base, unscaled (a second table).
  auto rope_table = [&](float theta, const RopeScaling& scaling, const std::string& name) {
    const std::vector<float> inv_freq = rope_inverse_frequencies(spec.rotated_dims(), theta, scaling, g.max_context);
    const uint32_t slot = b.slot(SlotKind::constant, DType::f32, 1, inv_freq.size(), name);
    g.slots[slot].constant_offset = g.constants.size();
    g.constants.insert(g.constants.end(), inv_freq.begin(), inv_freq.end());
    return slot;
  };
  const uint32_t rope = rope_table(spec.rope_theta, spec.rope_scaling, kRopeSlotName);
  const uint32_t local_rope = spec.local_rope_theta != 0.0f ? rope_table(spec.local_rope_theta, RopeScaling{}, std::string(kRopeSlotName) + ".local") : rope;

  const uint32_t table = b.matrix("model.embed_tokens.weight", spec.vocab, hidden);
  uint32_t x = b.scaled(b.node(Primitive::embed, 0, {}, {table}, "layers.0.x", hidden), spec.embedding_multiplier);  // [tokens, hidden]

  for (uint32_t l = 0; l < spec.layers; ++l) {
    const std::string w = "model.layers." + std::to_string(l) + ".";
    const std::string a = "layers." + std::to_string(l) + ".";
    const uint16_t layer = uint16_t(l);
    const float eps = spec.rms_eps;

    uint32_t xn = b.node(Primitive::rmsnorm, layer, {x}, {b.norm_weight(w + "input_layernorm.weight", hidden)}, a + "xn", hidden, eps);
    uint32_t q = b.node(Primitive::matmul, layer, {xn}, {b.matrix(w + "self_attn.q_proj.weight", spec.q_dim(), hidden)}, a + "q_proj", spec.q_dim());
    uint32_t k = b.node(Primitive::matmul, layer, {xn}, {b.matrix(w + "self_attn.k_proj.weight", spec.kv_dim(), hidden)}, a + "k_proj", spec.kv_dim());
    uint32_t v = b.node(Primitive::matmul, layer, {xn}, {b.matrix(w + "self_attn.v_proj.weight", spec.kv_dim(), hidden)}, a + "v_proj", spec.kv_dim());
    if (spec.qkv_bias) {
      q = b.node(Primitive::bias_add, layer, {q}, {b.vector_f32(w + "self_attn.q_proj.bias", spec.q_dim())}, a + "q_bias", spec.q_dim());
      k = b.node(Primitive::bias_add, layer, {k}, {b.vector_f32(w + "self_attn.k_proj.bias", spec.kv_dim())}, a + "k_bias", spec.kv_dim());
      v = b.node(Primitive::bias_add, layer, {v}, {b.vector_f32(w + "self_attn.v_proj.bias", spec.kv_dim())}, a + "v_bias", spec.kv_dim());
    }
    if (spec.qk_norm) {
      q = b.node(Primitive::head_rmsnorm, layer, {q}, {b.norm_weight(w + "self_attn.q_norm.weight", hd)}, a + "q_norm", spec.q_dim(), eps);
      k = b.node(Primitive::head_rmsnorm, layer, {k}, {b.norm_weight(w + "self_attn.k_norm.weight", hd)}, a + "k_norm", spec.kv_dim(), eps);
    }
    const uint32_t layer_rope = spec.layer_uses_local_rope(l) ? local_rope : rope;
    q = b.node(Primitive::rope, layer, {q}, {layer_rope}, a + "q", spec.q_dim());
    k = b.node(Primitive::rope, layer, {k}, {layer_rope}, a + "k", spec.kv_dim());
    const uint64_t cache_rows = uint64_t(std::max(1u, options.sequences)) * spec.kv_heads * g.cache_rows(l);  // [sequences, kv_heads, rows]
    const uint32_t k_cache = b.slot(SlotKind::kv_cache, DType::f32, cache_rows, hd, kv_cache_slot_name(l, true));
    const uint32_t v_cache = b.slot(SlotKind::kv_cache, DType::f32, cache_rows, hd, kv_cache_slot_name(l, false));
    g.slots[k_cache].cache_rows = g.slots[v_cache].cache_rows = g.cache_rows(l);
    b.node(Primitive::kv_append, layer, {k}, {k_cache}, "", 0);
    b.node(Primitive::kv_append, layer, {v}, {v_cache}, "", 0);
    uint32_t attn = b.node(Primitive::attention, layer, {q}, {k_cache, v_cache}, a + "attn", spec.q_dim());
    uint32_t o = b.node(Primitive::matmul, layer, {attn}, {b.matrix(w + "self_attn.o_proj.weight", hidden, spec.q_dim())}, a + "o_proj", hidden);
    o = b.scaled(o, spec.residual_multiplier);
    // Gemma's sandwich norms: the attention's and the MLP's outputs normalised before their residual add;
    // its post_attention_layernorm is that, and pre_feedforward_layernorm is the MLP's input norm.
    const bool sandwich = spec.sandwich_norms();
    if (sandwich)
      o = b.node(Primitive::rmsnorm, layer, {o}, {b.norm_weight(w + "post_attention_layernorm.weight", hidden)}, a + "o_norm", hidden, eps);
    uint32_t h = b.node(Primitive::add, layer, {x, o}, {}, a + "h", hidden);

    const std::string mlp_norm = sandwich ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
    uint32_t hn = b.node(Primitive::rmsnorm, layer, {h}, {b.norm_weight(w + mlp_norm, hidden)}, a + "hn", hidden, eps);
    uint32_t gate = b.node(Primitive::matmul, layer, {hn}, {b.matrix(w + "mlp.gate_proj.weight", spec.ffn, hidden)}, a + "gate", spec.ffn);
    uint32_t up = b.node(Primitive::matmul, layer, {hn}, {b.matrix(w + "mlp.up_proj.weight", spec.ffn, hidden)}, a + "up", spec.ffn);
    uint32_t act = b.node(Primitive::swiglu, layer, {gate, up}, {}, a + "ffn", spec.ffn);
    uint32_t down = b.node(Primitive::matmul, layer, {act}, {b.matrix(w + "mlp.down_proj.weight", hidden, spec.ffn)}, a + "down", hidden);
    down = b.scaled(down, spec.residual_multiplier);
    if (sandwich)
      down = b.node(Primitive::rmsnorm, layer, {down}, {b.norm_weight(w + "post_feedforward_layernorm.weight", hidden)}, a + "down_norm", hidden, eps);
    x = b.node(Primitive::add, layer, {h, down}, {}, "layers." + std::to_string(l + 1) + ".x", hidden);
  }

  const uint16_t head_layer = uint16_t(spec.layers);
  // Only the last token is sampled; a batched decode samples every token (each the next of its sequence),
  // or its last logit_rows (a prompt's chunk before the decoding rows), and a prompt's logprobs read every
  // token's row.
  const uint32_t rows = lm_head_rows(options);
  uint32_t last = b.node(Primitive::last_token, head_layer, {x}, {}, "final.last", hidden, 0, rows);
  uint32_t normed = b.node(Primitive::rmsnorm, head_layer, {last}, {b.norm_weight("model.norm.weight", hidden)}, "final.norm", hidden, spec.rms_eps, rows);
  const uint32_t head = spec.tie_embeddings ? table : b.matrix("lm_head.weight", spec.vocab, hidden);
  // Granite divides the logits by logits_scaling: here times its reciprocal (exact for its published 8
  // and 16, powers of two; within an ulp of the quotient otherwise).
  b.scaled(b.node(Primitive::matmul, head_layer, {normed}, {head}, kLogitsSlotName, spec.vocab, 0, rows),
           float(1.0 / double(spec.logits_scaling)));
  return g;
}

}  // namespace tilefire
