#pragma once
// embed on the device: x0[m, c] = table[tokens[m], c] * scale for the tile's columns (the CPU twin:
// ops/embed.h).
#include "ops/cuda/device_tile.cuh"
#include "ops/embed.h"

namespace tilefire::device {

template <>
struct DeviceTile<OpCode::embed> {
  using Params = EmbedParams;
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const void* table = ctx.slot<const void>(p.table);  // [vocab, hidden] bf16
    float* out = ctx.slot<float>(p.out);                // [tokens, hidden]
    const uint32_t width = tile.end - tile.begin;
    for (uint32_t i = threadIdx.x; i < ctx.tokens_count * width; i += kDeviceConsumerThreads) {
      const uint32_t m = i / width, c = tile.begin + i % width;
      const uint32_t token = uint32_t(ctx.tokens[m]);  // shared memory; checked against vocab by the engine
      out[uint64_t(m) * p.hidden + c] = load_weight_bf16(table, uint64_t(token) * p.hidden + c) * p.scale;
    }
  }
};

}  // namespace tilefire::device
