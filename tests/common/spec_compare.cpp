#include "tests/common/spec_compare.h"

#include <gtest/gtest.h>

namespace tilefire::testing {

void expect_same_spec(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.arch_name, b.arch_name);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rotary_dim, b.rotary_dim);
  EXPECT_EQ(a.ffn, b.ffn);
  EXPECT_EQ(a.max_context, b.max_context);
  EXPECT_EQ(a.rms_eps, b.rms_eps);  // exact: the round trip must not drift
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.llama3, b.rope_scaling.llama3);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position, b.rope_scaling.original_max_position);
  EXPECT_EQ(a.rope_scaling.longrope, b.rope_scaling.longrope);
  EXPECT_EQ(a.rope_scaling.short_factor, b.rope_scaling.short_factor);
  EXPECT_EQ(a.rope_scaling.long_factor, b.rope_scaling.long_factor);
  EXPECT_EQ(a.rope_scaling.attention_factor, b.rope_scaling.attention_factor);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.sliding_layers, b.sliding_layers);
  EXPECT_EQ(a.nope_layers, b.nope_layers);
  EXPECT_EQ(a.embedding_multiplier, b.embedding_multiplier);
  EXPECT_EQ(a.residual_multiplier, b.residual_multiplier);
  EXPECT_EQ(a.attention_scale(), b.attention_scale());
  EXPECT_EQ(a.logits_scaling, b.logits_scaling);
    EXPECT_EQ(a.mlp_activation, b.mlp_activation);
  EXPECT_EQ(a.local_rope_theta, b.local_rope_theta);
  EXPECT_EQ(a.query_pre_attn_scalar, b.query_pre_attn_scalar);
  EXPECT_EQ(a.attention_softcap, b.attention_softcap);
  EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
  EXPECT_EQ(a.rope_scaling.linear, b.rope_scaling.linear);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.bos_token, b.bos_token);
  EXPECT_EQ(a.eos_tokens, b.eos_tokens);
  EXPECT_EQ(a.multimodal_checkpoint, b.multimodal_checkpoint);
  EXPECT_EQ(a.lm_head_tie_from_checkpoint, b.lm_head_tie_from_checkpoint);
}

}  // namespace tilefire::testing
