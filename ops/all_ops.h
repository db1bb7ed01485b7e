#pragma once
// Every op header, so code that walks TILEFIRE_OP_LIST sees every type it names.
#include "ops/attention_chunk.h"
#include "ops/attention_merge.h"
#include "ops/causal_attention.h"
#include "ops/embed.h"
#include "ops/gate_up_swiglu.h"
#include "ops/lm_head.h"
#include "ops/matmul_residual.h"
#include "ops/noop.h"
#include "ops/norm_residual.h"
#include "ops/qkv_projection.h"
#include "transport/collective_ops.h"
#include "ops/op_list.h"

namespace tilefire {

// Calls fn(Op{}) with the op type named by `code`; returns false for an unknown opcode.
template <class Fn>
bool visit_op(OpCode code, Fn&& fn) {
  switch (code) {
#define TILEFIRE_OP_VISIT(name, type) \
  case OpCode::name: fn(type{}); return true;
    TILEFIRE_OP_LIST(TILEFIRE_OP_VISIT)
#undef TILEFIRE_OP_VISIT
    default: return false;
  }
}

}  // namespace tilefire
