#pragma once
// The CPU megakernel: N workers that run a Program step after step: the thread that calls run_step is
// worker 0, and N - 1 persistent threads, started once per executor, are the others. Modes:
//  - dataflow: a task runs as soon as the events it waits on reach their targets (static per-worker queues,
//    or the dynamic ready queue, as the Program was placed);
//  - bsp: the same tiles, op by op, with a barrier between ops (the baseline dataflow is measured against).
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "megakernel/cpu/parking.h"
#include "scheduler/program.h"

namespace tilefire {

enum class ScheduleMode : uint8_t { dataflow, bsp };

// While a task waits for its inputs, its worker fetches the first this many bytes of the weights the
// tile will stream into L2 (the simulator's cpu device takes the same bound).
constexpr uint64_t kCpuIdlePrefetchBytes = 256 * 1024;

// One executed task, for traces.
struct TaskTiming {
  uint32_t task = 0;
  uint32_t worker = 0;
  int64_t start_ns = 0;  // steady clock
  int64_t end_ns = 0;
};

struct StepOptions {
  ScheduleMode mode = ScheduleMode::dataflow;
  std::vector<TaskTiming>* trace = nullptr;  // when set, every task's timing is appended
  uint32_t max_random_delay_us = 0;          // stress: a random delay before each task, up to this
  uint64_t delay_seed = 0;
  uint32_t fail_task = 0xffffffffu;          // tests: this task throws instead of running (the error path)
  const RankView* ranks = nullptr;           // tensor parallelism: the rank's view of its group (collective tiles)
};

// A Program bound to memory on this backend, with its grow-only counters.
class ProgramInstance {
 public:
  ProgramInstance(const Program& program, std::vector<void*> slots);
  const Program& program() const { return program_; }
  uint32_t steps_run() const { return step_; }
  // Points a slot elsewhere (between steps only: the engine moves activations when its arena grows).
  void set_slot(uint32_t slot, void* pointer) { slots_.at(slot) = pointer; }


 private:
  friend class CpuExecutor;
  const Program& program_;
  std::vector<void*> slots_;
  uint32_t step_ = 0;  // steps completed; step_ + 1 is the one running
  uint32_t dynamic_steps_ = 0;  // of those, steps run from the dynamic ready queue
  uint32_t bsp_steps_ = 0;      // and steps run in bsp mode
  bool broken_ = false;         // a step failed part-way (a tile threw): no further steps
  std::unique_ptr<std::atomic<uint32_t>[]> events_;
  // Dynamic ready queue: per-task satisfied waits, event -> waiters (CSR), and the ready list whose
  // entries carry the step they belong to (so nothing is cleared between steps).
  std::unique_ptr<std::atomic<uint32_t>[]> satisfied_;
  std::vector<uint32_t> waiter_begin_, waiters_;
  std::unique_ptr<std::atomic<uint64_t>[]> ready_list_;
  // bsp: each static queue's tasks regrouped node by node (a policy may interleave nodes in a queue);
  // the same tasks on the same workers.
  std::vector<std::vector<uint32_t>> bsp_queues_;
  std::string bsp_violation_;  // why bsp would run a task before its input (scheduler/validator.h); "": none
  alignas(64) std::atomic<uint32_t> ready_push_{0};
  alignas(64) std::atomic<uint32_t> ready_pop_{0};
  alignas(64) std::atomic<uint32_t> barrier_{0};  // bsp: arrivals, grow-only
};

// CPUs this process may run on (its affinity mask), and how many.
std::vector<uint32_t> allowed_cpus();
uint32_t usable_cores();
// Pins a thread (a std::thread's native handle, or pthread_self()) to one CPU; best effort.
void pin_to_core(std::thread::native_handle_type thread, uint32_t core);

class CpuExecutor {
 public:
  // When the allowed CPUs from first_cpu on number at least `workers`: workers 1.. are pinned to
  // first_cpu + 1, ..., and the caller (worker 0) is moved to first_cpu at each step it is elsewhere
  // (tensor-parallel ranks of one process take disjoint CPUs). Otherwise all are left to the kernel.
  explicit CpuExecutor(uint32_t workers, uint32_t first_cpu = 0);
  ~CpuExecutor();
  CpuExecutor(const CpuExecutor&) = delete;
  CpuExecutor& operator=(const CpuExecutor&) = delete;

  uint32_t workers() const { return workers_; }
  // Runs one step, the calling thread as worker 0, and returns when every task has run. The instance's
  // Program must have been placed for this many workers (static queues) or dynamically.
  void run_step(ProgramInstance& instance, const StepInputs& inputs, const StepOptions& options);

 private:
  struct Job;
  void worker_main(uint32_t worker);
  void run_worker_share(uint32_t worker);  // one step's tasks of `worker`; an error stops the step
  void keep_caller_on_its_cpu() const;
  void run_job_with_hooks(const Job& job, uint32_t worker);
  template <class Hooks>
  void run_job(const Job& job, uint32_t worker, Hooks& hooks);
  template <class Hooks>
  void run_static(const Job& job, uint32_t worker, Hooks& hooks);
  template <class Hooks>
  void run_dynamic(const Job& job, uint32_t worker, Hooks& hooks);
  template <class Hooks>
  void run_bsp(const Job& job, uint32_t worker, Hooks& hooks);
  template <class Hooks>
  void run_task(const Job& job, uint32_t task, uint32_t worker, Hooks& hooks);

  const uint32_t workers_;
  std::vector<std::thread> threads_;  // workers 1 .. workers_ - 1
  int caller_cpu_ = -1;     // when workers are pinned: the CPU left for worker 0, the caller
  uint32_t pool_mxcsr_ = 0;  // the floating-point control the pool threads run under (x86)
  std::vector<std::vector<float>> scratch_;
  std::vector<std::vector<TaskTiming>> trace_buffers_;
  std::unique_ptr<Job> job_;
  Parking step_parking_;   // workers between steps; the host waiting for a step to end
  Parking task_parking_;   // workers waiting on events inside a step
  alignas(64) std::atomic<uint32_t> doorbell_{0};   // steps posted (grow-only)
  alignas(64) std::atomic<uint32_t> finished_{0};   // worker-steps finished by workers 1.. (grow-only)
  std::atomic<bool> shutdown_{false};
  std::mutex run_mutex_;  // one step at a time per executor
};

}  // namespace tilefire
