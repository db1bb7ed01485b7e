#include "megakernel/cpu/cpu_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <pthread.h>
#include <sched.h>

#include "ops/all_ops.h"
#include "ops/splitmix64.h"
#include "scheduler/validator.h"

#include <immintrin.h>

namespace tilefire {

struct CpuExecutor::Job {
  ProgramInstance* instance = nullptr;
  const Program* program = nullptr;
  StepInputs inputs;
  StepOptions options;
  uint32_t step = 0;          // 1-based step of this instance (event targets: trigger * step)
  uint32_t dynamic_step = 0;  // 1-based count of its dynamic-queue steps (ready list, satisfied waits)
  uint32_t bsp_step = 0;      // 1-based count of its bsp steps (barrier targets)
  uint32_t push_base = 0;     // dynamic: the ready list's push and claim counters when the step began
  uint32_t pop_base = 0;
  // A tile that throws (a collective whose peer died) stops the step: every wait of every worker also
  // ends on `failed`, and run_step rethrows the first error.
  mutable std::atomic<bool> failed{false};
  mutable std::mutex error_mutex;
  mutable std::exception_ptr error;
};

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Hook policies: what happens around each task. NoHooks compiles to nothing.
struct NoHooks {
  void before(uint32_t) {}
  void after(uint32_t) {}
};

struct TraceHooks {
  std::vector<TaskTiming>* out;
  uint32_t worker;
  int64_t start = 0;
  void before(uint32_t) { start = now_ns(); }
  void after(uint32_t task) { out->push_back({task, worker, start, now_ns()}); }
};

// Stress: a random busy delay before each task (splitmix64 per worker), to shake out ordering bugs.
struct DelayHooks {
  uint64_t state;
  uint32_t max_us;
  void before(uint32_t) {
    const uint64_t z = splitmix64_next(state);
    const int64_t until = now_ns() + int64_t(z % (uint64_t(max_us) * 1000 + 1));
    while (now_ns() < until) cpu_relax();
  }
  void after(uint32_t) {}
};

// Two policies in order: first's before, second's before, the task, second's after, first's after.
template <class First, class Second>
struct BothHooks {
  First first;
  Second second;
  void before(uint32_t task) {
    first.before(task);
    second.before(task);
  }
  void after(uint32_t task) {
    second.after(task);
    first.after(task);
  }
};

// Worker 0 runs tiles on the caller's thread, whose floating-point control (x86 MXCSR: flush-to-zero,
// denormals-are-zero, rounding) the user may have changed since the pool threads were started with the
// constructing thread's. A step runs worker 0 under the pool's, so a tile gives the same bits on every
// worker, as the kernels promise (ops/matmul.cpp).
struct FloatEnvironmentScope {
#if defined(__x86_64__) || defined(__i386__)
  static uint32_t current() { return _mm_getcsr(); }
  explicit FloatEnvironmentScope(uint32_t pool) : caller(_mm_getcsr()) {
    if (caller != pool) _mm_setcsr(pool);
  }
  ~FloatEnvironmentScope() {
    if (_mm_getcsr() != caller) _mm_setcsr(caller);
  }
  FloatEnvironmentScope(const FloatEnvironmentScope&) = delete;
  FloatEnvironmentScope& operator=(const FloatEnvironmentScope&) = delete;
  const uint32_t caller;
#else
  static uint32_t current() { return 0; }
  explicit FloatEnvironmentScope(uint32_t) {}
#endif
};


// While a task waits for its inputs, its worker fetches the first kBudget bytes of the weights the tile
// will stream into L2, a few cache lines at a time between checks of the events. The wait becomes memory
// traffic the step needs anyway; a task that is ready at once fetches nothing here.
class IdlePrefetch {
 public:
  static constexpr uint64_t kBudget = kCpuIdlePrefetchBytes;
  static constexpr uint64_t kSlice = 256;  // bytes per call: 4 cache lines

  IdlePrefetch(const Program& program, const TaskDesc& task, void* const* slots)
      : program_(program), task_(task), slots_(slots) {}

  bool operator()() {
    if (!started_) start();
    if (range_ >= ranges_.count || issued_ >= kBudget) return false;
    const WeightRanges::Range& r = ranges_.ranges[range_];
    const char* line = static_cast<const char*>(slots_[r.slot]) + r.offset + position_;
    for (uint64_t b = 0; b < kSlice && position_ + b < r.bytes; b += 64) _mm_prefetch(line + b, _MM_HINT_T1);
    position_ += kSlice;
    issued_ += kSlice;
    if (position_ >= r.bytes) ++range_, position_ = 0;
    return true;
  }

 private:
  void start() {
    started_ = true;
    ranges_ = task_weight_ranges(program_, task_);
  }

  const Program& program_;
  const TaskDesc& task_;
  void* const* slots_;
  WeightRanges ranges_;
  bool started_ = false;
  uint32_t range_ = 0;
  uint64_t position_ = 0, issued_ = 0;
};

}  // namespace

ProgramInstance::ProgramInstance(const Program& program, std::vector<void*> slots)
    : program_(program), slots_(std::move(slots)) {
  const size_t events = program.events.size(), tasks = program.tasks.size();
  events_ = std::make_unique<std::atomic<uint32_t>[]>(events);
  for (size_t e = 0; e < events; ++e) events_[e].store(0, std::memory_order_relaxed);
  satisfied_ = std::make_unique<std::atomic<uint32_t>[]>(tasks);
  ready_list_ = std::make_unique<std::atomic<uint64_t>[]>(tasks);
  for (size_t t = 0; t < tasks; ++t) {
    satisfied_[t].store(0, std::memory_order_relaxed);
    ready_list_[t].store(0, std::memory_order_relaxed);
  }
  // event -> waiting tasks, as compressed rows
  waiter_begin_.assign(events + 1, 0);
  for (const TaskDesc& t : program.tasks)
    for (uint32_t i = 0; i < t.wait_count; ++i) ++waiter_begin_[program.waits[t.wait_begin + i] + 1];
  for (size_t e = 0; e < events; ++e) waiter_begin_[e + 1] += waiter_begin_[e];
  waiters_.resize(waiter_begin_[events]);
  bsp_violation_ = bsp_order_violation(program);
  bsp_queues_ = program.queues;
  for (auto& queue : bsp_queues_)
    std::stable_sort(queue.begin(), queue.end(),
                     [&](uint32_t a, uint32_t b) { return program.tasks[a].node < program.tasks[b].node; });
  std::vector<uint32_t> fill(waiter_begin_.begin(), waiter_begin_.end() - 1);
  for (uint32_t t = 0; t < tasks; ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) waiters_[fill[program.waits[task.wait_begin + i]]++] = t;
  }
}

std::vector<uint32_t> allowed_cpus() {
  std::vector<uint32_t> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (uint32_t c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

uint32_t usable_cores() { return std::max<uint32_t>(1, uint32_t(allowed_cpus().size())); }

void pin_to_core(std::thread::native_handle_type thread, uint32_t core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  pthread_setaffinity_np(thread, sizeof(set), &set);  // best effort
}

CpuExecutor::CpuExecutor(uint32_t workers, uint32_t first_cpu) : workers_(std::max(workers, 1u)), job_(std::make_unique<Job>()) {
  scratch_.resize(workers_);
  trace_buffers_.resize(workers_);
  // Worker 0 is the thread that calls run_step, so a step uses exactly `workers` threads. With a separate
  // host thread as well, on a machine with as many cores as workers, the host waited for a core after
  // each step while the workers spun on the doorbell: about 80 us per step on a 2-core VM.
  // Workers 1.. are pinned to the CPUs this process may use (taskset, cgroups), one each, when there are
  // enough; otherwise left to the kernel, since two pinned spinners on one core would starve each other.
  // The caller's thread is the user's, so it is not pinned.
  const std::vector<uint32_t> cpus = allowed_cpus();
  const bool pin = uint64_t(first_cpu) + workers_ <= cpus.size();
  if (pin) caller_cpu_ = int(cpus[first_cpu]);
  pool_mxcsr_ = FloatEnvironmentScope::current();  // what the pool threads inherit
  for (uint32_t w = 1; w < workers_; ++w) {
    threads_.emplace_back([this, w] { worker_main(w); });
    if (pin) pin_to_core(threads_.back().native_handle(), cpus[first_cpu + w]);
  }
}

// The kernel does not always move the calling thread off a pinned worker's CPU, even with the caller's
// own CPU idle (tens of milliseconds on the 2-core VM; every hop between the two then is a context
// switch). So when the caller finds itself on any CPU but the one left for it (a worker's of this
// executor, or of another rank's in the same process), it is moved there, by narrowing its affinity to
// that CPU (which migrates it at once) and restoring its own mask (which leaves it there): the user's
// thread keeps the affinity it had. Two system calls, only when needed; none when the caller's own mask
// excludes that CPU.
void CpuExecutor::keep_caller_on_its_cpu() const {
  if (caller_cpu_ < 0 || sched_getcpu() == caller_cpu_) return;
  cpu_set_t own, target;
  if (pthread_getaffinity_np(pthread_self(), sizeof(own), &own) != 0 || !CPU_ISSET(caller_cpu_, &own)) return;
  CPU_ZERO(&target);
  CPU_SET(caller_cpu_, &target);
  if (pthread_setaffinity_np(pthread_self(), sizeof(target), &target) == 0)
    pthread_setaffinity_np(pthread_self(), sizeof(own), &own);  // best effort, as pinning is
}

CpuExecutor::~CpuExecutor() {
  shutdown_.store(true, std::memory_order_release);
  doorbell_.fetch_add(1, std::memory_order_seq_cst);
  step_parking_.wake_all();
  for (std::thread& t : threads_) t.join();
}

void CpuExecutor::run_step(ProgramInstance& instance, const StepInputs& inputs, const StepOptions& options) {
  std::lock_guard lock(run_mutex_);
  keep_caller_on_its_cpu();
  const FloatEnvironmentScope pool_environment(pool_mxcsr_);
  const Program& program = instance.program();
  const uint32_t workers = this->workers();
  if (program.placement == Placement::static_queues && program.queues.size() != workers)
    throw std::runtime_error("cpu backend: program placed for " + std::to_string(program.queues.size()) +
                             " workers, executor has " + std::to_string(workers));
  for (auto& s : scratch_)
    if (s.size() < program.scratch_floats) s.resize(program.scratch_floats);
  if (options.trace)
    for (auto& b : trace_buffers_) {
      b.clear();
      b.reserve(program.tasks.size());
    }

  if (instance.broken_)
    throw std::runtime_error("cpu backend: this program's state is inconsistent after an earlier step failed");
  if (options.mode == ScheduleMode::bsp && !instance.bsp_violation_.empty())
    throw std::runtime_error("cpu backend: this program cannot run as bsp: " + instance.bsp_violation_);
  Job& job = *job_;
  job.failed.store(false, std::memory_order_relaxed);
  job.error = nullptr;
  job.instance = &instance;
  job.program = &program;
  job.inputs = inputs;
  job.options = options;
  job.step = instance.step_ + 1;
  const bool dynamic = program.placement == Placement::dynamic_queue && options.mode == ScheduleMode::dataflow;
  job.dynamic_step = instance.dynamic_steps_ + (dynamic ? 1 : 0);
  job.bsp_step = instance.bsp_steps_ + (options.mode == ScheduleMode::bsp ? 1 : 0);

  if (dynamic) {
    // The workers are idle between steps, so the ready list's counters can be read as this step's bases.
    job.push_base = instance.ready_push_.load(std::memory_order_relaxed);
    job.pop_base = instance.ready_pop_.load(std::memory_order_relaxed);
    // Seed the ready list with the tasks that wait on nothing.
    const uint32_t tasks = uint32_t(program.tasks.size());
    for (uint32_t t = 0; t < tasks; ++t) {
      if (program.tasks[t].wait_count != 0) continue;
      const uint32_t slot = instance.ready_push_.fetch_add(1, std::memory_order_relaxed) - job.push_base;
      instance.ready_list_[slot].store((uint64_t(job.dynamic_step) << 32) | t, std::memory_order_release);
    }
  }

  const uint32_t target = finished_.load(std::memory_order_relaxed) + (workers - 1);
  doorbell_.fetch_add(1, std::memory_order_seq_cst);  // publishes the job to workers 1..
  step_parking_.wake_all();
  run_worker_share(0);  // this thread is worker 0
  step_parking_.wait_until([&] { return counter_reached(finished_.load(std::memory_order_seq_cst), target); });
  if (job.failed.load(std::memory_order_seq_cst)) {
    instance.broken_ = true;  // its counters are part-way through a step
    std::rethrow_exception(job.error);
  }
  instance.step_ = job.step;
  instance.dynamic_steps_ = job.dynamic_step;
  instance.bsp_steps_ = job.bsp_step;

  if (options.trace)
    for (auto& b : trace_buffers_) options.trace->insert(options.trace->end(), b.begin(), b.end());
}

void CpuExecutor::worker_main(uint32_t worker) {
  uint32_t seen = 0;
  for (;;) {
    step_parking_.wait_until([&] { return doorbell_.load(std::memory_order_seq_cst) != seen; });
    seen = doorbell_.load(std::memory_order_acquire);
    if (shutdown_.load(std::memory_order_acquire)) return;
    run_worker_share(worker);
    finished_.fetch_add(1, std::memory_order_seq_cst);
    step_parking_.wake_all();
  }
}

void CpuExecutor::run_worker_share(uint32_t worker) {
  const Job& job = *job_;
  try {
    run_job_with_hooks(job, worker);
  } catch (...) {  // a tile threw (a collective's peer died): stop this step on every worker
    {
      std::lock_guard lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
    }
    job.failed.store(true, std::memory_order_seq_cst);
    task_parking_.wake_all();
  }
}

void CpuExecutor::run_job_with_hooks(const Job& job, uint32_t worker) {
  const bool trace = job.options.trace != nullptr, delay = job.options.max_random_delay_us != 0;
  auto delay_hooks = [&] {
    return DelayHooks{job.options.delay_seed * 7919 + worker * 104729 + job.step, job.options.max_random_delay_us};
  };
  if (trace && delay) {
    BothHooks<DelayHooks, TraceHooks> hooks{delay_hooks(), TraceHooks{&trace_buffers_[worker], worker}};
    run_job(job, worker, hooks);
  } else if (trace) {
    TraceHooks hooks{&trace_buffers_[worker], worker};
    run_job(job, worker, hooks);
  } else if (delay) {
    DelayHooks hooks = delay_hooks();
    run_job(job, worker, hooks);
  } else {
    NoHooks hooks;
    run_job(job, worker, hooks);
  }
}

template <class Hooks>
void CpuExecutor::run_job(const Job& job, uint32_t worker, Hooks& hooks) {
  if (job.options.mode == ScheduleMode::bsp)
    run_bsp(job, worker, hooks);
  else if (job.program->placement == Placement::dynamic_queue)
    run_dynamic(job, worker, hooks);
  else
    run_static(job, worker, hooks);
}

template <class Hooks>
void CpuExecutor::run_task(const Job& job, uint32_t task, uint32_t worker, Hooks& hooks) {
  const Program& program = *job.program;
  const TaskDesc& t = program.tasks[task];
  const OpParams& params = program.nodes[t.node].params;
  TileContext ctx{job.instance->slots_.data(), &job.inputs, scratch_[worker].data(), job.options.ranks};
  if (task == job.options.fail_task) throw std::runtime_error("task " + std::to_string(task) + " failed (injected by StepOptions::fail_task)");
  hooks.before(task);
  const bool known = visit_op(t.op, [&](auto op) {
    using Op = decltype(op);
    Op::run_tile(params.as<typename Op::Params>(), TileRange{t.tile_begin, t.tile_end}, ctx);
  });
  if (!known) std::abort();  // the validator rejects unknown opcodes before a program can run
  hooks.after(task);
}

template <class Hooks>
void CpuExecutor::run_static(const Job& job, uint32_t worker, Hooks& hooks) {
  const Program& program = *job.program;
  const auto& events = job.instance->events_;
  const std::vector<uint32_t>& queue = program.queues[worker];
  // A node's done event fires only when all its tiles are done, so a worker's run of consecutive tiles of
  // one node adds its count once, at the end of the run (or before the worker would wait): one contended
  // atomic per run instead of one per tile, and no later firing. Per-tile events are signalled at once.
  uint32_t pending_event = kNoSlot, pending_count = 0;
  auto flush = [&] {
    if (!pending_count) return;
    job.instance->events_[pending_event].fetch_add(pending_count, std::memory_order_seq_cst);
    task_parking_.wake_all();
    pending_count = 0;
  };
  for (size_t q = 0; q < queue.size(); ++q) {
    if (job.failed.load(std::memory_order_relaxed)) return;  // another worker's tile threw: stop here
    const uint32_t task = queue[q];
    const TaskDesc& t = program.tasks[task];
    IdlePrefetch prefetch(program, t, job.instance->slots_.data());
    for (uint32_t i = 0; i < t.wait_count; ++i) {
      const uint32_t e = program.waits[t.wait_begin + i];
      const uint32_t target = program.events[e].trigger_count * job.step;
      if (event_reached(events[e], target)) continue;
      flush();
      task_parking_.wait_until([&] { return job.failed.load(std::memory_order_relaxed) || event_reached(events[e], target); }, prefetch);
      if (job.failed.load(std::memory_order_relaxed)) return;
    }
    run_task(job, task, worker, hooks);
    const uint32_t done = program.nodes[t.node].done_event;
    bool signalled = false;
    for (uint32_t i = 0; i < t.signal_count; ++i) {
      const uint32_t e = program.signals[t.signal_begin + i];
      if (e == done) {
        if (pending_event != e) flush();
        pending_event = e;
        ++pending_count;
      } else {
        events[e].fetch_add(1, std::memory_order_seq_cst);
        signalled = true;
      }
    }
    if (signalled) task_parking_.wake_all();
    if (q + 1 == queue.size() || program.tasks[queue[q + 1]].node != t.node) flush();
  }
}

template <class Hooks>
void CpuExecutor::run_dynamic(const Job& job, uint32_t worker, Hooks& hooks) {
  const Program& program = *job.program;
  ProgramInstance& inst = *job.instance;
  const uint32_t tasks = uint32_t(program.tasks.size());
  for (;;) {
    const uint32_t index = inst.ready_pop_.fetch_add(1, std::memory_order_relaxed) - job.pop_base;
    if (index >= tasks) return;
    // The index-th ready task of this step will appear: a valid program makes every task ready once.
    auto stamped = [&] { return uint32_t(inst.ready_list_[index].load(std::memory_order_seq_cst) >> 32) == job.dynamic_step; };
    if (!stamped()) task_parking_.wait_until([&] { return job.failed.load(std::memory_order_relaxed) || stamped(); });
    if (job.failed.load(std::memory_order_relaxed)) return;
    const uint32_t task = uint32_t(inst.ready_list_[index].load(std::memory_order_acquire));
    run_task(job, task, worker, hooks);
    const TaskDesc& t = program.tasks[task];
    bool pushed = false;
    for (uint32_t i = 0; i < t.signal_count; ++i) {
      const uint32_t e = program.signals[t.signal_begin + i];
      const uint32_t value = inst.events_[e].fetch_add(1, std::memory_order_seq_cst) + 1;
      if (value != program.events[e].trigger_count * job.step) continue;
      for (uint32_t k = inst.waiter_begin_[e]; k < inst.waiter_begin_[e + 1]; ++k) {
        const uint32_t waiter = inst.waiters_[k];
        const uint32_t need = uint32_t(program.tasks[waiter].wait_count) * job.dynamic_step;
        if (inst.satisfied_[waiter].fetch_add(1, std::memory_order_acq_rel) + 1 != need) continue;
        const uint32_t slot = inst.ready_push_.fetch_add(1, std::memory_order_relaxed) - job.push_base;
        inst.ready_list_[slot].store((uint64_t(job.dynamic_step) << 32) | waiter, std::memory_order_seq_cst);
        pushed = true;
      }
    }
    if (pushed) task_parking_.wake_all();
  }
}

template <class Hooks>
void CpuExecutor::run_bsp(const Job& job, uint32_t worker, Hooks& hooks) {
  const Program& program = *job.program;
  ProgramInstance& inst = *job.instance;
  const uint32_t workers = this->workers();
  const uint32_t nodes = uint32_t(program.nodes.size());
  uint32_t target = workers * nodes * (job.bsp_step - 1);
  // The same tiles on the same workers as dataflow when the program has static queues (regrouped node
  // by node); tile i of a node on worker i mod N for a dynamically placed program.
  const std::vector<uint32_t>* queue = inst.bsp_queues_.empty() ? nullptr : &inst.bsp_queues_[worker];
  size_t next = 0;
  for (uint32_t n = 0; n < nodes; ++n) {
    const NodeDesc& node = program.nodes[n];
    // Event counters are kept in step (for later dataflow steps) at the cost dataflow pays: the node's
    // done event once per worker and node, per-tile events (which nobody waits on here) relaxed.
    uint32_t tiles_run = 0;
    auto run = [&](uint32_t task) {
      run_task(job, task, worker, hooks);
      const TaskDesc& t = program.tasks[task];
      for (uint32_t i = 0; i < t.signal_count; ++i) {
        const uint32_t e = program.signals[t.signal_begin + i];
        if (e != node.done_event) inst.events_[e].fetch_add(1, std::memory_order_relaxed);
      }
      ++tiles_run;
    };
    if (queue) {
      for (; next < queue->size() && program.tasks[(*queue)[next]].node == n; ++next) run((*queue)[next]);
    } else {
      for (uint32_t i = worker; i < node.task_count; i += workers) run(node.first_task + i);
    }
    if (node.done_event != kNoSlot && tiles_run) inst.events_[node.done_event].fetch_add(tiles_run, std::memory_order_relaxed);
    // The barrier: the cheapest correct one for a handful of workers, a grow-only central counter.
    inst.barrier_.fetch_add(1, std::memory_order_seq_cst);
    target += workers;
    task_parking_.wake_all();
    if (!counter_reached(inst.barrier_.load(std::memory_order_seq_cst), target))
      task_parking_.wait_until([&] {
        return job.failed.load(std::memory_order_relaxed) || counter_reached(inst.barrier_.load(std::memory_order_seq_cst), target);
      });
    if (job.failed.load(std::memory_order_relaxed)) return;
  }
}

}  // namespace tilefire
