#pragma once
// What every device tile function shares: the context a tile runs in, warp and block reductions, bf16
// unpacking, the RMSNorm prologue into shared memory, and the task's weight rows as a matrix-vector body
// (gemv_task_rows) that reads them from the CTA's shared-memory stages (filled ahead by the producer warp)
// or straight from global memory.
//
// Tiles run on the CTA's consumer warps (threads [0, kDeviceConsumerThreads)); they synchronise among
// themselves with named barrier 1 (consumers_sync), never with __syncthreads, which would also wait for
// the producer warp. Memory rules:
//  - weights are read-only for the kernel's life: ld.global.nc;
//  - activations and KV caches are written by other CTAs in the same kernel: read with ld.global.cg
//    (at L2, where the producer's release made them visible), never through the non-coherent path.
#include <cuda_bf16.h>
#include <cstdint>

#include "megakernel/cuda/device_job.h"
#include "ops/cuda/ptx.cuh"
#include "ops/tile.h"

namespace tilefire::device {

// The CTA's weight stages as the consumers see them.
struct StageRing {
  unsigned char* stages = nullptr;  // [stage_count][stage_bytes] shared memory
  uint64_t* full = nullptr;         // [stage_count] mbarriers: the producer's bulk copy landed
  uint64_t* empty = nullptr;        // [stage_count] mbarriers: every consumer warp is done with it
  uint32_t stage_bytes = 0;
  uint32_t stage_count = 0;
};

struct DeviceTileContext {
  void* const* slots = nullptr;  // [slot count] device pointers
  const int32_t* tokens = nullptr;  // [tokens_count] the step's token ids (shared memory)
  uint32_t tokens_count = 0;
  uint32_t position0 = 0;
  // A step of several sequences: each token's position and KV-cache slot (shared memory); null: token m
  // of slot sequence0 at position0 + m (ops/tile.h, StepInputs).
  const uint32_t* positions = nullptr;
  const uint32_t* sequences = nullptr;
  uint32_t sequence0 = 0;
  float* workspace = nullptr;  // shared memory, workspace_floats floats
  uint32_t workspace_floats = 0;
  const WeightStreamDesc* stream = nullptr;  // the task's weight rows
  bool staged = false;         // stream through `ring` (else read weights from global memory)
  StageRing ring;
  uint32_t stage = 0;          // consumers: the ring stage of the next chunk
  uint32_t phase = 0;          // and the parity of its `full` barrier's phase (flips each lap of the ring)
  bool aborted = false;
  DeviceGlobals* globals = nullptr;  // the step's argmax and non-finite flag; the error claim
  Mailbox* mailbox = nullptr;        // where an error record goes
  uint64_t watchdog_ns = 0;
  uint32_t task = 0;                 // the task running (for an error record)
  const TaskDesc* task_desc = nullptr;  // and its descriptor
  uint32_t layer = 0;                // and its layer
  const DeviceRankView* ranks = nullptr;  // collective tiles: the tensor-parallel group
  unsigned long long epoch = 0;           // collective tiles: the step's epoch

  template <class T>
  __device__ T* slot(uint32_t id) const { return static_cast<T*>(slots[id]); }
  // Tokens a matrix tile handles per pass over its weights (the workspace holds this many input rows).
  __device__ uint32_t pass_tokens() const { return min(tokens_count, kDeviceMaxPassTokens); }
  // Token m's position in its sequence, and its sequence's slot of the KV caches (kv_cache_row).
  __device__ uint32_t position_of(uint32_t m) const { return positions ? positions[m] : position0 + m; }
  __device__ uint32_t sequence_of(uint32_t m) const { return sequences ? sequences[m] : sequence0; }
};

template <OpCode op>
struct DeviceTile;  // specialised in ops/cuda/<op>.cuh; a missing one fails the build of the dispatch

__device__ __forceinline__ void consumers_sync() { ptx::barrier_sync(1, kDeviceConsumerThreads); }
__device__ __forceinline__ uint32_t warp_id() { return threadIdx.x / 32; }
__device__ __forceinline__ uint32_t lane_id() { return threadIdx.x % 32; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the consumer threads; every consumer gets the result. `scratch`: kDeviceConsumerWarps doubles
// of shared memory, free between calls.
__device__ __forceinline__ double consumers_sum(double v, double* scratch) {
  v = warp_sum(v);
  if (lane_id() == 0) scratch[warp_id()] = v;
  consumers_sync();
  double total = 0;
#pragma unroll
  for (uint32_t w = 0; w < kDeviceConsumerWarps; ++w) total += scratch[w];  // fixed order
  consumers_sync();
  return total;
}

// Every consumer thread's best argmax key and non-finite flag of the values it saw, into the step's
// greedy token and non-finite flag (one atomic per warp). The LM head's and the logits all-gather's.
__device__ __forceinline__ void reduce_greedy_into_step(unsigned long long best, bool nonfinite, DeviceGlobals* globals) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, offset));
  nonfinite = __any_sync(0xffffffffu, nonfinite);
  if (lane_id() == 0) {
    if (best) atomicMax(&globals->argmax_key, best);
    if (nonfinite) atomicOr(&globals->nonfinite, 1u);
  }
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }
// Eight bf16 in a 16-byte vector, as floats.
__device__ __forceinline__ void unpack_bf16x8(const uint4& v, float* out) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ uint4 load_weight_v4(const void* p) { return ptx::load_readonly_v4(p); }
__device__ __forceinline__ float load_weight_bf16(const void* base, uint64_t index) {
  const unsigned short bits = __ldg(static_cast<const unsigned short*>(base) + index);
  return bf16_bits_to_float(bits);
}

// xs[t, :] = rmsnorm(x[m0 + t, :]) * g for t < count, into shared memory (x: [tokens, K] activation).
// The sum of squares in double, as the CPU twin (ops/rmsnorm.cpp).
__device__ __forceinline__ void rmsnorm_rows_to_shared(const float* x, uint32_t m0, uint32_t count, uint32_t K,
                                                       const float* g, float eps, float* xs, double* scratch) {
  for (uint32_t t = 0; t < count; ++t) {
    const float* row = x + uint64_t(m0 + t) * K;
    double sum = 0;
    for (uint32_t k = threadIdx.x; k < K; k += kDeviceConsumerThreads) {
      const float v = __ldcg(row + k);
      xs[t * K + k] = v;
      sum += double(v) * double(v);
    }
    const double total = consumers_sum(sum, scratch);
    const float inverse = float(1.0 / sqrt(total / double(K) + double(eps)));
    for (uint32_t k = threadIdx.x; k < K; k += kDeviceConsumerThreads)
      xs[t * K + k] = (xs[t * K + k] * inverse) * __ldg(g + k);
  }
  consumers_sync();
}

// xs[t, :] = x[m0 + t, :] for t < count (no norm: the O and down projections).
__device__ __forceinline__ void copy_rows_to_shared(const float* x, uint32_t m0, uint32_t count, uint32_t K, float* xs) {
  for (uint32_t i = threadIdx.x; i < count * K; i += kDeviceConsumerThreads) xs[i] = __ldcg(x + uint64_t(m0) * K + i);
  consumers_sync();
}

// acc[t] += the 8 weights of vector v of a row (packed bf16) . xs[t, 8v .. 8v + 8), for t < count. Every
// vectorised dot product goes through here, so a row read from global memory, from a whole-row stage or
// from segments adds the same terms in the same order: the same bits.
__device__ __forceinline__ void accumulate_vector(const uint4& packed, const float* xs, uint32_t K, uint32_t v, uint32_t count,
                                                  float (&acc)[kDeviceMaxPassTokens]) {
  float w[8];
  unpack_bf16x8(packed, w);
#pragma unroll
  for (uint32_t t = 0; t < kDeviceMaxPassTokens; ++t) {
    if (t >= count) break;
    const float4 a = reinterpret_cast<const float4*>(xs + t * K + v * 8)[0];
    const float4 b = reinterpret_cast<const float4*>(xs + t * K + v * 8)[1];
    acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x + w[5] * b.y + w[6] * b.z + w[7] * b.w;
  }
}

// The warp's sums of acc[t] to out[t * stride] (lane 0), for t < count.
__device__ __forceinline__ void store_warp_sums(const float (&acc)[kDeviceMaxPassTokens], uint32_t count, float* out,
                                                uint32_t stride) {
#pragma unroll
  for (uint32_t t = 0; t < kDeviceMaxPassTokens; ++t) {
    const float total = warp_sum(acc[t]);
    if (lane_id() == 0 && t < count) out[t * stride] = total;
  }
}

// One weight row (K bf16) dotted with xs[t, :] for t < count, by one warp; lane 0 writes out[t * stride].
template <bool kVectorised>
__device__ __forceinline__ void dot_row(const unsigned char* row, bool row_in_shared, uint32_t K, const float* xs,
                                        uint32_t count, float* out, uint32_t stride) {
  float acc[kDeviceMaxPassTokens] = {};
  const uint32_t lane = lane_id();
  if constexpr (kVectorised) {  // K % 8 == 0 and 16-byte aligned rows
    const uint32_t vectors = K / 8;
#pragma unroll 2
    for (uint32_t v = lane; v < vectors; v += 32)
      accumulate_vector(row_in_shared ? reinterpret_cast<const uint4*>(row)[v] : load_weight_v4(row + 16ull * v), xs, K, v, count,
                        acc);
  } else {
    for (uint32_t k = lane; k < K; k += 32) {
      const float w = row_in_shared ? bf16_bits_to_float(reinterpret_cast<const unsigned short*>(row)[k])
                                    : load_weight_bf16(row, k);
#pragma unroll
      for (uint32_t t = 0; t < kDeviceMaxPassTokens; ++t)
        if (t < count) acc[t] += w * xs[t * K + k];
    }
  }
  store_warp_sums(acc, count, out, stride);
}

__device__ __forceinline__ uint64_t global_timer_ns() { return ptx::global_timer_ns(); }

// Whether some CTA raised the kernel's abort flag (an error record was claimed, or the kernel stops).
__device__ __forceinline__ bool kernel_aborted(const DeviceGlobals* globals) { return ptx::load_relaxed_gpu(&globals->abort) != 0; }

// The first error of a kernel run goes to the mailbox (mapped host memory): the thread that claims it
// writes the record, the code last (a release: a host that acquires the code sees the rest); then every
// CTA is told to stop.
__device__ __forceinline__ void raise_device_error(Mailbox* mailbox, DeviceGlobals* globals, const DeviceErrorRecord& r) {
  if (atomicCAS(&globals->error_claimed, 0u, 1u) == 0) {
    volatile DeviceErrorRecord& out = mailbox->error;
    out.cta = r.cta;
    out.task = r.task;
    out.op = r.op;
    out.layer = r.layer;
    out.tile_begin = r.tile_begin;
    out.tile_end = r.tile_end;
    out.wait_kind = r.wait_kind;
    out.event = r.event;
    out.counter = r.counter;
    out.target = r.target;
    out.waited_ms = r.waited_ms;
    out.peer = r.peer;
    ptx::store_release_system(const_cast<uint32_t*>(&out.code), r.code);
    __threadfence_system();
  }
  atomicExch(&globals->abort, 1u);
  __threadfence();
}

// Where a weight-stage wait is, for the watchdog's record: the task and its descriptor (its op, layer and
// tiles go in the record, so the host names the task as it names an event wait's).
struct StageWaitSite {
  Mailbox* mailbox;
  DeviceGlobals* globals;
  uint64_t watchdog_ns;
  uint32_t task;
  const TaskDesc* desc;
  uint32_t stage;
};

// Waits until the mbarrier's phase with the given parity has completed. False when the kernel aborts or
// the wait outlasts the watchdog (then this thread raises the error record, wait kind weight_stage).
__device__ __forceinline__ bool mbarrier_wait(uint64_t* barrier, uint32_t parity, const StageWaitSite& site) {
#if TILEFIRE_DEVICE_SM90
  uint64_t start = 0;
  for (uint32_t spins = 0;; ++spins) {
    if (ptx::mbarrier_try_wait_parity(barrier, parity)) return true;
    if ((spins & 63) != 63) continue;
    if (kernel_aborted(site.globals)) return false;
    const uint64_t now = global_timer_ns();
    if (start == 0) {
      start = now;
    } else if (now - start > site.watchdog_ns) {
      DeviceErrorRecord r;
      r.code = uint32_t(DeviceErrorCode::watchdog);
      r.cta = blockIdx.x;
      r.task = site.task;
      r.op = uint32_t(site.desc->op);
      r.layer = site.desc->layer;
      r.tile_begin = site.desc->tile_begin;
      r.tile_end = site.desc->tile_end;
      r.wait_kind = uint32_t(DeviceWaitKind::weight_stage);
      r.event = site.stage;
      r.target = parity;
      r.waited_ms = uint32_t((now - start) / 1000000);
      raise_device_error(site.mailbox, site.globals, r);
      return false;
    }
  }
#else
  return false;  // no staging before Hopper: never called
#endif
}

// dots[t * total_rows + i] = xs[t, :] . (row i of the task's weight stream), for t < count and every row
// i of the stream's ranges in order (total_rows of them). From global memory, row i goes to warp
// i mod kDeviceConsumerWarps; from the stages, chunk by chunk as for_each_stream_chunk cuts the stream
// (whole rows the same way; a wide row's segments to one warp, which carries its sums across them).
// Returns after consumers_sync, so dots are readable by every consumer.
__device__ __forceinline__ void gemv_task_rows(DeviceTileContext& ctx, uint32_t K, const float* xs, uint32_t count,
                                               float* dots, uint32_t total_rows) {
  const WeightStreamDesc& s = *ctx.stream;
  const uint32_t warp = warp_id(), lane = lane_id();
  if (!ctx.staged) {
    const bool vectorised = K % 8 == 0 && s.row_bytes % 16 == 0;
    uint32_t row_base = 0;
    for (uint32_t r = 0; r < s.range_count; ++r) {
      const WeightStreamDesc::Range range = s.ranges[r];
      const unsigned char* base = ctx.slot<const unsigned char>(range.slot) + range.offset;
      for (uint32_t i = (warp + kDeviceConsumerWarps - row_base % kDeviceConsumerWarps) % kDeviceConsumerWarps;
           i < range.rows; i += kDeviceConsumerWarps) {
        if (vectorised)
          dot_row<true>(base + uint64_t(i) * s.row_bytes, false, K, xs, count, dots + row_base + i, total_rows);
        else
          dot_row<false>(base + uint64_t(i) * s.row_bytes, false, K, xs, count, dots + row_base + i, total_rows);
      }
      row_base += range.rows;
    }
    consumers_sync();
    return;
  }
  float carried[kDeviceMaxPassTokens] = {};  // segmented: this warp's sums of its row so far
  for_each_stream_chunk(s, ctx.ring.stage_bytes, [&](const StreamChunk& chunk) {
    const uint32_t stage = ctx.stage, parity = ctx.phase;
    if (++ctx.stage == ctx.ring.stage_count) {
      ctx.stage = 0;
      ctx.phase ^= 1u;
    }
    // Every lane waits itself (that is what orders the bulk-copied bytes before its reads), and the warp
    // leaves together if any lane saw the kernel abort: the shuffles below need all 32 lanes.
    const StageWaitSite site{ctx.mailbox, ctx.globals, ctx.watchdog_ns, ctx.task, ctx.task_desc, stage};
    if (!__all_sync(0xffffffffu, mbarrier_wait(ctx.ring.full + stage, parity, site))) {
      ctx.aborted = true;
      return false;
    }
    const unsigned char* bytes = ctx.ring.stages + uint64_t(stage) * ctx.ring.stage_bytes;
    const uint32_t first = chunk.stream_row;  // the chunk's first row among all the stream's rows
    if (chunk.whole_rows()) {
      for (uint32_t i = (warp + kDeviceConsumerWarps - first % kDeviceConsumerWarps) % kDeviceConsumerWarps; i < chunk.rows;
           i += kDeviceConsumerWarps)
        dot_row<true>(bytes + uint64_t(i) * s.row_bytes, true, K, xs, count, dots + first + i, total_rows);
    } else if (warp < chunk.rows) {
      // This warp's row segment: vectors [begin, begin + n) of the row (a vector: 16 bytes, 8 bf16), lane
      // l the ones = l mod 32 (begin is a multiple of 32 vectors), as the whole row would give them to it.
      const uint4* segment = reinterpret_cast<const uint4*>(bytes + uint64_t(warp) * chunk.row_pitch);
      const uint32_t begin = chunk.byte_begin / 16, n = chunk.bytes_per_row / 16;
      for (uint32_t v = lane; v < n; v += 32) accumulate_vector(segment[v], xs, K, begin + v, count, carried);
      if (chunk.ends_rows(s.row_bytes)) {
        store_warp_sums(carried, count, dots + first + warp, total_rows);
#pragma unroll
        for (uint32_t t = 0; t < kDeviceMaxPassTokens; ++t) carried[t] = 0.0f;
      }
    }
    __syncwarp();
#if TILEFIRE_DEVICE_SM90
    if (lane == 0) ptx::mbarrier_arrive(ctx.ring.empty + stage);
#endif
    return true;
  });
  consumers_sync();
}

}  // namespace tilefire::device
