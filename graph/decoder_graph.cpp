// build_decoder_graph: the fused op nodes of one step of a Llama-family decoder.
//
// Per layer l (x_l is the residual stream entering it, [tokens, hidden]):
//   qkv_projection    q_l = rope(qnorm(rmsnorm(x_l) Wq + bq)), k/v appended to the cache
//   causal_attention  a_l = attention(q_l, cache_l)                      [tokens, heads * head_dim]
//   matmul_residual   h_l = x_l + a_l Wo^T                               [tokens, hidden]
//   gate_up_swiglu    f_l = silu(rmsnorm(h_l) Wg^T) * (rmsnorm(h_l) Wu^T) [tokens, ffn]
//   matmul_residual   x_{l+1} = h_l + f_l Wd^T                           [tokens, hidden]
// then lm_head on the last token. Every activation has its own slot (single assignment per step), so the
// only hazards between tiles of one step are read-after-write, which the region analysis covers.
#include <algorithm>
#include <cmath>

#include "graph/compile.h"
#include "ops/all_ops.h"

namespace tilefire {

std::string kv_cache_slot_name(uint32_t layer, bool key) {
  return "layers." + std::to_string(layer) + (key ? ".k_cache" : ".v_cache");
}

namespace {

uint32_t round_up(uint32_t value, uint32_t multiple) { return (value + multiple - 1) / multiple * multiple; }

class GraphBuilder {
 public:
  GraphBuilder(const ModelSpec& spec, const CompileOptions& options) : spec_(spec), options_(options) {}

  uint32_t weight(const std::string& name, uint64_t rows, uint64_t cols) {
    return add_slot({SlotKind::weight, spec_.dtype, rows, cols, 0, name});
  }
  uint32_t vector_f32(const std::string& name, uint64_t n) {
    return add_slot({SlotKind::weight_f32, DType::f32, 1, n, 0, name});
  }
  uint32_t activation(const std::string& name, uint64_t cols, uint64_t rows = 0) {
    return add_slot({SlotKind::activation, DType::f32, rows ? rows : options_.tokens, cols, 0, name});
  }
  uint32_t kv_cache(uint32_t layer, bool key, uint32_t max_context) {
    return add_slot({SlotKind::kv_cache, DType::f32, uint64_t(spec_.kv_heads) * max_context, spec_.head_dim, 0,
                     kv_cache_slot_name(layer, key)});
  }
  uint32_t constant(const std::string& name, const std::vector<float>& values, std::vector<float>& pool) {
    uint32_t id = add_slot({SlotKind::constant, DType::f32, 1, values.size(), pool.size(), name});
    pool.insert(pool.end(), values.begin(), values.end());
    return id;
  }

  // Matmul-like nodes: a width that gives about tiles_per_worker tiles per worker, a multiple of 16
  // weight rows (whole cache lines of bf16 rows), at most max_tile_rows.
  uint32_t matmul_tile_width(uint32_t rows) const {
    uint32_t target = std::max(1u, options_.workers * options_.tiles_per_worker);
    uint32_t width = round_up((rows + target - 1) / target, 16);
    return std::clamp(width, 16u, std::max(16u, options_.max_tile_rows));
  }

  OpGraph graph;

 private:
  uint32_t add_slot(SlotDesc slot) {
    graph.slots.push_back(std::move(slot));
    return uint32_t(graph.slots.size() - 1);
  }
  const ModelSpec& spec_;
  const CompileOptions& options_;
};

}  // namespace

OpGraph build_decoder_graph(const ModelSpec& spec, const CompileOptions& options) {
  if (options.tokens == 0) throw std::runtime_error("compile: a step needs at least one token");
  const uint32_t max_context = options.max_context ? options.max_context : spec.max_context;
  GraphBuilder b(spec, options);
  std::vector<float> constants;
  const uint32_t hd = spec.head_dim;

  const uint32_t rope = b.constant(kRopeSlotName, rope_inverse_frequencies(hd, spec.rope_theta, spec.rope_scaling), constants);
  const uint32_t embed_table = b.weight("model.embed_tokens.weight", spec.vocab, spec.hidden);

  uint32_t x = b.activation("layers.0.x", spec.hidden);  // [tokens, hidden]
  {
    EmbedParams p{embed_table, x, spec.vocab, spec.hidden, spec.dtype};
    b.graph.nodes.push_back({OpParams::make(OpCode::embed, 0, p), std::max(1u, round_up(spec.hidden / std::max(1u, options.workers), 8)), {}});
  }

  const uint32_t group = spec.group();
  for (uint32_t l = 0; l < spec.layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    const std::string act = "layers." + std::to_string(l) + ".";
    const uint16_t layer = uint16_t(l);

    QkvProjectionParams qkv;
    qkv.x = x;
    qkv.norm_weight = b.vector_f32(prefix + "input_layernorm.weight", spec.hidden);
    qkv.wq = b.weight(prefix + "self_attn.q_proj.weight", spec.q_dim(), spec.hidden);
    qkv.wk = b.weight(prefix + "self_attn.k_proj.weight", spec.kv_dim(), spec.hidden);
    qkv.wv = b.weight(prefix + "self_attn.v_proj.weight", spec.kv_dim(), spec.hidden);
    if (spec.qkv_bias) {
      qkv.bq = b.vector_f32(prefix + "self_attn.q_proj.bias", spec.q_dim());
      qkv.bk = b.vector_f32(prefix + "self_attn.k_proj.bias", spec.kv_dim());
      qkv.bv = b.vector_f32(prefix + "self_attn.v_proj.bias", spec.kv_dim());
    }
    if (spec.qk_norm) {
      qkv.q_norm = b.vector_f32(prefix + "self_attn.q_norm.weight", hd);
      qkv.k_norm = b.vector_f32(prefix + "self_attn.k_norm.weight", hd);
    }
    qkv.rope_inv_freq = rope;
    qkv.q_out = b.activation(act + "q", spec.q_dim());
    qkv.k_cache = b.kv_cache(l, true, max_context);
    qkv.v_cache = b.kv_cache(l, false, max_context);
    qkv.hidden = spec.hidden;
    qkv.heads = spec.heads;
    qkv.kv_heads = spec.kv_heads;
    qkv.head_dim = hd;
    qkv.max_context = max_context;
    qkv.eps = spec.rms_eps;
    qkv.wdtype = spec.dtype;
    const uint32_t qkv_heads = spec.heads + 2 * spec.kv_heads;
    const uint32_t qkv_width = std::max(1u, b.matmul_tile_width(qkv_heads * hd) / hd);
    b.graph.nodes.push_back({OpParams::make(OpCode::qkv_projection, layer, qkv), qkv_width, QkvProjectionOp::tile_breaks(qkv)});

    CausalAttentionParams attn;
    attn.q = qkv.q_out;
    attn.k_cache = qkv.k_cache;
    attn.v_cache = qkv.v_cache;
    attn.out = b.activation(act + "attn", spec.q_dim());
    attn.heads = spec.heads;
    attn.kv_heads = spec.kv_heads;
    attn.head_dim = hd;
    attn.max_context = max_context;
    attn.scale = float(1.0 / std::sqrt(double(hd)));
    // Whole GQA groups per tile when there are enough KV heads to keep every worker busy; otherwise split
    // groups (each tile then reads its KV head again, which costs little at these sizes).
    const uint32_t pieces_per_group = std::clamp((2 * options.workers + spec.kv_heads - 1) / spec.kv_heads, 1u, group);
    std::vector<uint32_t> group_breaks;
    for (uint32_t kv = 1; kv < spec.kv_heads; ++kv) group_breaks.push_back(kv * group);
    b.graph.nodes.push_back({OpParams::make(OpCode::causal_attention, layer, attn),
                             (group + pieces_per_group - 1) / pieces_per_group, group_breaks});

    MatmulResidualParams o_proj;
    o_proj.x = attn.out;
    o_proj.weight = b.weight(prefix + "self_attn.o_proj.weight", spec.hidden, spec.q_dim());
    o_proj.residual = x;
    o_proj.out = b.activation(act + "h", spec.hidden);
    o_proj.K = spec.q_dim();
    o_proj.N = spec.hidden;
    o_proj.wdtype = spec.dtype;
    b.graph.nodes.push_back({OpParams::make(OpCode::matmul_residual, layer, o_proj), b.matmul_tile_width(spec.hidden), {}});

    GateUpSwigluParams mlp;
    mlp.x = o_proj.out;
    mlp.norm_weight = b.vector_f32(prefix + "post_attention_layernorm.weight", spec.hidden);
    mlp.w_gate = b.weight(prefix + "mlp.gate_proj.weight", spec.ffn, spec.hidden);
    mlp.w_up = b.weight(prefix + "mlp.up_proj.weight", spec.ffn, spec.hidden);
    mlp.out = b.activation(act + "ffn", spec.ffn);
    mlp.hidden = spec.hidden;
    mlp.ffn = spec.ffn;
    mlp.eps = spec.rms_eps;
    mlp.max_tile = b.matmul_tile_width(spec.ffn);
    mlp.wdtype = spec.dtype;
    b.graph.nodes.push_back({OpParams::make(OpCode::gate_up_swiglu, layer, mlp), mlp.max_tile, {}});

    MatmulResidualParams down;
    down.x = mlp.out;
    down.weight = b.weight(prefix + "mlp.down_proj.weight", spec.hidden, spec.ffn);
    down.residual = o_proj.out;
    down.out = b.activation("layers." + std::to_string(l + 1) + ".x", spec.hidden);
    down.K = spec.ffn;
    down.N = spec.hidden;
    down.wdtype = spec.dtype;
    b.graph.nodes.push_back({OpParams::make(OpCode::matmul_residual, layer, down), b.matmul_tile_width(spec.hidden), {}});
    x = down.out;
  }

  LmHeadParams head;
  head.x = x;
  head.norm_weight = b.vector_f32("model.norm.weight", spec.hidden);
  head.weight = spec.tie_embeddings ? embed_table : b.weight("lm_head.weight", spec.vocab, spec.hidden);
  head.logits = b.activation(kLogitsSlotName, spec.vocab, 1);
  head.hidden = spec.hidden;
  head.vocab = spec.vocab;
  head.eps = spec.rms_eps;
  head.wdtype = spec.dtype;
  b.graph.nodes.push_back({OpParams::make(OpCode::lm_head, uint16_t(spec.layers), head), b.matmul_tile_width(spec.vocab), {}});

  b.graph.constants = std::move(constants);
  return std::move(b.graph);
}

}  // namespace tilefire
