#pragma once
// The collective tile ops on the device (the CPU twins: transport/collective_ops.h), over the group's
// windows and flags as this rank's kernel reaches them (DeviceRankView, megakernel/cuda/device_job.h):
//  - allreduce_residual: out[:, c0:c1] = residual[:, c0:c1] + the ranks' partial sums in rank order;
//  - allgather_logits: every owner's share of the logits, with the step's greedy token and non-finite
//    flag reduced over the whole vocabulary as it is copied (the LM head of a rank sees only its share);
//    a batched decode step's rows are copied without that reduction, as its LM head's are.
// Thread 0 publishes this rank's flag (its input was acquired at gpu scope when the task's events were
// satisfied; the publish fences at system scope) and then acquires the peers' flags, with a watchdog
// that names the peer. The sums are f32 in rank order, the same operations as the CPU twin, so every
// rank gets bitwise the same hidden state.
#include "ops/cuda/device_tile.cuh"
#include "transport/collective_ops.h"
#include "transport/cuda/device_flags.cuh"

namespace tilefire::device {

// A peer's data, read after its flag was acquired: at system scope, never from a stale cached copy.
__device__ __forceinline__ float load_peer_float(const float* p) { return ptx::load_relaxed_system(p); }

// Thread 0: waits until `peer`'s flag `slot` reaches the step's epoch. False when the kernel aborts, or
// after the group's timeout (then it raises the error record: the peer, the flag, what it held).
__device__ __forceinline__ bool wait_peer_flag(const DeviceRankView& view, uint32_t peer, uint32_t slot, OpCode op,
                                               TileRange tile, DeviceTileContext& ctx) {
  const unsigned long long* flag = view.flags[peer] + slot;
  unsigned long long seen = load_acquire_system_u64(flag);
  if (seen >= ctx.epoch) return true;
  const uint64_t start = global_timer_ns();
  for (uint32_t spins = 1;; ++spins) {
    seen = load_acquire_system_u64(flag);
    if (seen >= ctx.epoch) return true;
    if (spins % 64 != 0) continue;
    if (kernel_aborted(ctx.globals)) return false;
    const uint64_t waited = global_timer_ns() - start;
    if (waited > view.timeout_ns) {
      DeviceErrorRecord r;
      r.code = uint32_t(DeviceErrorCode::watchdog);
      r.cta = blockIdx.x;
      r.task = ctx.task;
      r.op = uint32_t(op);
      r.layer = ctx.layer;
      r.tile_begin = tile.begin;
      r.tile_end = tile.end;
      r.wait_kind = uint32_t(DeviceWaitKind::peer_flag);
      r.event = slot;
      r.counter = uint32_t(seen);
      r.target = uint32_t(ctx.epoch);
      r.waited_ms = uint32_t(waited / 1000000);
      r.peer = peer;
      raise_device_error(ctx.mailbox, ctx.globals, r);
      return false;
    }
    if (spins > 4096) __nanosleep(256);
  }
}

// Thread 0's verdict to every consumer thread, through the tile's workspace.
__device__ __forceinline__ bool consumers_agree(bool ok, DeviceTileContext& ctx) {
  uint32_t* verdict = reinterpret_cast<uint32_t*>(ctx.workspace);
  if (threadIdx.x == 0) *verdict = ok ? 1u : 0u;
  consumers_sync();
  return *verdict != 0;  // the tile's closing barrier (run_task) comes before anyone writes it again
}

// Byte offset of a window slot inside this rank's window: the same slot sits at the same offset in
// every rank's window.
__device__ __forceinline__ uint64_t window_offset(const DeviceRankView& view, const void* slot) {
  return uint64_t(static_cast<const unsigned char*>(slot) - view.windows[view.rank]);
}

template <>
struct DeviceTile<OpCode::allreduce_residual> {
  using Params = AllreduceResidualParams;
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const DeviceRankView& view = *ctx.ranks;  // the host refuses a collective program without a group
    const uint32_t slot = p.flag_base + tile.begin / p.tile_width;
    const uint64_t offset = window_offset(view, ctx.slot<const float>(p.partial));
    bool ok = true;
    if (threadIdx.x == 0) {
      publish_epoch(view.flags[view.rank] + slot, ctx.epoch);  // first, so ranks waiting on each other cannot deadlock
      for (uint32_t r = 0; r < view.ranks && ok; ++r)
        if (r != view.rank) ok = wait_peer_flag(view, r, slot, OpCode::allreduce_residual, tile, ctx);
      __threadfence_system();
    }
    if (!consumers_agree(ok, ctx)) return;
    const float* residual = p.residual == kNoSlot ? nullptr : ctx.slot<const float>(p.residual);  // [tokens, cols]
    float* out = ctx.slot<float>(p.out);                                                      // [tokens, cols]
    for (uint32_t m = 0; m < ctx.tokens_count; ++m) {
      const uint64_t row = uint64_t(m) * p.cols;
      for (uint32_t c = tile.begin + threadIdx.x; c < tile.end; c += kDeviceConsumerThreads) {
        float sum = load_peer_float(reinterpret_cast<const float*>(view.windows[0] + offset) + row + c);
        for (uint32_t r = 1; r < view.ranks; ++r)
          sum += load_peer_float(reinterpret_cast<const float*>(view.windows[r] + offset) + row + c);
        out[row + c] = residual ? __ldcg(residual + row + c) + sum : sum;
      }
    }
  }
};

template <>
struct DeviceTile<OpCode::allgather_logits> {
  using Params = AllgatherLogitsParams;
  __device__ static void run(const Params& p, TileRange tile, DeviceTileContext& ctx) {
    const DeviceRankView& view = *ctx.ranks;
    const uint64_t offset = window_offset(view, ctx.slot<const float>(p.local));
    float* out = ctx.slot<float>(p.out);  // [rows, vocab]
    unsigned long long best = 0;
    bool nonfinite = false;
    for (uint32_t owner = tile.begin; owner < tile.end; ++owner) {
      uint32_t begin, end;
      AllgatherLogitsOp::share(p, owner, &begin, &end);
      bool ok = true;
      if (threadIdx.x == 0) {
        if (owner == view.rank)
          publish_epoch(view.flags[view.rank] + p.flag_base + owner, ctx.epoch);
        else
          ok = wait_peer_flag(view, owner, p.flag_base + owner, OpCode::allgather_logits, tile, ctx);
        __threadfence_system();
      }
      if (!consumers_agree(ok, ctx)) return;
      const uint32_t owned = end - begin;
      const float* in = reinterpret_cast<const float*>(view.windows[owner] + offset);  // [rows, owned]
      if (p.rows == 1) {
        for (uint32_t i = threadIdx.x; i < owned; i += kDeviceConsumerThreads) {
          const float v = load_peer_float(in + i);
          out[begin + i] = v;
          if (!isfinite(v)) nonfinite = true;
          else best = max(best, argmax_key_of(v, begin + i));
        }
      } else {  // a batched decode step: every sequence's row, no greedy reduction (the host picks each token)
        for (uint32_t r = 0; r < p.rows; ++r)
          for (uint32_t i = threadIdx.x; i < owned; i += kDeviceConsumerThreads)
            out[uint64_t(r) * p.vocab + begin + i] = load_peer_float(in + uint64_t(r) * owned + i);
      }
      consumers_sync();  // the verdict slot is reused by the next owner
    }
    if (p.rows == 1) reduce_greedy_into_step(best, nonfinite, ctx.globals);
  }
};

}  // namespace tilefire::device
