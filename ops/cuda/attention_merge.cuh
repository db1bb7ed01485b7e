#pragma once
// attention_merge on the device (the CPU twin: ops/attention_merge.h, merge_attention_records): each
// consumer thread takes dimensions of a head and combines the head's chunk records in chunk order.
#include "ops/attention_merge.h"
#include "ops/cuda/attention_warps.cuh"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::attention_merge> {
  using Params = AttentionMergeParams;

  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const uint32_t hd = p.head_dim, q_dim = p.heads * hd, group = AttentionMergeOp::group(p);
    const uint32_t record = attention_record_floats(hd);
    const uint64_t partial_cols = uint64_t(p.kv_heads) * AttentionMergeOp::kv_head_floats(p);
    const uint64_t chunk_stride = uint64_t(group) * record;
    const float* partial = ctx.slot<const float>(p.partial);  // [tokens, partial_cols]
    float* out = ctx.slot<float>(p.out);                      // [tokens, heads * hd]
    const uint32_t heads = tile.end - tile.begin;
    for (uint32_t i = threadIdx.x; i < ctx.tokens_count * heads * hd; i += kDeviceConsumerThreads) {
      const uint32_t d = i % hd, h = tile.begin + (i / hd) % heads, m = i / (hd * heads);
      const float* first = partial + m * partial_cols + uint64_t(h / group) * AttentionMergeOp::kv_head_floats(p) +
                           uint64_t(h % group) * record;
      float common_max = negative_infinity();
      for (uint32_t c = 0; c < p.chunks; ++c) common_max = max_propagating_nan(common_max, __ldcg(first + c * chunk_stride + hd));
      float total = 0.0f, value = 0.0f;
      for (uint32_t c = 0; c < p.chunks; ++c) {  // chunk order, as the CPU twin
        const float chunk_max = __ldcg(first + c * chunk_stride + hd);
        if (chunk_max == negative_infinity()) continue;  // a chunk with no visible position
        const float weight = expf(chunk_max - common_max);
        total += weight * __ldcg(first + c * chunk_stride + hd + 1);
        value += weight * __ldcg(first + c * chunk_stride + d);
      }
      out[uint64_t(m) * q_dim + uint64_t(h) * hd + d] = total == 0.0f ? 0.0f : value / total;
    }
  }
};

}  // namespace tilefire::device
