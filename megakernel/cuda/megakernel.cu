// The persistent megakernel: one CTA per SM, each a worker of the Program (docs/CUDA.md).
//
// A CTA is kDeviceConsumerWarps consumer warps that run tiles and one producer warp that streams the
// weights of the CTA's upcoming tasks into shared-memory stages (bulk copies completing on mbarriers,
// Hopper only). The producer walks the same static queue as the consumers but never waits for events,
// so the next task's weights are on chip while the task still waits for its inputs.
//
// The step protocol is the CPU executor's (megakernel/cpu/cpu_executor.cpp): grow-only event counters
// with target trigger * step, acquire at gpu scope before a tile, release after it; a node's done event
// coalesced per run of tiles; the dynamic ready queue stamped with its step; bsp as a grow-only grid
// barrier between nodes. Every spin has a watchdog that turns a hang into an error record.
#include <cuda_runtime.h>

#include "megakernel/cuda/megakernel_launch.h"
#include "ops/cuda/all_ops.cuh"

namespace tilefire::device {

namespace {

using ptx::load_acquire_gpu;
using ptx::load_acquire_system;
using ptx::store_release_gpu;
using ptx::store_release_system;

// Counters only grow and may wrap: `value` has reached `target` when it is at most 2^31 behind.
__device__ __forceinline__ bool counter_reached(uint32_t value, uint32_t target) { return int32_t(value - target) >= 0; }

// Everything a CTA's threads share about the step in flight.
struct CtaState {
  DeviceJob job;
  int32_t tokens[kMailboxTokens];  // the step's tokens, read once (mapped host memory in resident mode)
  uint32_t positions[kMailboxTokens];  // a step of several sequences: each token's position and slot
  uint32_t sequences[kMailboxTokens];
  DeviceProgramView program;  // the job's program (kept here, not in registers: every tile needs registers more)
  uint32_t task;    // broadcast by thread 0: the task to run next (dynamic queue)
  uint32_t proceed; // broadcast by thread 0: 0 when the kernel aborts or the queue is empty
};

class Worker {
 public:
  __device__ __forceinline__ Worker(const KernelConfig& config, CtaState& state, unsigned char* dynamic_shared, uint64_t* full,
                    uint64_t* empty)
      : config_(config), state_(state), program_(state.program) {
    ring_.stages = dynamic_shared;
    ring_.full = full;
    ring_.empty = empty;
    ring_.stage_bytes = config.stage_bytes;
    ring_.stage_count = config.stage_count;
    workspace_ = reinterpret_cast<float*>(dynamic_shared + uint64_t(config.stage_bytes) * config.stage_count);
  }

  // Before the CTA exits (all its threads past the last step's closing barrier): the producer warp waits
  // for bulk copies still landing. After a completed step there are none, and this returns at once.
  __device__ __forceinline__ void before_exit() const {
    if (threadIdx.x >= kDeviceConsumerThreads) drain_weight_stages();
  }

  // One step: the producer warp streams weights; the consumer warps run the queue.
  __device__ __forceinline__ void run_step() {
    if (threadIdx.x >= kDeviceConsumerThreads) {
      if (staging_enabled() && program_.header->placement == uint8_t(Placement::static_queues)) produce_weights();
      return;
    }
    if (state_.job.bsp)
      run_bsp();
    else if (program_.header->placement == uint8_t(Placement::dynamic_queue))
      run_dynamic();
    else
      run_static();
  }

  // The last CTA to finish a step publishes its greedy token and marks it done in the mailbox.
  __device__ __forceinline__ void finish_step() {
    if (threadIdx.x != 0) return;
    DeviceGlobals* globals = config_.globals;
    __threadfence();
    const uint32_t finished = atomicAdd(&globals->ctas_done, 1u) + 1;
    if (finished != gridDim.x * state_.job.kernel_step) return;
    __threadfence();
    Mailbox* mailbox = config_.mailbox;
    const unsigned long long key = atomicExch(&globals->argmax_key, 0ull);
    const uint32_t nonfinite = atomicExch(&globals->nonfinite, 0u);
    *reinterpret_cast<volatile unsigned long long*>(&mailbox->argmax_key) = key;
    *reinterpret_cast<volatile uint32_t*>(&mailbox->nonfinite) = nonfinite;
    __threadfence_system();
    store_release_system(&mailbox->done, state_.job.kernel_step);
  }

  __device__ __forceinline__ bool aborted() const { return kernel_aborted(config_.globals); }

 private:
  __device__ __forceinline__ bool staging_enabled() const {
#if TILEFIRE_DEVICE_SM90
    return config_.stage_count > 0 && state_.job.stage_weights;
#else
    return false;  // bulk copies and mbarrier transaction counts need sm_90
#endif
  }
  __device__ __forceinline__ bool staged(uint32_t task) const {
    return staging_enabled() && task_streams_staged(program_.weight_streams[task], config_.stage_bytes, program_.header->tokens,
                                                    program_.header->placement, true);
  }

  // --- the producer warp ---------------------------------------------------------------------------
  __device__ __forceinline__ void produce_weights() {
#if TILEFIRE_DEVICE_SM90
    if (lane_id() != 0 || blockIdx.x >= program_.header->worker_count) return;
    const uint32_t* tasks = state_.job.bsp ? program_.bsp_tasks : program_.queue_tasks;  // as the consumers
    for (uint32_t q = program_.queue_begin[blockIdx.x]; q < program_.queue_begin[blockIdx.x + 1]; ++q) {
      const uint32_t task = tasks[q];
      if (!staged(task)) continue;
      const WeightStreamDesc& s = program_.weight_streams[task];
      bool stopped = false;
      for_each_stream_chunk(s, ring_.stage_bytes, [&](const StreamChunk& chunk) {
        const unsigned char* base =
            static_cast<const unsigned char*>(state_.job.slots[s.ranges[chunk.range].slot]) + s.ranges[chunk.range].offset;
        const uint32_t stage = producer_stage_, phase = producer_phase_;
        if (++producer_stage_ == ring_.stage_count) {
          producer_stage_ = 0;
          producer_phase_ ^= 1u;
        }
        // The stage is free once the consumers released its previous use; on the first lap the barrier
        // is fresh and a wait for the opposite parity passes at once. This wait begins when the ring
        // fills and lasts through the consumers' own waits and tasks until they read the stage, so it
        // runs with four times the bound: a stuck event or copy is the consumers' record, naming what
        // they wait on; the producer's fires only where they are not waiting at all (a staging rule the
        // two sides read differently), which would otherwise hang the kernel.
        const uint64_t producer_bound = config_.watchdog_ns > ~0ull / 4 ? ~0ull : 4 * config_.watchdog_ns;
        const StageWaitSite site{config_.mailbox, config_.globals, producer_bound, task, &program_.tasks[task], stage};
        if (!mbarrier_wait(ring_.empty + stage, phase ^ 1u, site)) {
          producer_stage_ = stage;  // nothing was armed there: drain_weight_stages must not wait for it
          producer_phase_ = phase;
          stopped = true;
          return false;
        }
        uint64_t* full = ring_.full + stage;
        unsigned char* destination = ring_.stages + uint64_t(stage) * ring_.stage_bytes;
        // One transaction count for the whole chunk; each copy completes its share of it.
        ptx::mbarrier_arrive_expect_tx(full, chunk.rows * chunk.bytes_per_row);
        if (chunk.whole_rows()) {  // consecutive rows: one copy
          ptx::bulk_copy_to_shared(destination, base + uint64_t(chunk.first_row) * s.row_bytes, chunk.rows * s.row_bytes, full);
        } else {  // a segment of each row of the group, row i at i * row_pitch
          for (uint32_t i = 0; i < chunk.rows; ++i)
            ptx::bulk_copy_to_shared(destination + uint64_t(i) * chunk.row_pitch,
                                     base + uint64_t(chunk.first_row + i) * s.row_bytes + chunk.byte_begin, chunk.bytes_per_row,
                                     full);
        }
        return true;
      });
      if (stopped) return;
    }
#endif
  }

  // Producer lane 0, before the CTA exits: after an abort the consumers may have left chunks unread
  // whose bulk copies are still landing, and a CTA must not exit with async-proxy
  // writes into its shared memory in flight. Each stage's last armed phase (the current lap's below the
  // producer's position, the previous lap's from it on) completes once its copies land, so this waits
  // for those, within a bound in case a copy never completes (then the kernel has faulted anyway).
  __device__ __forceinline__ void drain_weight_stages() const {
#if TILEFIRE_DEVICE_SM90
    // Not staging_enabled(): a resident kernel shut down before its first step has no job to ask. A
    // stage never armed passes at once (a fresh barrier's phase before the first counts as complete).
    if (lane_id() != 0) return;
    constexpr uint64_t kDrainBoundNs = 50'000'000;
    const uint64_t start = global_timer_ns();
    for (uint32_t stage = 0; stage < ring_.stage_count; ++stage) {
      const uint32_t parity = stage < producer_stage_ ? producer_phase_ : producer_phase_ ^ 1u;
      while (!ptx::mbarrier_try_wait_parity(ring_.full + stage, parity) && global_timer_ns() - start < kDrainBoundNs) {
      }
    }
#endif
  }

  // --- waiting, with the watchdog ------------------------------------------------------------------
  // Thread 0 only. Spins until *counter reaches target; false when the watchdog fires or the kernel aborts.
  template <class Load>
  __device__ __forceinline__ bool wait_until(Load load, uint32_t target, DeviceWaitKind kind, uint32_t what, uint32_t task) {
    uint32_t value = load();
    if (counter_reached(value, target)) return true;
    const uint64_t start = global_timer_ns();
    for (uint32_t spins = 1;; ++spins) {
      value = load();
      if (counter_reached(value, target)) return true;
      if (spins % 64 == 0) {
        if (aborted()) return false;
        const uint64_t waited = global_timer_ns() - start;
        if (waited > config_.watchdog_ns) {
          report_hang(kind, what, value, target, task, waited);
          return false;
        }
        if (spins > 4096) __nanosleep(256);  // a long wait: leave the memory system to the others
      }
    }
  }

  __device__ __forceinline__ void report_hang(DeviceWaitKind kind, uint32_t what, uint32_t value, uint32_t target, uint32_t task, uint64_t waited_ns) {
    DeviceErrorRecord r;
    r.code = uint32_t(DeviceErrorCode::watchdog);
    r.wait_kind = uint32_t(kind);
    r.event = what;
    r.counter = value;
    r.target = target;
    r.waited_ms = uint32_t(waited_ns / 1000000);
    fill_task(r, task);
    raise_error(r);
  }

  __device__ __forceinline__ void fill_task(DeviceErrorRecord& r, uint32_t task) const {
    r.cta = blockIdx.x;
    r.task = task;
    if (task < program_.header->task_count) {
      const TaskDesc& t = program_.tasks[task];
      r.op = uint32_t(t.op);
      r.layer = t.layer;
      r.tile_begin = t.tile_begin;
      r.tile_end = t.tile_end;
    }
  }

  __device__ __forceinline__ void raise_error(const DeviceErrorRecord& r) {
    raise_device_error(config_.mailbox, config_.globals, r);
  }

  // --- running one task on the consumer warps --------------------------------------------------------
  __device__ __forceinline__ void run_task(uint32_t task) {
    const TaskDesc& t = program_.tasks[task];
    DeviceTaskTiming* const trace = state_.job.trace;
    const unsigned long long started = trace != nullptr && threadIdx.x == 0 ? global_timer_ns() : 0;
    DeviceTileContext ctx;
    ctx.slots = state_.job.slots;
    ctx.tokens = state_.tokens;
    ctx.tokens_count = state_.job.tokens_count;
    ctx.position0 = state_.job.position0;
    ctx.positions = state_.job.positions ? state_.positions : nullptr;
    ctx.sequences = state_.job.sequences ? state_.sequences : nullptr;
    ctx.sequence0 = state_.job.sequence0;
    ctx.workspace = workspace_;
    ctx.workspace_floats = state_.job.workspace_floats;
    ctx.stream = &program_.weight_streams[task];
    ctx.staged = staged(task);
    ctx.ring = ring_;
    ctx.stage = consumer_stage_;
    ctx.phase = consumer_phase_;
    ctx.globals = config_.globals;
    ctx.mailbox = config_.mailbox;
    ctx.watchdog_ns = config_.watchdog_ns;
    ctx.task = task;
    ctx.task_desc = &t;
    ctx.layer = t.layer;
    ctx.ranks = state_.job.ranks;
    ctx.epoch = state_.job.epoch;
    if (!run_device_tile(t.op, program_.node_params[t.node], TileRange{t.tile_begin, t.tile_end}, ctx)) {
      // The host encoder refuses unknown opcodes; reaching this means corrupted memory. Thread 0 writes
      // the record before the trap ends the kernel; the others wait for it.
      if (threadIdx.x == 0) {
        DeviceErrorRecord r;
        r.code = uint32_t(DeviceErrorCode::unknown_opcode);
        fill_task(r, task);
        raise_error(r);
        __threadfence_system();
        __trap();
      }
      consumers_sync();
    }
    consumer_stage_ = ctx.stage;
    consumer_phase_ = ctx.phase;
    consumers_sync();  // the tile's outputs are written before thread 0 signals
    if (trace != nullptr && threadIdx.x == 0) {
      DeviceTaskTiming& record = trace[task];
      record.start_ns = started;
      record.end_ns = global_timer_ns();
      record.cta = blockIdx.x;
      record.kernel_step = state_.job.kernel_step;
    }
  }

  // Thread 0: `count` signals of event e, released at gpu scope (the caller fenced after the tile).
  __device__ __forceinline__ void signal(uint32_t e, uint32_t count) { atomicAdd(state_.job.events + e, count); }

  __device__ __forceinline__ bool broadcast(bool value) {
    if (threadIdx.x == 0) state_.proceed = value ? 1u : 0u;
    consumers_sync();
    const bool result = state_.proceed != 0;
    consumers_sync();  // nobody overwrites `proceed` before everyone has read it
    return result;
  }

  // Static queues: this CTA's tasks in order, each once its events reach their targets.
  __device__ __forceinline__ void run_static() {
    const DeviceJob& job = state_.job;
    const uint32_t begin = program_.queue_begin[blockIdx.x], end = program_.queue_begin[blockIdx.x + 1];
    // A node's done event fires only when every tile of the node is done, so a CTA's run of tiles of one
    // node adds its count once, at the end of the run or before the CTA would wait (as the CPU twin).
    uint32_t pending_event = kNoSlot, pending_count = 0;
    auto flush = [&] {
      if (pending_count) signal(pending_event, pending_count);
      pending_count = 0;
    };
    for (uint32_t q = begin; q < end; ++q) {
      const uint32_t task = program_.queue_tasks[q];
      const TaskDesc& t = program_.tasks[task];
      bool ready = true;
      if (threadIdx.x == 0) {
        for (uint32_t i = 0; i < t.wait_count && ready; ++i) {
          const uint32_t e = program_.waits[t.wait_begin + i];
          const uint32_t target = program_.triggers[e] * job.step;
          if (counter_reached(load_acquire_gpu(job.events + e), target)) continue;
          __threadfence();
          flush();
          ready = wait_until([&] { return load_acquire_gpu(job.events + e); }, target, DeviceWaitKind::event, e, task);
        }
        __threadfence();
      }
      if (!broadcast(ready)) return;
      run_task(task);
      if (threadIdx.x == 0) {
        __threadfence();
        const uint32_t done = program_.node_done[t.node];
        for (uint32_t i = 0; i < t.signal_count; ++i) {
          const uint32_t e = program_.signals[t.signal_begin + i];
          if (e == done) {
            if (pending_event != e) flush();
            pending_event = e;
            ++pending_count;
          } else {
            signal(e, 1);
          }
        }
        if (q + 1 == end || program_.tasks[program_.queue_tasks[q + 1]].node != t.node) flush();
      }
    }
  }

  // The dynamic ready queue: tasks that wait on nothing first, then tasks in the order their last input
  // event fired. The CTA that completes an event makes its waiters ready.
  __device__ __forceinline__ void run_dynamic() {
    const DeviceJob& job = state_.job;
    const uint32_t tasks = program_.header->task_count, initial = program_.header->initial_ready_count;
    for (;;) {
      if (threadIdx.x == 0) {
        const uint32_t index = atomicAdd(job.counters + 1, 1u) - job.pop_base;
        uint32_t task = kNoSlot;
        if (index < initial) {
          task = program_.initial_ready[index];
        } else if (index < tasks) {
          const unsigned long long* entry = job.ready_list + (index - initial);
          const bool stamped = wait_until([&] { return uint32_t(load_acquire_gpu(entry) >> 32); }, job.dynamic_step,
                                          DeviceWaitKind::ready_queue, index, kNoSlot);
          if (stamped) task = uint32_t(load_acquire_gpu(entry));
        }
        state_.task = task;
        __threadfence();
      }
      consumers_sync();
      const uint32_t task = state_.task;
      consumers_sync();
      if (task == kNoSlot) return;
      run_task(task);
      if (threadIdx.x == 0) {
        __threadfence();
        const TaskDesc& t = program_.tasks[task];
        for (uint32_t i = 0; i < t.signal_count; ++i) {
          const uint32_t e = program_.signals[t.signal_begin + i];
          const uint32_t value = atomicAdd(job.events + e, 1u) + 1;
          if (value != program_.triggers[e] * job.step) continue;
          __threadfence();
          for (uint32_t k = program_.waiter_begin[e]; k < program_.waiter_begin[e + 1]; ++k) {
            const uint32_t waiter = program_.waiters[k];
            const uint32_t need = uint32_t(program_.tasks[waiter].wait_count) * job.dynamic_step;
            if (atomicAdd(job.satisfied + waiter, 1u) + 1 != need) continue;
            __threadfence();  // the other producers of the waiter's inputs, seen through `satisfied`, come first
            const uint32_t slot = atomicAdd(job.counters + 0, 1u) - job.push_base;
            store_release_gpu(job.ready_list + slot, (static_cast<unsigned long long>(job.dynamic_step) << 32) | waiter);
          }
        }
      }
    }
  }

  // Bulk-synchronous: node by node, the CTA's tiles of the node, then a grid barrier (grow-only count).
  __device__ __forceinline__ void run_bsp() {
    const DeviceJob& job = state_.job;
    const uint32_t nodes = program_.header->node_count, ctas = gridDim.x;
    const bool static_queues = program_.header->worker_count != 0;
    uint32_t next = static_queues ? program_.queue_begin[blockIdx.x] : 0;
    const uint32_t end = static_queues ? program_.queue_begin[blockIdx.x + 1] : 0;
    uint32_t target = ctas * nodes * (job.bsp_step - 1);
    for (uint32_t n = 0; n < nodes; ++n) {
      const uint32_t done = program_.node_done[n];
      uint32_t tiles_run = 0;
      auto run = [&](uint32_t task) {
        run_task(task);
        if (threadIdx.x == 0) {
          const TaskDesc& t = program_.tasks[task];
          for (uint32_t i = 0; i < t.signal_count; ++i) {
            const uint32_t e = program_.signals[t.signal_begin + i];
            if (e != done) signal(e, 1);  // kept in step for later dataflow steps
          }
        }
        ++tiles_run;
      };
      if (static_queues) {
        for (; next < end && program_.tasks[program_.bsp_tasks[next]].node == n; ++next) run(program_.bsp_tasks[next]);
      } else {
        const uint32_t first = program_.node_first_task[n], count = program_.node_first_task[n + 1] - first;
        for (uint32_t i = blockIdx.x; i < count; i += ctas) run(first + i);
      }
      bool passed = true;
      if (threadIdx.x == 0) {
        __threadfence();
        if (done != kNoSlot && tiles_run) signal(done, tiles_run);
        atomicAdd(job.counters + 2, 1u);
        target += ctas;
        passed = wait_until([&] { return load_acquire_gpu(job.counters + 2); }, target, DeviceWaitKind::bsp_barrier, n, kNoSlot);
        __threadfence();
      }
      if (!broadcast(passed)) return;
    }
  }

  const KernelConfig& config_;
  CtaState& state_;
  const DeviceProgramView& program_;  // in shared memory
  StageRing ring_;
  float* workspace_ = nullptr;
  // The weight ring's position, kept across tasks and (resident) steps: stage, and the parity of the
  // current lap. Producer lane 0 and every consumer thread keep their own copy; they move in lockstep.
  uint32_t producer_stage_ = 0, producer_phase_ = 0;
  uint32_t consumer_stage_ = 0, consumer_phase_ = 0;
};

// Resident mode, thread 0: waits for the doorbell to reach `step` (or a shutdown) and copies the posted
// job into shared memory. No watchdog here: an idle engine is not a hang.
__device__ bool receive_job(const KernelConfig& config, uint32_t step, CtaState& state) {
  Mailbox* mailbox = config.mailbox;
  for (uint32_t spins = 0;; ++spins) {
    if (load_acquire_system(&mailbox->shutdown) || kernel_aborted(config.globals)) return false;
    if (counter_reached(load_acquire_system(&mailbox->doorbell), step)) break;
    if (spins > 1024) __nanosleep(500);
  }
  const volatile uint32_t* in = reinterpret_cast<const volatile uint32_t*>(&mailbox->job);
  uint32_t* out = reinterpret_cast<uint32_t*>(&state.job);
  for (uint32_t i = 0; i < sizeof(DeviceJob) / 4; ++i) out[i] = in[i];
  state.program = view_device_program(*reinterpret_cast<const DeviceProgramHeader*>(state.job.program), state.job.program);
  for (uint32_t i = 0; i < state.job.tokens_count && i < kMailboxTokens; ++i) state.tokens[i] = __ldcv(state.job.tokens + i);
  if (state.job.positions)
    for (uint32_t i = 0; i < state.job.tokens_count && i < kMailboxTokens; ++i) {
      state.positions[i] = __ldcv(state.job.positions + i);
      state.sequences[i] = __ldcv(state.job.sequences + i);
    }
  return true;
}

}  // namespace

__global__ void __launch_bounds__(kDeviceThreads, 1) megakernel(const __grid_constant__ KernelConfig config) {
#if defined(TILEFIRE_DEVICE_EMULATION)
  unsigned char* const dynamic_shared = emulation::dynamic_shared_memory();
#else
  extern __shared__ __align__(128) unsigned char dynamic_shared[];
#endif
  __shared__ __align__(8) uint64_t full[kDeviceMaxStages];
  __shared__ __align__(8) uint64_t empty[kDeviceMaxStages];
  // CtaState holds structs with default member initialisers, which __shared__ variables may not have.
  __shared__ __align__(16) unsigned char state_storage[sizeof(CtaState)];
  CtaState& state = *reinterpret_cast<CtaState*>(state_storage);
  __shared__ uint32_t running;
#if TILEFIRE_DEVICE_SM90
  if (threadIdx.x == 0) {
    for (uint32_t s = 0; s < config.stage_count; ++s) {
      ptx::mbarrier_init(full + s, 1);
      ptx::mbarrier_init(empty + s, kDeviceConsumerWarps);
    }
    ptx::fence_mbarrier_init();
  }
#endif
  Worker worker(config, state, dynamic_shared, full, empty);
  if (!config.resident) {
    if (threadIdx.x == 0) {
      state.job = config.job;
      state.program = view_device_program(*reinterpret_cast<const DeviceProgramHeader*>(config.job.program), config.job.program);
      for (uint32_t i = 0; i < config.job.tokens_count && i < kMailboxTokens; ++i) state.tokens[i] = config.job.tokens[i];
      if (config.job.positions)
        for (uint32_t i = 0; i < config.job.tokens_count && i < kMailboxTokens; ++i) {
          state.positions[i] = config.job.positions[i];
          state.sequences[i] = config.job.sequences[i];
        }
    }
    __syncthreads();
    worker.run_step();
    __syncthreads();
    if (threadIdx.x == 0 && !worker.aborted()) worker.finish_step();
    worker.before_exit();
    return;
  }
  for (uint32_t step = config.first_kernel_step;; ++step) {
    if (threadIdx.x == 0) running = receive_job(config, step, state) ? 1u : 0u;
    __syncthreads();
    if (!running) {
      worker.before_exit();
      return;
    }
    worker.run_step();
    __syncthreads();
    // Thread 0 alone decides; after an abort its next receive_job returns false, and the broadcast of
    // `running` makes every thread of the CTA leave together.
    if (threadIdx.x == 0 && !worker.aborted()) worker.finish_step();
  }
}

}  // namespace tilefire::device

namespace tilefire {

const void* megakernel_entry() { return reinterpret_cast<const void*>(&device::megakernel); }

}  // namespace tilefire
