// The fuse pass: which fused ops a step becomes, what each fused op absorbed, and the error when a
// primitive is left that no fused op covers.
#include <gtest/gtest.h>

#include "graph/compile.h"
#include "graph/primitive_graph.h"
#include "ops/all_ops.h"

namespace tilefire::testing {
namespace {

CompileOptions options_for(uint32_t workers) {
  CompileOptions o;
  o.workers = workers;
  o.max_context = 32;
  return o;
}

std::string fused_error(const PrimitiveGraph& g) {
  try {
    fuse_primitive_graph(g, options_for(2));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Fuse, LlamaStepBecomesFiveOpsPerLayer) {
  const ModelSpec spec = preset_spec("tiny");
  const PrimitiveGraph primitives = build_primitive_graph(spec, options_for(2));
  const OpGraph fused = fuse_primitive_graph(primitives, options_for(2));
  std::vector<OpCode> expected = {OpCode::embed};
  for (uint32_t l = 0; l < spec.layers; ++l)
    for (OpCode op : {OpCode::qkv_projection, OpCode::causal_attention, OpCode::matmul_residual, OpCode::gate_up_swiglu,
                      OpCode::matmul_residual})
      expected.push_back(op);
  expected.push_back(OpCode::lm_head);
  ASSERT_EQ(fused.nodes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(fused.nodes[i].params.op, expected[i]) << "node " << i;
  // 22 primitives per layer (norm, 3 matmuls, 2 ropes, 2 appends, attention, o, add, norm, gate, up, swiglu,
  // down, add) collapse into 5 fused ops; the normalised inputs and raw projections never get a slot.
  EXPECT_GT(primitives.nodes.size(), 3 * fused.nodes.size());
  for (const SlotDesc& slot : fused.slots) {
    if (slot.kind != SlotKind::activation) continue;
    EXPECT_EQ(slot.name.find(".xn"), std::string::npos) << slot.name;
    EXPECT_EQ(slot.name.find("_proj"), std::string::npos) << slot.name;
  }
}

// Split-KV attention: by default a decode step splits when the per-head tiles leave workers idle (a GPU's
// SMs), into chunks that fill the workers; --kv-splits forces a count or (1) none; a prefill never splits.
TEST(Fuse, DecodeAttentionSplitsOverKvPositionsWhenWorkersOutnumberHeads) {
  const ModelSpec spec = preset_spec("llama-3.2-1b");  // 32 query heads, 8 KV heads
  auto attention_ops = [&](uint32_t workers, uint32_t tokens, uint32_t kv_splits) {
    CompileOptions o;
    o.workers = workers;
    o.tokens = tokens;
    o.max_context = 4096;
    o.kv_splits = kv_splits;
    const OpGraph fused = fuse_primitive_graph(build_primitive_graph(spec, o), o);
    std::vector<OpParams> ops;
    for (const OpNode& node : fused.nodes)
      if (node.params.layer == 0 && (node.params.op == OpCode::causal_attention || node.params.op == OpCode::attention_chunk ||
                                     node.params.op == OpCode::attention_merge))
        ops.push_back(node.params);
    return ops;
  };
  std::vector<OpParams> gpu = attention_ops(132, 1, 0);
  ASSERT_EQ(gpu.size(), 2u);
  ASSERT_EQ(gpu[0].op, OpCode::attention_chunk);
  EXPECT_EQ(gpu[0].as<AttentionChunkParams>().chunks, 17u);  // ceil(132 workers / 8 KV heads)
  ASSERT_EQ(gpu[1].op, OpCode::attention_merge);
  EXPECT_EQ(gpu[1].as<AttentionMergeParams>().chunks, 17u);
  EXPECT_EQ(attention_ops(16, 1, 0).at(0).op, OpCode::causal_attention);  // 32 head tiles for 16 workers
  EXPECT_EQ(attention_ops(2, 1, 5).at(0).as<AttentionChunkParams>().chunks, 5u);
  EXPECT_EQ(attention_ops(132, 1, 1).at(0).op, OpCode::causal_attention);
  EXPECT_EQ(attention_ops(132, 7, 0).at(0).op, OpCode::causal_attention);  // prefill
  EXPECT_EQ(attention_ops(132, 7, 5).at(0).op, OpCode::causal_attention);
}

TEST(Fuse, QkvAbsorbsBiasesHeadNormsRopeAndCacheAppend) {
  ModelSpec qwen2 = preset_spec("tiny");
  qwen2.qkv_bias = true;
  const OpGraph with_bias = fuse_primitive_graph(build_primitive_graph(qwen2, options_for(2)), options_for(2));
  const auto& p2 = with_bias.nodes[1].params.as<QkvProjectionParams>();
  EXPECT_NE(p2.bq, kNoSlot);
  EXPECT_NE(p2.bk, kNoSlot);
  EXPECT_NE(p2.bv, kNoSlot);
  EXPECT_EQ(p2.q_norm, kNoSlot);
  EXPECT_EQ(with_bias.slots[p2.bq].name, "model.layers.0.self_attn.q_proj.bias");

  ModelSpec qwen3 = preset_spec("tiny");
  qwen3.qk_norm = true;
  const OpGraph with_norm = fuse_primitive_graph(build_primitive_graph(qwen3, options_for(2)), options_for(2));
  const auto& p3 = with_norm.nodes[1].params.as<QkvProjectionParams>();
  EXPECT_EQ(with_norm.slots[p3.q_norm].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(with_norm.slots[p3.k_norm].name, "model.layers.0.self_attn.k_norm.weight");
  EXPECT_EQ(with_norm.slots[p3.k_cache].name, "layers.0.k_cache");
  EXPECT_EQ(with_norm.slots[p3.v_cache].name, "layers.0.v_cache");
  EXPECT_EQ(with_norm.slots[p3.norm_weight].name, "model.layers.0.input_layernorm.weight");
}

TEST(Fuse, TiedEmbeddingsShareTheTableWithTheLmHead) {
  ModelSpec spec = preset_spec("tiny");
  spec.tie_embeddings = true;
  const OpGraph fused = fuse_primitive_graph(build_primitive_graph(spec, options_for(1)), options_for(1));
  const auto& embed = fused.nodes.front().params.as<EmbedParams>();
  const auto& head = fused.nodes.back().params.as<LmHeadParams>();
  EXPECT_EQ(embed.table, head.weight);
}

// The LM head's rows, and the logits slot's: the last token's at a prefill; every token's in a batched
// step or for a prompt's logprobs; a batched step's last logit_rows (a prompt's chunk before decode rows:
// its last row and theirs). More logit rows than tokens is refused.
TEST(Fuse, TheLmHeadProjectsTheStepsLastRowsItNeeds) {
  const ModelSpec spec = preset_spec("tiny");
  auto head_rows = [&](CompileOptions o) {
    const OpGraph fused = fuse_primitive_graph(build_primitive_graph(spec, o), o);
    const auto& head = fused.nodes.back().params.as<LmHeadParams>();
    EXPECT_EQ(fused.slots[head.logits].rows, head.rows) << "the logits slot holds the rows projected";
    return head.rows;
  };
  CompileOptions o = options_for(2);
  o.tokens = 10;
  EXPECT_EQ(head_rows(o), 1u);
  o.prompt_logits = true;
  EXPECT_EQ(head_rows(o), 10u);
  o.prompt_logits = false;
  o.batched_decode = true;
  EXPECT_EQ(head_rows(o), 10u);
  o.logit_rows = 3;
  EXPECT_EQ(head_rows(o), 3u);
  o.logit_rows = 11;
  try {
    compile_model(spec, o);
    ADD_FAILURE() << "11 logit rows of 10 tokens compiled";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("11 logit rows in a step of 10 tokens"), std::string::npos) << e.what();
  }
}

TEST(Fuse, LeftoverPrimitiveIsAnErrorThatNamesIt) {
  PrimitiveGraph g = build_primitive_graph(preset_spec("tiny"), options_for(2));
  // A stray swiglu reading the last layer's output: no fused op has it in an epilogue.
  uint32_t x = kNoValue;
  for (const PrimitiveNode& n : g.nodes)
    if (n.op == Primitive::last_token) x = n.inputs[0];
  g.values.push_back({"stray", g.values[x].cols, false});
  g.nodes.push_back({Primitive::swiglu, 9, {x, x}, uint32_t(g.values.size() - 1), {}, 0});
  const std::string message = fused_error(g);
  EXPECT_NE(message.find("swiglu of layer 9 ('stray')"), std::string::npos) << message;
}

TEST(Fuse, MatmulWithoutNormOrResidualIsAnError) {
  PrimitiveGraph g = build_primitive_graph(preset_spec("tiny"), options_for(2));
  // Redirect layer 0's O projection output away from its residual add: the add now reads the attention.
  for (PrimitiveNode& n : g.nodes)
    if (n.op == Primitive::add && n.layer == 0) {
      n.inputs[1] = n.inputs[0];
      break;
    }
  const std::string message = fused_error(g);
  EXPECT_NE(message.find("matmul of layer 0"), std::string::npos) << message;
}

}  // namespace
}  // namespace tilefire::testing
