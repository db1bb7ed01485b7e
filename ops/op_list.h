#pragma once
// The op list: the single source of the opcode enum, the name table and the dispatch (megakernel/).
// Adding an op: its header in ops/, one line here, its test in tests/ops/.
#include <cstdint>
#include <string_view>

// X(name, header type): the opcode and the struct (in ops/<name>.h; the collectives in
// transport/collective_ops.h) that implements its tiles.
#define TILEFIRE_OP_LIST(X)                  \
  X(noop, NoopOp)                            \
  X(embed, EmbedOp)                          \
  X(qkv_projection, QkvProjectionOp)         \
  X(causal_attention, CausalAttentionOp)     \
  X(attention_chunk, AttentionChunkOp)       \
  X(attention_merge, AttentionMergeOp)       \
  X(matmul_residual, MatmulResidualOp)       \
  X(gate_up_swiglu, GateUpSwigluOp)          \
  X(lm_head, LmHeadOp)                       \
  X(allreduce_residual, AllreduceResidualOp) \
  X(allgather_logits, AllgatherLogitsOp)     \
  X(norm_residual, NormResidualOp)

namespace tilefire {

enum class OpCode : uint16_t {
#define TILEFIRE_OP_ENUM(name, type) name,
  TILEFIRE_OP_LIST(TILEFIRE_OP_ENUM)
#undef TILEFIRE_OP_ENUM
      count
};

constexpr std::string_view op_name(OpCode op) {
  constexpr std::string_view names[] = {
#define TILEFIRE_OP_NAME(name, type) #name,
      TILEFIRE_OP_LIST(TILEFIRE_OP_NAME)
#undef TILEFIRE_OP_NAME
  };
  auto index = static_cast<uint16_t>(op);
  return index < static_cast<uint16_t>(OpCode::count) ? names[index] : std::string_view("unknown");
}

}  // namespace tilefire
