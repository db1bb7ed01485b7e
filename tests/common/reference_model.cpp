#include "tests/common/reference_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tilefire::testing {

namespace {

// y[n] = sum_k W[n, k] x[k], W given as doubles [N, K]
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, size_t n_out) {
  const size_t k_in = x.size();
  std::vector<double> y(n_out, 0.0);
  for (size_t n = 0; n < n_out; ++n) {
    double acc = 0;
    for (size_t k = 0; k < k_in; ++k) acc += w[n * k_in + k] * x[k];
    y[n] = acc;
  }
  return y;
}

// Gemma's norms scale by (1 + g) (`plus_one`), everyone else's by g.
std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& g, double eps, bool plus_one = false) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (plus_one ? 1.0 + g[i] : g[i]);
  return y;
}

double gelu_tanh(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

}  // namespace

ReferenceModel::ReferenceModel(const ModelSpec& spec, const WeightStore& weights, uint32_t context)
    : spec_(spec), weights_(weights) {
  // RoPE frequencies, with Llama 3's or LongRoPE's scaling, straight from the published formulas.
  const uint32_t hd = spec.rotary_dim ? spec.rotary_dim : spec.head_dim;  // the rotated leading dimensions
  if (context == 0) context = std::min(spec.max_context, 4096u);
  const RopeScaling& longrope = spec.rope_scaling;
  if (longrope.longrope) rope_magnitude_ = longrope.attention_factor;
  for (uint32_t i = 0; i < hd / 2; ++i) {
    double f = 1.0 / std::pow(double(spec.rope_theta), double(2 * i) / double(hd));
    if (longrope.longrope)  // LongRoPE: each frequency divided by its factor, long ones past the pretrained context
      f /= double(context > longrope.original_max_position ? longrope.long_factor.at(i) : longrope.short_factor.at(i));
    if (spec.rope_scaling.llama3) {
      const RopeScaling& s = spec.rope_scaling;
      const double pi = 3.14159265358979323846;
      const double wavelen = 2 * pi / f;
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    if (spec.rope_scaling.linear) f /= spec.rope_scaling.factor;  // linear: positions compressed by factor
    inv_freq_.push_back(f);
    if (spec.local_rope_theta != 0.0f) local_inv_freq_.push_back(1.0 / std::pow(double(spec.local_rope_theta), double(2 * i) / double(hd)));
  }
  reset();
}

const std::vector<double>& ReferenceModel::weight(const std::string& name) const {
  if (auto found = converted_.find(name); found != converted_.end()) return found->second;
  const TensorView* t = weights_.find(name);
  if (!t) throw std::runtime_error("reference model: missing tensor " + name);
  std::vector<double> values(t->numel());
  for (size_t i = 0; i < values.size(); ++i) values[i] = load_as_f32(t->data, t->dtype, i);
  return converted_.emplace(name, std::move(values)).first->second;
}

std::vector<double> ReferenceModel::forward(const std::vector<int32_t>& tokens) {
  std::vector<double> logits;
  for (int32_t t : tokens) logits = forward_token(t);
  return logits;
}

std::vector<double> ReferenceModel::forward_token(int32_t token) {
  const ModelSpec& s = spec_;
  const uint32_t hd = s.head_dim, H = s.heads, KV = s.kv_heads, group = H / KV;
  const uint32_t pos = position_++;
  const std::vector<double>& table = weight("model.embed_tokens.weight");
  std::vector<double> x(table.begin() + size_t(token) * s.hidden, table.begin() + size_t(token + 1) * s.hidden);
  // Granite (transformers' GraniteModel): inputs_embeds * embedding_multiplier; each layer's attention and
  // MLP output added as residual + output * residual_multiplier; scores scaled by attention_multiplier;
  // logits / logits_scaling. Every other architecture leaves them at 1 (the scale at 1/sqrt(head_dim)).
  // Gemma 3 (transformers' Gemma3TextModel): inputs_embeds * sqrt(hidden_size), that factor cast to the
  // weights' dtype; norms by (1 + w); sandwich norms; GeGLU; scores by query_pre_attn_scalar^-1/2; its
  // sliding layers rotate at rope_local_base_freq. Gemma 2 (transformers' Gemma2Model) as Gemma 3 without
  // q/k norms or a local RoPE base, with its soft caps: scores (after the scale, before the mask) and logits
  // each as cap * tanh(value / cap). Gemma 1 (transformers' GemmaModel): Llama's layer with Gemma's scaled
  // embedding, (1 + w) norms and GeGLU, scores by 1/sqrt(head_dim).
  const bool sandwich = s.arch == Architecture::gemma3 || s.arch == Architecture::gemma2;
  const bool gemma = sandwich || s.arch == Architecture::gemma;
  double embed_scale = s.embedding_multiplier;
  if (gemma) {
    const float root = float(std::sqrt(double(s.hidden)));
    embed_scale = s.dtype == DType::bf16 ? bf16_to_f32(f32_to_bf16(root)) : s.dtype == DType::f16 ? f16_to_f32(f32_to_f16(root)) : root;
  }
  for (double& value : x) value *= embed_scale;

  // Each head's first `rotated` dimensions (Phi-3's partial rotation: the rest passed through), as a head
  // of their own: element i pairs with i + rotated / 2.
  const uint32_t rotated = s.rotary_dim ? s.rotary_dim : hd;
  auto rotate = [&](double* head, const std::vector<double>& inv_freq) {
    for (uint32_t i = 0; i < rotated / 2; ++i) {
      const double angle = double(pos) * inv_freq[i];
      const double c = std::cos(angle) * rope_magnitude_, sn = std::sin(angle) * rope_magnitude_;
      const double a = head[i], b = head[i + rotated / 2];
      head[i] = a * c - b * sn;
      head[i + rotated / 2] = b * c + a * sn;
    }
  };
  auto head_norm = [&](double* head, const std::vector<double>& g) {
    std::vector<double> h(head, head + hd);
    h = rms_norm(h, g, s.rms_eps, gemma);
    std::copy(h.begin(), h.end(), head);
  };

  for (uint32_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<double> xn = rms_norm(x, weight(p + "input_layernorm.weight"), s.rms_eps, gemma);
    std::vector<double> q, k, v;
    if (s.fused_projections()) {  // Phi-3: one projection's output sliced into q, k and v in turn
      const std::vector<double> qkv = matvec(weight(p + "self_attn.qkv_proj.weight"), xn, size_t(H + 2 * KV) * hd);
      q.assign(qkv.begin(), qkv.begin() + size_t(H) * hd);
      k.assign(qkv.begin() + size_t(H) * hd, qkv.begin() + size_t(H + KV) * hd);
      v.assign(qkv.begin() + size_t(H + KV) * hd, qkv.end());
    } else {
      q = matvec(weight(p + "self_attn.q_proj.weight"), xn, size_t(H) * hd);
      k = matvec(weight(p + "self_attn.k_proj.weight"), xn, size_t(KV) * hd);
      v = matvec(weight(p + "self_attn.v_proj.weight"), xn, size_t(KV) * hd);
    }
    if (s.qkv_bias) {
      const auto &bq = weight(p + "self_attn.q_proj.bias"), &bk = weight(p + "self_attn.k_proj.bias"), &bv = weight(p + "self_attn.v_proj.bias");
      for (size_t i = 0; i < q.size(); ++i) q[i] += bq[i];
      for (size_t i = 0; i < k.size(); ++i) k[i] += bk[i], v[i] += bv[i];
    }
    if (s.qk_norm) {
      const auto &gq = weight(p + "self_attn.q_norm.weight"), &gk = weight(p + "self_attn.k_norm.weight");
      for (uint32_t h = 0; h < H; ++h) head_norm(q.data() + h * hd, gq);
      for (uint32_t h = 0; h < KV; ++h) head_norm(k.data() + h * hd, gk);
    }
    // SmolLM3's NoPE layers leave q and k as they are (transformers' `if self.use_rope`).
    const bool nope = !s.nope_layers.empty() && s.nope_layers.at(l);
    const bool slides = s.sliding_window != 0 && s.sliding_layers.at(l);
    const std::vector<double>& inv_freq = s.arch == Architecture::gemma3 && slides ? local_inv_freq_ : inv_freq_;
    for (uint32_t h = 0; h < H && !nope; ++h) rotate(q.data() + h * hd, inv_freq);
    for (uint32_t h = 0; h < KV && !nope; ++h) rotate(k.data() + h * hd, inv_freq);
    k_cache_[l].insert(k_cache_[l].end(), k.begin(), k.end());
    v_cache_[l].insert(v_cache_[l].end(), v.begin(), v.end());

    std::vector<double> attn(size_t(H) * hd, 0.0);
    const double scale = sandwich ? 1.0 / std::sqrt(double(s.query_pre_attn_scalar))
                         : s.attention_multiplier != 0.0f ? double(s.attention_multiplier) : 1.0 / std::sqrt(double(hd));
    // transformers' sliding-window mask: key j is seen when j > pos - window, on the layers that slide.
    auto masked = [&](uint32_t j) { return slides && int64_t(j) <= int64_t(pos) - int64_t(s.sliding_window); };
    for (uint32_t h = 0; h < H; ++h) {
      const uint32_t kvh = h / group;
      std::vector<double> scores(pos + 1);
      double max_score = -INFINITY;
      for (uint32_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (uint32_t d = 0; d < hd; ++d) dot += q[h * hd + d] * k_cache_[l][(size_t(j) * KV + kvh) * hd + d];
        double score = dot * scale;
        if (s.attention_softcap != 0.0f) score = double(s.attention_softcap) * std::tanh(score / double(s.attention_softcap));
        scores[j] = masked(j) ? -INFINITY : score;
        max_score = std::max(max_score, scores[j]);
      }
      double sum = 0;
      for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
      for (uint32_t j = 0; j <= pos; ++j)
        for (uint32_t d = 0; d < hd; ++d) attn[h * hd + d] += scores[j] / sum * v_cache_[l][(size_t(j) * KV + kvh) * hd + d];
    }
    std::vector<double> o = matvec(weight(p + "self_attn.o_proj.weight"), attn, s.hidden);
    if (sandwich) o = rms_norm(o, weight(p + "post_attention_layernorm.weight"), s.rms_eps, true);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i] * double(s.residual_multiplier);

    std::vector<double> hn =
        rms_norm(x, weight(p + (sandwich ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight")), s.rms_eps, gemma);
    std::vector<double> gate, up;
    if (s.fused_projections()) {  // Phi-3: gate_up_proj's output chunked in two, gate first
      const std::vector<double> gate_up = matvec(weight(p + "mlp.gate_up_proj.weight"), hn, size_t(2) * s.ffn);
      gate.assign(gate_up.begin(), gate_up.begin() + s.ffn);
      up.assign(gate_up.begin() + s.ffn, gate_up.end());
    } else {
      gate = matvec(weight(p + "mlp.gate_proj.weight"), hn, s.ffn);
      up = matvec(weight(p + "mlp.up_proj.weight"), hn, s.ffn);
    }
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = (gemma ? gelu_tanh(gate[i]) : gate[i] / (1.0 + std::exp(-gate[i]))) * up[i];
    std::vector<double> down = matvec(weight(p + "mlp.down_proj.weight"), gate, s.hidden);
    if (sandwich) down = rms_norm(down, weight(p + "post_feedforward_layernorm.weight"), s.rms_eps, true);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i] * double(s.residual_multiplier);
  }
  std::vector<double> xn = rms_norm(x, weight("model.norm.weight"), s.rms_eps, gemma);
  std::vector<double> logits = matvec(weight(s.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"), xn, s.vocab);
  for (double& logit : logits) {
    logit /= double(s.logits_scaling);
    if (s.final_logit_softcap != 0.0f) logit = double(s.final_logit_softcap) * std::tanh(logit / double(s.final_logit_softcap));
  }
  return logits;
}

}  // namespace tilefire::testing
