// The megakernel simulator (scheduler/simulator.h).
#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <span>
#include <stdexcept>

#include "scheduler/policy.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {

// Where `at` falls in `worker`'s stall period (each period starts with its stall): 0 to every_ns.
double into_period(const StallSchedule& s, uint32_t worker, double at) {
  const double phase = s.every_ns * (double(worker) + 0.5) / double(std::max(1u, s.workers));
  const double into = std::fmod(at - phase, s.every_ns);
  return into < 0 ? into + s.every_ns : into;
}

}  // namespace

bool StallSchedule::valid() const {
  if (!std::isfinite(stall_ns) || !std::isfinite(every_ns) || stall_ns < 0 || every_ns < 0) return false;
  return !any() || (every_ns >= 1 && stall_ns <= 0.99 * every_ns);
}

double StallSchedule::resume(uint32_t worker, double at) const {
  if (!any()) return at;
  const double into = into_period(*this, worker, at);
  return into < stall_ns ? at + (stall_ns - into) : at;
}

// In closed form: a loop over the periods would take as long as a device file's figures say.
double StallSchedule::finish(uint32_t worker, double start, double work) const {
  if (!any() || work <= 0) return start + work;
  double at = start;
  double into = into_period(*this, worker, at);
  if (into < stall_ns) at += stall_ns - into, into = stall_ns;  // inside a stall: start at its end
  const double left_in_period = every_ns - into;
  if (work <= left_in_period) return at + work;
  work -= left_in_period;
  at += left_in_period;  // the start of the next period: a stall, then every_ns - stall_ns of work
  const double per_period = every_ns - stall_ns;
  const double whole = std::ceil(work / per_period) - 1;  // periods run through before the last one
  return at + whole * every_ns + stall_ns + (work - whole * per_period);
}

double StallSchedule::stalled(uint32_t worker, double from, double to) const {
  if (!any() || !(to > from)) return 0;
  // Stalled time from the start of `from`'s period to t, for t within whole periods of it.
  const double period_start = from - into_period(*this, worker, from);
  auto stalled_to = [&](double t) {
    const double periods = std::floor((t - period_start) / every_ns);
    return periods * stall_ns + std::min(stall_ns, t - period_start - periods * every_ns);
  };
  return stalled_to(to) - stalled_to(from);
}

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct EventClock {
  std::vector<uint32_t> remaining;  // signals still to come this step
  std::vector<double> fired;        // when the last one came (kUnknown until then)
};

class Simulation {
 public:
  Simulation(const Program& program, const std::vector<double>& task_ns, const std::vector<double>& weight_ns,
             double signal_ns, const SimulationOptions& options)
      : program_(program), task_ns_(task_ns), weight_ns_(weight_ns), signal_ns_(signal_ns), options_(options) {
    const uint32_t workers = program.placement == Placement::static_queues ? uint32_t(program.queues.size()) : program.workers;
    result_.busy_ns.assign(std::max(1u, workers), 0.0);
    free_at_.assign(result_.busy_ns.size(), 0.0);
    fetch_end_.assign(free_at_.size(), nullptr);
    stalls_ = {options.stall_ns, options.stall_every_ns, uint32_t(free_at_.size())};
    clock_.remaining.resize(program.events.size());
    clock_.fired.assign(program.events.size(), kUnknown);
    for (uint32_t e = 0; e < program.events.size(); ++e) clock_.remaining[e] = program.events[e].trigger_count;
    for (uint32_t e = 0; e < program.events.size(); ++e)
      if (clock_.remaining[e] == 0) clock_.fired[e] = 0;
  }

  SimulationResult run() {
    if (options_.bsp) run_bsp();
    else if (program_.placement == Placement::dynamic_queue) run_dynamic();
    else run_static();
    for (const SimulatedTask& t : result_.timeline) result_.step_ns = std::max(result_.step_ns, t.end_ns);
    double busy = 0;
    for (double b : result_.busy_ns) busy += b;
    result_.idle_share = result_.step_ns > 0 ? 1.0 - busy / (result_.step_ns * double(result_.busy_ns.size())) : 0.0;
    return std::move(result_);
  }

 private:
  // When every event the task waits on has fired, plus the signal latency; kUnknown if one has not.
  double inputs_ready(uint32_t task) const {
    const TaskDesc& t = program_.tasks[task];
    double ready = 0;
    for (uint32_t i = 0; i < t.wait_count; ++i) {
      const double fired = clock_.fired[program_.waits[t.wait_begin + i]];
      if (fired == kUnknown) return kUnknown;
      ready = std::max(ready, fired + signal_ns_);
    }
    return ready;
  }

  // Runs `task` on `worker`, which is free at free_at_[worker]; returns its end. `upcoming` (static
  // queues) is the worker's queue from `task` on: what its prefetch may fetch for while it waits. Taken
  // from the dynamic queue (no `upcoming`), a task is only known to its worker once it is ready, so
  // nothing was fetched for it: neither backend prefetches there.
  double execute(uint32_t task, uint32_t worker, double ready, std::span<const uint32_t> upcoming = {}) {
    const double free = free_at_[worker];
    const double start = stalls_.resume(worker, std::max(free, ready));  // not inside one of its stalls
    const double speed = options_.worker_speed.empty() ? 1.0 : options_.worker_speed[worker];
    if (options_.prefetch_while_waiting && !upcoming.empty()) prefetch(worker, upcoming, std::max(0.0, ready - free) * speed);
    // The weight time fetched ahead for this task (while it, or a task before it, waited) is not paid again.
    const double duration = std::max(task_ns_[task] - fetched_ns_[task], 0.0) / speed;
    const double end = stalls_.finish(worker, start, duration);
    free_at_[worker] = end;
    result_.busy_ns[worker] += duration;
    result_.timeline.push_back({task, worker, start, end});
    const TaskDesc& t = program_.tasks[task];
    for (uint32_t i = 0; i < t.signal_count; ++i) {
      const uint32_t e = program_.signals[t.signal_begin + i];
      if (clock_.remaining[e] == 0) continue;
      if (--clock_.remaining[e] == 0) clock_.fired[e] = std::max(latest_signal(e), end);
      else pending_signal_[e] = std::max(latest_signal(e), end);
    }
    return end;
  }

  // Waiting `idle_ns` for `task`'s inputs streams weights in queue order: the task's own, then its
  // successors' (up to prefetch_tasks tasks), while what is held (fetched for tasks not yet run) stays
  // within prefetch_held_ns.
  // `upcoming` is always a suffix of one array per worker (its queue), and fetching goes in its order, so
  // what was fetched is a prefix of it, ending where the last fetch stopped (fetch_end_): the tasks before
  // that one are fetched in full, and those after it not at all. The sums and the walk start and stop
  // there, which gives the same figures as walking the whole queue without the cost (with prefetch_tasks
  // 0 a queue of n tasks made that n^2 / 2).
  void prefetch(uint32_t worker, std::span<const uint32_t> upcoming, double idle_ns) {
    const size_t lookahead = options_.prefetch_tasks == 0 ? upcoming.size() : std::min<size_t>(upcoming.size(), options_.prefetch_tasks);
    const uint32_t* const front = upcoming.data();
    const size_t fetched_end = fetch_end_[worker] > front ? size_t(fetch_end_[worker] - front) : 0;  // ran already: none held
    double held = 0;
    for (size_t i = 0; i < std::min(lookahead, fetched_end); ++i) held += fetched_ns_[upcoming[i]];
    for (size_t i = fetched_end > 0 ? fetched_end - 1 : 0; i < lookahead && idle_ns > 0 && held < options_.prefetch_held_ns; ++i) {
      const uint32_t t = upcoming[i];
      fetch_end_[worker] = std::max(fetch_end_[worker], front + i + 1);
      const double take = std::min({weight_ns_[t] - fetched_ns_[t], idle_ns, options_.prefetch_held_ns - held});
      if (take <= 0) continue;
      fetched_ns_[t] += take;
      held += take;
      idle_ns -= take;
    }
  }

  double latest_signal(uint32_t e) const {
    auto it = pending_signal_.find(e);
    return it == pending_signal_.end() ? 0.0 : it->second;
  }

  // Static queues: repeatedly run, among the workers' next tasks whose inputs are known, the one that can
  // start first. A valid program's queues never all block (the validator proves it).
  void run_static() {
    const auto& queues = program_.queues;
    std::vector<size_t> next(queues.size(), 0);
    size_t left = program_.tasks.size();
    while (left) {
      double best_start = kUnknown;
      uint32_t best_worker = 0;
      for (uint32_t w = 0; w < queues.size(); ++w) {
        if (next[w] >= queues[w].size()) continue;
        const double ready = inputs_ready(queues[w][next[w]]);
        if (ready == kUnknown) continue;
        const double start = std::max(free_at_[w], ready);
        if (start < best_start) best_start = start, best_worker = w;
      }
      if (best_start == kUnknown) throw std::runtime_error("simulate: the static queues deadlock");
      const std::span<const uint32_t> upcoming(queues[best_worker].data() + next[best_worker],
                                               queues[best_worker].size() - next[best_worker]);
      const uint32_t task = upcoming.front();
      ++next[best_worker];
      execute(task, best_worker, inputs_ready(task), upcoming);
      --left;
    }
  }

  // The dynamic queue: the earliest-free worker takes the task that became ready first.
  void run_dynamic() {
    using Entry = std::pair<double, uint32_t>;  // (ready time, task)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
    std::vector<uint32_t> waits_left(program_.tasks.size());
    std::vector<std::vector<uint32_t>> waiters(program_.events.size());
    for (uint32_t t = 0; t < program_.tasks.size(); ++t) {
      const TaskDesc& task = program_.tasks[t];
      waits_left[t] = task.wait_count;
      for (uint32_t i = 0; i < task.wait_count; ++i) waiters[program_.waits[task.wait_begin + i]].push_back(t);
      if (task.wait_count == 0) ready.push({0.0, t});
    }
    std::vector<char> fired(program_.events.size(), 0);
    size_t left = program_.tasks.size();
    while (left) {
      if (ready.empty()) throw std::runtime_error("simulate: no task is ready (the program's events never fire)");
      const auto [at, task] = ready.top();
      ready.pop();
      const uint32_t worker = uint32_t(std::min_element(free_at_.begin(), free_at_.end()) - free_at_.begin());
      execute(task, worker, at);
      --left;
      const TaskDesc& t = program_.tasks[task];
      for (uint32_t i = 0; i < t.signal_count; ++i) {
        const uint32_t e = program_.signals[t.signal_begin + i];
        if (fired[e] || clock_.fired[e] == kUnknown) continue;
        fired[e] = 1;
        for (uint32_t waiter : waiters[e])
          if (--waits_left[waiter] == 0) ready.push({inputs_ready(waiter), waiter});
      }
    }
  }

  // Node by node, the same tiles on the same workers, a barrier (one signal latency) between nodes. A
  // prefetch over the whole queue (prefetch_tasks 0: the cuda kernel's producer warp, which waits for no
  // event) also runs ahead of the barriers, from each worker's last tile of a node on; a waiting
  // worker's own prefetch (the cpu executor's) does not: the barrier is not a task's input.
  void run_bsp() {
    double barrier = 0;
    const bool producer = options_.prefetch_while_waiting && options_.prefetch_tasks == 0;
    const bool static_queues = program_.placement == Placement::static_queues;
    // Each worker's tiles regrouped node by node, as the executors' bsp queues are.
    std::vector<std::vector<uint32_t>> queues = program_.queues;
    for (auto& queue : queues)
      std::stable_sort(queue.begin(), queue.end(), [&](uint32_t a, uint32_t b) { return program_.tasks[a].node < program_.tasks[b].node; });
    std::vector<size_t> next(queues.size(), 0);
    for (uint32_t n = 0; n < program_.nodes.size(); ++n) {
      const NodeDesc& node = program_.nodes[n];
      double node_end = barrier;
      if (!producer) std::fill(free_at_.begin(), free_at_.end(), barrier);
      if (static_queues) {
        for (uint32_t w = 0; w < queues.size(); ++w)
          for (; next[w] < queues[w].size() && program_.tasks[queues[w][next[w]]].node == n; ++next[w]) {
            const std::span<const uint32_t> upcoming(queues[w].data() + next[w], queues[w].size() - next[w]);
            node_end = std::max(node_end, execute(upcoming.front(), w, barrier, upcoming));
          }
      } else {
        // A dynamically placed program's bsp: tile i on worker i mod N, as the executors run it; the cpu
        // executor's bsp does not prefetch, the kernel's producer has no queue to walk (no staging).
        for (uint32_t i = 0; i < node.task_count; ++i)
          node_end = std::max(node_end, execute(node.first_task + i, i % uint32_t(free_at_.size()), barrier));
      }
      barrier = node_end + signal_ns_;
    }
  }

  const Program& program_;
  const std::vector<double>& task_ns_;
  const std::vector<double>& weight_ns_;
  double signal_ns_;
  SimulationOptions options_;
  SimulationResult result_;
  std::vector<double> free_at_;
  StallSchedule stalls_;
  EventClock clock_;
  std::map<uint32_t, double> pending_signal_;
  std::vector<double> fetched_ns_ = std::vector<double>(task_ns_.size(), 0.0);  // per task: weight time fetched ahead
  std::vector<const uint32_t*> fetch_end_;  // per worker: one past the last task its prefetch reached
};

}  // namespace

SimulationResult simulate_with_times(const Program& program, const std::vector<double>& task_ns,
                                     const std::vector<double>& weight_ns, double signal_ns, const SimulationOptions& options) {
  if (task_ns.size() != program.tasks.size() || weight_ns.size() != program.tasks.size())
    throw std::invalid_argument("simulate: one time per task is needed");
  if (!StallSchedule{options.stall_ns, options.stall_every_ns, 1}.valid())
    throw std::invalid_argument("simulate: stalls need a period of at least 1 ns, at most 99% of it stalled");
  if (!options.worker_speed.empty()) {
    const size_t workers = program.placement == Placement::static_queues ? program.queues.size() : program.workers;
    if (options.worker_speed.size() != std::max<size_t>(1, workers))
      throw std::invalid_argument("simulate: one speed per worker is needed");
    for (double speed : options.worker_speed)
      if (!(speed > 0) || !std::isfinite(speed)) throw std::invalid_argument("simulate: a worker's speed must be positive");
  }
  return Simulation(program, task_ns, weight_ns, signal_ns, options).run();
}

SimulationResult simulate_program(const Program& program, const DeviceModel& device, uint32_t context,
                                  const SimulationOptions& options) {
  std::vector<double> task_ns(program.tasks.size()), weight_ns(program.tasks.size());
  const double share_bytes_per_ns = device.memory_gbs / double(device.workers);
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskWork work = task_work(program, program.tasks[t], context, options.sequences);
    task_ns[t] = modelled_task_ns(device, work);
    weight_ns[t] = work.weight_bytes / share_bytes_per_ns;
    if (!std::isfinite(task_ns[t]) || !std::isfinite(weight_ns[t]))
      throw InputError("simulate: on the device '" + device.name + "', task " + std::to_string(t) + " (" +
                       std::string(op_name(program.tasks[t].op)) + ") would never end: a bandwidth, a peak or a link of almost 0?");
  }
  // The device's prefetch bounds replace the options' (a caller's options say only whether to prefetch).
  SimulationOptions with_prefetch = options;
  with_prefetch.prefetch_tasks = device.prefetch_tasks;
  if (device.prefetch_bytes > 0) with_prefetch.prefetch_held_ns = device.prefetch_bytes / share_bytes_per_ns;
  if (device.prefetch_max_tokens > 0 && program.tokens > device.prefetch_max_tokens) with_prefetch.prefetch_while_waiting = false;
  if (!device.fetch_ahead) with_prefetch.prefetch_while_waiting = false;
  with_prefetch.stall_ns = device.stall_ns;
  with_prefetch.stall_every_ns = device.stall_every_ns;
  with_prefetch.worker_speed = device.worker_speed;
  return simulate_with_times(program, task_ns, weight_ns, device.signal_ns, with_prefetch);
}

}  // namespace tilefire
