// Each device op against its CPU twin: one op node, tiled with awkward widths, on fresh random inputs, run
// by the CUDA megakernel and by the CPU executor on the same bytes; outputs compared NaN-aware with per-op
// tolerances, and the device run repeated to require bitwise-equal results. Skipped without a GPU (the
// CPU twins themselves are tested in tests/ops in every CI run).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "megakernel/cpu/cpu_executor.h"
#include "megakernel/cuda/cuda_executor.h"
#include "tests/common/cuda_device.h"
#include "ops/all_ops.h"
#include "ops/rope.h"
#include "tests/common/compare.h"

namespace tilefire::testing {
namespace {

// One tensor of a single-op program: its slot, its host bytes, and whether the op writes it.
struct TestTensor {
  SlotDesc slot;
  std::vector<unsigned char> bytes;
  bool output = false;
};

class SingleOpCase {
 public:
  uint32_t add_bf16(const std::string& name, uint64_t rows, uint64_t cols, float scale) {
    std::vector<uint16_t> v(rows * cols);
    std::normal_distribution<float> normal(0.0f, scale);
    for (auto& x : v) x = f32_to_bf16(normal(rng_));
    return add({SlotKind::weight, DType::bf16, rows, cols, 0, name}, v.data(), v.size() * 2, false);
  }
  uint32_t add_f32(const std::string& name, SlotKind kind, uint64_t rows, uint64_t cols, float mean, float scale,
                   bool output = false) {
    std::vector<float> v(rows * cols);
    std::normal_distribution<float> normal(mean, scale);
    for (auto& x : v) x = output ? 0.0f : normal(rng_);
    return add({kind, DType::f32, rows, cols, 0, name}, v.data(), v.size() * 4, output);
  }
  uint32_t add_f32_values(const std::string& name, SlotKind kind, uint64_t rows, const std::vector<float>& v) {
    return add({kind, DType::f32, rows, v.size() / rows, 0, name}, v.data(), v.size() * 4, false);
  }
  uint32_t add_values(const std::string& name, const std::vector<float>& v) {
    return add({SlotKind::constant, DType::f32, 1, v.size(), 0, name}, v.data(), v.size() * 4, false);
  }

  // Tiles of `width` units (never crossing a break), spread round-robin over `workers` static queues.
  Program program(const OpParams& params, uint32_t units, uint32_t width, const std::vector<uint32_t>& breaks,
                  uint32_t workers, uint32_t tokens) const {
    Program p;
    for (const TestTensor& t : tensors_) p.slots.push_back(t.slot);
    p.nodes.push_back({params, 0, 0, kNoSlot});
    std::vector<uint32_t> cuts{0};
    for (uint32_t b : breaks) cuts.push_back(b);
    cuts.push_back(units);
    std::sort(cuts.begin(), cuts.end());
    for (size_t c = 0; c + 1 < cuts.size(); ++c)
      for (uint32_t begin = cuts[c]; begin < cuts[c + 1]; begin += width) {
        TaskDesc t;
        t.op = params.op;
        t.tile_begin = begin;
        t.tile_end = std::min(cuts[c + 1], begin + width);
        t.tile_index = uint32_t(p.tasks.size());
        p.tasks.push_back(t);
      }
    p.nodes[0].task_count = uint32_t(p.tasks.size());
    p.queues.resize(workers);
    for (uint32_t t = 0; t < p.tasks.size(); ++t) p.queues[t % workers].push_back(t);
    p.workers = workers;
    p.tokens = tokens;
    visit_op(params.op, [&](auto op) {
      using Op = decltype(op);
      p.scratch_floats = Op::scratch_floats(params.as<typename Op::Params>(), tokens);
    });
    return p;
  }

  // What a comparison ran: the device step's own report (its fused argmax) and the CPU twin's tensors after
  // its step, in slot order.
  struct Compared {
    CudaStepResult device_step;
    std::vector<std::vector<unsigned char>> cpu_tensors;
  };

  // Runs on the CPU executor and on the device (twice); compares every output slot.
  Compared expect_device_matches_cpu(const OpParams& params, uint32_t units, uint32_t width, const std::vector<uint32_t>& breaks,
                                     const std::vector<int32_t>& tokens, uint32_t position0, double atol, double rtol,
                                     const CudaOptions& cuda_options = {}) {
    return expect_device_matches_cpu(params, units, width, breaks, StepInputs{tokens.data(), uint32_t(tokens.size()), position0},
                                     atol, rtol, cuda_options);
  }
  // The same for a step of any inputs (a batched step: each token's position and sequence).
  Compared expect_device_matches_cpu(const OpParams& params, uint32_t units, uint32_t width, const std::vector<uint32_t>& breaks,
                                     const StepInputs& inputs, double atol, double rtol, const CudaOptions& cuda_options = {}) {
    // CPU: host copies of every tensor.
    std::vector<std::vector<unsigned char>> host(tensors_.size());
    std::vector<void*> host_slots;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      host[i] = tensors_[i].bytes;
      host_slots.push_back(host[i].data());
    }
    CpuExecutor cpu(2);
    const Program cpu_program = program(params, units, width, breaks, 2, inputs.tokens_count);
    ProgramInstance instance(cpu_program, host_slots);
    cpu.run_step(instance, inputs, StepOptions{});

    CudaExecutor cuda(cuda_options);
    const Program device_program = program(params, units, width, breaks, cuda.workers(), inputs.tokens_count);
    std::vector<std::vector<unsigned char>> first_run(tensors_.size());
    CudaStepResult device_step;
    for (int run = 0; run < 2; ++run) {
      std::vector<DeviceBuffer> buffers;
      std::vector<void*> device_slots;
      for (const TestTensor& t : tensors_) {
        buffers.push_back(cuda.upload(t.bytes.data(), t.bytes.size()));
        device_slots.push_back(buffers.back().get());
      }
      CudaProgramPtr loaded = cuda.load(device_program, device_slots);
      device_step = cuda.run_step(*loaded, inputs, ScheduleMode::dataflow);
      for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!tensors_[i].output) continue;
        std::vector<unsigned char> device(tensors_[i].bytes.size());
        cuda.download(device.data(), buffers[i].get(), device.size());
        const size_t n = device.size() / 4;
        // A NaN the CPU twin also produced (a poisoned input) is agreement; any other NaN mismatches.
        std::vector<float> got(n), want(n);
        std::memcpy(got.data(), device.data(), n * 4);
        std::memcpy(want.data(), host[i].data(), n * 4);
        for (size_t j = 0; j < n; ++j)
          if (std::isnan(got[j]) && std::isnan(want[j])) got[j] = want[j] = 0.0f;
        const Mismatches m = compare_close(got.data(), want.data(), n, atol, rtol);
        EXPECT_EQ(m.count, 0u) << op_name(params.op) << " output '" << tensors_[i].slot.name << "' differs from the CPU twin in "
                               << m.count << " of " << n << " values:\n" << m.first;
        if (run == 0)
          first_run[i] = device;
        else
          EXPECT_EQ(first_run[i], device) << op_name(params.op) << ": two device runs differ in '" << tensors_[i].slot.name << "'";
      }
    }
    return {device_step, std::move(host)};
  }

  std::mt19937& rng() { return rng_; }

 private:
  uint32_t add(SlotDesc slot, const void* data, size_t bytes, bool output) {
    TestTensor t;
    t.slot = std::move(slot);
    t.bytes.assign(static_cast<const unsigned char*>(data), static_cast<const unsigned char*>(data) + bytes);
    t.output = output;
    tensors_.push_back(std::move(t));
    return uint32_t(tensors_.size() - 1);
  }
  std::vector<TestTensor> tensors_;
  std::mt19937 rng_{20261130};
};

std::vector<int32_t> random_tokens(std::mt19937& rng, uint32_t count, uint32_t vocab) {
  std::vector<int32_t> tokens(count);
  for (auto& t : tokens) t = int32_t(rng() % vocab);
  return tokens;
}

// Rows as stored, and times Granite's embedding_multiplier.
TEST(CudaOps, EmbedMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (float scale : {1.0f, 12.0f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    SingleOpCase c;
    EmbedParams p;
    p.vocab = 50;
    p.hidden = 100;
    p.dtype = DType::bf16;
    p.scale = scale;
    p.table = c.add_bf16("table", p.vocab, p.hidden, 1.0f);
    p.out = c.add_f32("x0", SlotKind::activation, 7, p.hidden, 0, 0, true);
    c.expect_device_matches_cpu(OpParams::make(OpCode::embed, 0, p), p.hidden, 13, {}, random_tokens(c.rng(), 7, p.vocab), 0, 0, 0);
  }
}

// Matmul tiles: vectorised rows (K % 8 == 0, staged on Hopper) and scalar rows (K % 8 != 0), one token
// and several passes of kDeviceMaxPassTokens tokens; prefills of 37 and 70 tokens take the tensor-core
// path where K % 16 == 0 (2048, 8192; 70 tokens: two passes of it) and the vector path otherwise. Rows
// too wide for a stage to hold 8 (K = 8192: 16 KiB; K = 6152: a shorter last segment) stream in
// segments at one token. Where K % 16 == 0 the product carries Granite's residual_multiplier (0.4), on the
// tensor-core and the vector paths.
TEST(CudaOps, MatmulResidualMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t K : {200u, 100u, 2048u, 8192u, 6152u})
    for (uint32_t tokens : {1u, 3u, 5u, 37u, 70u}) {
      SingleOpCase c;
      MatmulResidualParams p;
      p.K = K;
      p.N = 130;
      p.wdtype = DType::bf16;
      p.scale = K % 16 == 0 ? 0.4f : 1.0f;
      p.x = c.add_f32("x", SlotKind::activation, tokens, K, 0, 1);
      p.weight = c.add_bf16("w", p.N, K, 0.05f);
      p.residual = c.add_f32("residual", SlotKind::activation, tokens, p.N, 0, 1);
      p.out = c.add_f32("out", SlotKind::activation, tokens, p.N, 0, 0, true);
      SCOPED_TRACE("K " + std::to_string(K) + ", tokens " + std::to_string(tokens));
      c.expect_device_matches_cpu(OpParams::make(OpCode::matmul_residual, 0, p), p.N, 17, {},
                                  random_tokens(c.rng(), tokens, 10), 0, 1e-4, 1e-3);
    }
}

TEST(CudaOps, MatmulResidualMatchesCpuWithoutStaging) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  SingleOpCase c;
  MatmulResidualParams p;
  p.K = 512;
  p.N = 96;
  p.wdtype = DType::bf16;
  p.x = c.add_f32("x", SlotKind::activation, 1, p.K, 0, 1);
  p.weight = c.add_bf16("w", p.N, p.K, 0.05f);
  p.residual = c.add_f32("residual", SlotKind::activation, 1, p.N, 0, 1);
  p.out = c.add_f32("out", SlotKind::activation, 1, p.N, 0, 0, true);
  CudaOptions direct;
  direct.stage_weights = false;
  c.expect_device_matches_cpu(OpParams::make(OpCode::matmul_residual, 0, p), p.N, 11, {}, {3}, 0, 1e-4, 1e-3, direct);
}

// Gemma's post-norm: each column tile normalises by its token row's whole RMS (cols 1152: Gemma 3 1B's
// hidden; 100 in tiles of 13, the last a remainder), at one token and a prefill's 37.
TEST(CudaOps, NormResidualMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t cols : {100u, 1152u})
    for (uint32_t tokens : {1u, 37u}) {
      SCOPED_TRACE("cols " + std::to_string(cols) + ", tokens " + std::to_string(tokens));
      SingleOpCase c;
      NormResidualParams p;
      p.cols = cols;
      p.eps = 1e-6f;
      p.y = c.add_f32("y", SlotKind::activation, tokens, cols, 0, 2);
      p.norm_weight = c.add_f32("g", SlotKind::weight_f32, 1, cols, 1, 0.1f);
      p.residual = c.add_f32("residual", SlotKind::activation, tokens, cols, 0, 1);
      p.out = c.add_f32("out", SlotKind::activation, tokens, cols, 0, 0, true);
      c.expect_device_matches_cpu(OpParams::make(OpCode::norm_residual, 0, p), cols, 13, {}, random_tokens(c.rng(), tokens, 10), 0,
                                  1e-5, 1e-5);
    }
}

// hidden 104 takes the vector path at every token count; 128 takes tensor cores for the 40-token prefill
// (the RMSNorm folded in as x * g and a per-token scale); 4096 makes 8 KiB rows, which stream in segments
// (gate rows, then up rows: two ranges) at 1 and 3 tokens. Weights scale as 1 / sqrt(hidden), as a
// model's do, so gate and up are O(1): SwiGLU multiplies the error of up by silu(gate), and at weights of
// 0.1 a hidden of 4096 made gates of 20, whose products the tensor cores' 16-bit activations (hi + lo
// bf16) cannot give to 1e-4 (found by the host emulation). The even token counts gate with Gemma's tanh
// GELU (GeGLU; 40 tokens on tensor cores at hidden 128), the odd ones with silu.
TEST(CudaOps, GateUpSwigluMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t hidden : {104u, 128u, 4096u})
  for (uint32_t tokens : {1u, 3u, 6u, 40u}) {
    SCOPED_TRACE("hidden " + std::to_string(hidden) + ", " + std::to_string(tokens) + " tokens");
    SingleOpCase c;
    GateUpSwigluParams p;
    p.hidden = hidden;
    p.ffn = 70;
    p.max_tile = 9;
    p.eps = 1e-5f;
    p.wdtype = DType::bf16;
    p.activation = tokens % 2 == 0 ? GateActivation::gelu_tanh : GateActivation::silu;
    p.x = c.add_f32("x", SlotKind::activation, tokens, p.hidden, 0, 1);
    p.norm_weight = c.add_f32("g", SlotKind::weight_f32, 1, p.hidden, 1, 0.1f);
    const float weight_scale = 1.0f / std::sqrt(float(p.hidden));
    p.w_gate = c.add_bf16("wg", p.ffn, p.hidden, weight_scale);
    p.w_up = c.add_bf16("wu", p.ffn, p.hidden, weight_scale);
    p.out = c.add_f32("out", SlotKind::activation, tokens, p.ffn, 0, 0, true);
    c.expect_device_matches_cpu(OpParams::make(OpCode::gate_up_swiglu, 0, p), p.ffn, p.max_tile, {},
                                random_tokens(c.rng(), tokens, 10), 0, 1e-4, 1e-3);
  }
}

// The last token's row with the argmax fused, and without (a tensor-parallel rank's), and every row of a
// batched step; each also with Granite's logits divided by 3, and with Gemma 2's soft cap (2: the logits
// here spread over about +-3, so it bends them).
TEST(CudaOps, LmHeadMatchesCpuAndReducesTheArgmax) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (const auto& [scale, softcap] : {std::pair{1.0f, 0.0f}, {1.0f / 3.0f, 0.0f}, {1.0f, 2.0f}})
    for (const auto& [rows, fused_argmax] : {std::pair{1u, 1u}, {1u, 0u}, {3u, 0u}}) {
      SCOPED_TRACE("scale " + std::to_string(scale) + ", softcap " + std::to_string(softcap) + ", rows " + std::to_string(rows) +
                   ", fused argmax " + std::to_string(fused_argmax));
      SingleOpCase c;
      LmHeadParams p;
      p.hidden = 96;
      p.vocab = 1000;
      p.eps = 1e-6f;
      p.wdtype = DType::bf16;
      p.rows = rows;
      p.fused_argmax = fused_argmax;
      p.scale = scale;
      p.softcap = softcap;
      p.x = c.add_f32("x", SlotKind::activation, 3, p.hidden, 0, 1);
      p.norm_weight = c.add_f32("g", SlotKind::weight_f32, 1, p.hidden, 1, 0.1f);
      p.weight = c.add_bf16("w", p.vocab, p.hidden, 0.1f);
      p.logits = c.add_f32("logits", SlotKind::activation, rows, p.vocab, 0, 0, true);
      const auto compared = c.expect_device_matches_cpu(OpParams::make(OpCode::lm_head, 0, p), p.vocab, 37, {}, {1, 2, 3}, 0, 1e-4, 1e-3);
      if (!fused_argmax) continue;
      // The fused reduction's token: the CPU twin's logits' argmax (the lowest index among equals).
      std::vector<float> cpu_logits(p.vocab);
      std::memcpy(cpu_logits.data(), compared.cpu_tensors[p.logits].data(), cpu_logits.size() * sizeof(float));
      const auto expected = int32_t(std::max_element(cpu_logits.begin(), cpu_logits.end()) - cpu_logits.begin());
      EXPECT_EQ(compared.device_step.argmax, expected);
      EXPECT_FALSE(compared.device_step.nonfinite);
    }
}

// QKV: head_dim 48 (not a multiple of the warp), GQA 6/2, RoPE at positions 5.., with and without the
// Qwen2 biases and the Qwen3 per-head norms, and a NoPE layer's (SmolLM3: q and k unrotated).
TEST(CudaOps, QkvProjectionMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (const auto& [qwen, rope] : {std::pair{false, true}, {true, true}, {false, false}})
    for (uint32_t tokens : {1u, 3u, 21u}) {  // 21: a prefill on tensor cores (hidden 96)
      SingleOpCase c;
      QkvProjectionParams p;
      p.hidden = 96;
      p.heads = 6;
      p.kv_heads = 2;
      p.head_dim = 48;
      p.cache_rows = 32;  // positions 5 .. 25 of the 21-token prefill
      p.eps = 1e-6f;
      p.wdtype = DType::bf16;
      p.rope = rope;
      p.x = c.add_f32("x", SlotKind::activation, tokens, p.hidden, 0, 1);
      p.norm_weight = c.add_f32("g", SlotKind::weight_f32, 1, p.hidden, 1, 0.1f);
      p.wq = c.add_bf16("wq", p.heads * p.head_dim, p.hidden, 0.1f);
      p.wk = c.add_bf16("wk", p.kv_heads * p.head_dim, p.hidden, 0.1f);
      p.wv = c.add_bf16("wv", p.kv_heads * p.head_dim, p.hidden, 0.1f);
      if (qwen) {
        p.bq = c.add_f32("bq", SlotKind::weight_f32, 1, p.heads * p.head_dim, 0, 0.1f);
        p.bk = c.add_f32("bk", SlotKind::weight_f32, 1, p.kv_heads * p.head_dim, 0, 0.1f);
        p.bv = c.add_f32("bv", SlotKind::weight_f32, 1, p.kv_heads * p.head_dim, 0, 0.1f);
        p.q_norm = c.add_f32("qn", SlotKind::weight_f32, 1, p.head_dim, 1, 0.1f);
        p.k_norm = c.add_f32("kn", SlotKind::weight_f32, 1, p.head_dim, 1, 0.1f);
      }
      p.rope_inv_freq = c.add_values("inv_freq", rope_inverse_frequencies(p.head_dim, 500000.0f, RopeScaling{}));
      p.q_out = c.add_f32("q", SlotKind::activation, tokens, p.heads * p.head_dim, 0, 0, true);
      p.k_cache = c.add_f32("k", SlotKind::kv_cache, p.kv_heads * p.cache_rows, p.head_dim, 0, 0, true);
      p.v_cache = c.add_f32("v", SlotKind::kv_cache, p.kv_heads * p.cache_rows, p.head_dim, 0, 0, true);
      SCOPED_TRACE(std::string(qwen ? "qwen" : "llama") + (rope ? "" : ", NoPE") + ", tokens " + std::to_string(tokens));
      c.expect_device_matches_cpu(OpParams::make(OpCode::qkv_projection, 0, p), QkvProjectionOp::tile_units(p), 2,
                                  QkvProjectionOp::tile_breaks(p), random_tokens(c.rng(), tokens, 10), 5, 1e-4, 1e-3);
    }
}

// Attention of 6 query heads over 2 KV heads of `head_dim`, `tokens` rows of queries and caches of
// `sequences` slots of 1024 positions, random: causal attention writing `out`, or split-KV chunk tiles (5
// chunks per KV head) writing their records.
CausalAttentionParams causal_attention_case(SingleOpCase& c, uint32_t head_dim, uint32_t tokens, uint32_t sequences) {
  CausalAttentionParams p;
  p.heads = 6;
  p.kv_heads = 2;
  p.head_dim = head_dim;
  p.cache_rows = 1024;
  p.scale = 1.0f / std::sqrt(float(head_dim));
  p.q = c.add_f32("q", SlotKind::activation, tokens, p.heads * head_dim, 0, 1);
  p.k_cache = c.add_f32("k", SlotKind::kv_cache, sequences * p.kv_heads * p.cache_rows, head_dim, 0, 1);
  p.v_cache = c.add_f32("v", SlotKind::kv_cache, sequences * p.kv_heads * p.cache_rows, head_dim, 0, 1);
  p.out = c.add_f32("out", SlotKind::activation, tokens, p.heads * head_dim, 0, 0, true);
  return p;
}

AttentionChunkParams attention_chunk_case(SingleOpCase& c, uint32_t head_dim, uint32_t tokens, uint32_t sequences) {
  AttentionChunkParams p;
  p.heads = 6;
  p.kv_heads = 2;
  p.head_dim = head_dim;
  p.cache_rows = 1024;
  p.chunks = 5;
  p.scale = 1.0f / std::sqrt(float(head_dim));
  p.q = c.add_f32("q", SlotKind::activation, tokens, p.heads * head_dim, 0, 1);
  p.k_cache = c.add_f32("k", SlotKind::kv_cache, sequences * p.kv_heads * p.cache_rows, head_dim, 0, 1);
  p.v_cache = c.add_f32("v", SlotKind::kv_cache, sequences * p.kv_heads * p.cache_rows, head_dim, 0, 1);
  p.partial = c.add_f32("partial", SlotKind::activation, tokens,
                        uint64_t(AttentionChunkOp::tile_units(p)) * AttentionChunkOp::unit_floats(p), 0, 0, true);
  return p;
}

// Attention over short and long contexts (a few positions per warp, and hundreds), head_dim 48 to 192;
// a 40-token prefill takes the tensor-core body (16-token blocks, the last one partial): in one slice of
// output dimensions at 48 and 64, in two at 80 (64 + 16) and 128 (64 + 64), in three at 192.
TEST(CudaOps, CausalAttentionMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t head_dim : {48u, 64u, 80u, 128u, 192u})
  for (uint32_t tokens : {3u, 40u})
    for (uint32_t position0 : {0u, 5u, 700u}) {
      SingleOpCase c;
      const CausalAttentionParams p = causal_attention_case(c, head_dim, tokens, 1);
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", tokens " + std::to_string(tokens) + ", position0 " +
                   std::to_string(position0));
      // The tensor-core body's operands keep ~16 bits (split bf16): a little more room than f32 FMAs.
      const double atol = tokens >= 16 ? 3e-5 : 1e-5, rtol = tokens >= 16 ? 3e-4 : 1e-4;
      c.expect_device_matches_cpu(OpParams::make(OpCode::causal_attention, 0, p), p.heads, 2, {3},  // tiles inside a KV group (3 heads each)
                                  random_tokens(c.rng(), tokens, 10), position0, atol, rtol);
    }
}

// Split-KV attention's chunk tiles: records (unnormalised sums, max, sum) of every (KV head, chunk), with
// contexts that leave chunks empty (max -inf on both sides), GQA groups of 3, head_dim 48 and 128.
TEST(CudaOps, AttentionChunkMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t head_dim : {48u, 128u})
    for (uint32_t position0 : {0u, 5u, 700u}) {
      SingleOpCase c;
      const uint32_t tokens = 3;
      const AttentionChunkParams p = attention_chunk_case(c, head_dim, tokens, 1);
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", position0 " + std::to_string(position0));
      c.expect_device_matches_cpu(OpParams::make(OpCode::attention_chunk, 0, p), AttentionChunkOp::tile_units(p), 2,
                                  AttentionChunkOp::tile_breaks(p), random_tokens(c.rng(), tokens, 10), position0, 1e-5, 1e-4);
    }
}

// Sliding windows on the device: causal attention (a 40-token prefill on tensor cores, whose 16-token
// blocks start their keys inside a block; and 3 tokens by warps) and split-KV chunk records (chunks of
// the window), windows of 1, 7, 33 and one longer than every position, head_dim 48 and 64.
TEST(CudaOps, SlidingWindowAttentionMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t head_dim : {48u, 64u})
    for (uint32_t window : {1u, 7u, 33u, 2000u})
      for (uint32_t tokens : {3u, 40u})
        for (uint32_t position0 : {0u, 5u, 700u}) {
          SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", window " + std::to_string(window) + ", tokens " +
                       std::to_string(tokens) + ", position0 " + std::to_string(position0));
          {
            SingleOpCase c;
            CausalAttentionParams p = causal_attention_case(c, head_dim, tokens, 1);
            p.window = window;
            const double atol = tokens >= 16 ? 3e-5 : 1e-5, rtol = tokens >= 16 ? 3e-4 : 1e-4;
            c.expect_device_matches_cpu(OpParams::make(OpCode::causal_attention, 0, p), p.heads, 2, {3},
                                        random_tokens(c.rng(), tokens, 10), position0, atol, rtol);
          }
          if (tokens > 3) continue;
          SingleOpCase c;
          AttentionChunkParams p = attention_chunk_case(c, head_dim, tokens, 1);
          p.window = window;
          c.expect_device_matches_cpu(OpParams::make(OpCode::attention_chunk, 0, p), AttentionChunkOp::tile_units(p), 2,
                                      AttentionChunkOp::tile_breaks(p), random_tokens(c.rng(), tokens, 10), position0, 1e-5, 1e-4);
        }
}

// Gemma 2's soft cap on the scores (0.5, under the scores' spread of about +-2 here, so it bends most of
// them): causal attention at decode (3 tokens) and a 40-token prefill (which a cap sends by warps, not to
// the tensor-core body: docs/CUDA.md), with and without a window, and split-KV chunk records.
TEST(CudaOps, SoftCappedAttentionMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t window : {0u, 7u})
    for (uint32_t tokens : {3u, 40u})
      for (uint32_t position0 : {0u, 700u}) {
        SCOPED_TRACE("window " + std::to_string(window) + ", tokens " + std::to_string(tokens) + ", position0 " + std::to_string(position0));
        {
          SingleOpCase c;
          CausalAttentionParams p = causal_attention_case(c, 64, tokens, 1);
          p.window = window;
          p.softcap = 0.5f;
          const double atol = tokens >= 16 ? 3e-5 : 1e-5, rtol = tokens >= 16 ? 3e-4 : 1e-4;
          c.expect_device_matches_cpu(OpParams::make(OpCode::causal_attention, 0, p), p.heads, 2, {3},
                                      random_tokens(c.rng(), tokens, 10), position0, atol, rtol);
        }
        if (tokens > 3) continue;
        SingleOpCase c;
        AttentionChunkParams p = attention_chunk_case(c, 64, tokens, 1);
        p.window = window;
        p.softcap = 0.5f;
        c.expect_device_matches_cpu(OpParams::make(OpCode::attention_chunk, 0, p), AttentionChunkOp::tile_units(p), 2,
                                    AttentionChunkOp::tile_breaks(p), random_tokens(c.rng(), tokens, 10), position0, 1e-5, 1e-4);
      }
}

// A batched step's attention (Engine::step_sequences): each token at its own position in its own sequence's
// slot of the caches. The rows of a prompt's chunk in the decode step's program (20 consecutive positions
// of sequence 1), a decoding sequence's token (sequence 0, and a row of it at position 2, which leaves
// chunks of 5 empty), and a speculating one's token and two drafts (sequence 2), against the CPU twin:
// causal attention, and split-KV chunk records.
TEST(CudaOps, BatchedStepAttentionMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  std::vector<uint32_t> positions, sequences;
  for (uint32_t i = 0; i < 20; ++i) {
    positions.push_back(700 + i);
    sequences.push_back(1);
  }
  for (const auto& [position, sequence] : {std::pair{5u, 0u}, {2u, 0u}, {300u, 2u}, {301u, 2u}, {302u, 2u}}) {
    positions.push_back(position);
    sequences.push_back(sequence);
  }
  const uint32_t tokens = uint32_t(positions.size());
  for (uint32_t head_dim : {48u, 64u}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    std::mt19937 rng(head_dim);
    const std::vector<int32_t> ids = random_tokens(rng, tokens, 10);
    StepInputs inputs{ids.data(), tokens, 0};
    inputs.positions = positions.data();
    inputs.sequences = sequences.data();
    {
      SingleOpCase c;
      const CausalAttentionParams p = causal_attention_case(c, head_dim, tokens, 3);
      c.expect_device_matches_cpu(OpParams::make(OpCode::causal_attention, 0, p), p.heads, 2, {3}, inputs, 1e-5, 1e-4);
    }
    {
      SingleOpCase c;
      const AttentionChunkParams p = attention_chunk_case(c, head_dim, tokens, 3);
      c.expect_device_matches_cpu(OpParams::make(OpCode::attention_chunk, 0, p), AttentionChunkOp::tile_units(p), 2,
                                  AttentionChunkOp::tile_breaks(p), inputs, 1e-5, 1e-4);
    }
  }
}

// Split-KV attention's merge tiles over random records (positive sums, maxes near each other), some of
// them empty (max -inf: skipped), every record of one head empty (zeros), and one NaN max (NaN out).
TEST(CudaOps, AttentionMergeMatchesCpu) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t head_dim : {48u, 128u}) {
    SingleOpCase c;
    AttentionMergeParams p{0, 0, 6, 2, head_dim, 7};
    const uint32_t tokens = 2, record = attention_record_floats(head_dim), group = AttentionMergeOp::group(p);
    const uint64_t columns = p.kv_heads * AttentionMergeOp::kv_head_floats(p);
    std::vector<float> records(tokens * columns);  // [tokens, kv_heads, chunks, group, head_dim + 2]
    std::normal_distribution<float> normal(2.0f, 0.5f);
    for (float& x : records) x = normal(c.rng());
    auto record_of = [&](uint32_t m, uint32_t h, uint32_t chunk) {
      return records.data() + m * columns + (h / group) * AttentionMergeOp::kv_head_floats(p) +
             (uint64_t(chunk) * group + h % group) * record;
    };
    const float inf = std::numeric_limits<float>::infinity();
    for (uint32_t chunk : {1u, 4u, 6u}) record_of(0, 2, chunk)[head_dim] = -inf;  // some chunks of head 2 empty
    for (uint32_t chunk = 0; chunk < p.chunks; ++chunk) record_of(1, 4, chunk)[head_dim] = -inf;  // head 4: none
    record_of(1, 0, 3)[head_dim] = std::numeric_limits<float>::quiet_NaN();
    p.partial = c.add_f32_values("partial", SlotKind::activation, tokens, records);
    p.out = c.add_f32("out", SlotKind::activation, tokens, p.heads * head_dim, 0, 0, true);
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    c.expect_device_matches_cpu(OpParams::make(OpCode::attention_merge, 0, p), p.heads, 2, AttentionMergeOp::tile_breaks(p),
                                random_tokens(c.rng(), tokens, 10), 9, 1e-5, 1e-4);
  }
}

}  // namespace
}  // namespace tilefire::testing
