#include "scheduler/trace_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "tilefire/errors.h"

namespace tilefire {

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

void set_worker_rates(DeviceModel& device, std::vector<double> worker_gbs) {
  double sum = 0;
  for (double& rate : worker_gbs) sum += rate = rate > 0 ? rate : device.memory_gbs / double(worker_gbs.size());
  if (!(sum > 0)) return;
  device.memory_gbs = sum;
  device.worker_speed.resize(worker_gbs.size());
  for (size_t w = 0; w < worker_gbs.size(); ++w) device.worker_speed[w] = worker_gbs[w] * double(worker_gbs.size()) / sum;
}

namespace {

// Per task: when its inputs were all done in the observed step (the latest end among the tasks that
// signal an event it waits on); -inf for tasks that wait on nothing.
std::vector<double> inputs_done_ns(const Program& program, const std::vector<const SimulatedTask*>& by_task) {
  std::vector<double> event_done(program.events.size(), -std::numeric_limits<double>::infinity());
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.signal_count; ++i) {
      double& done = event_done[program.signals[task.signal_begin + i]];
      done = std::max(done, by_task[t]->end_ns);
    }
  }
  std::vector<double> ready(program.tasks.size(), -std::numeric_limits<double>::infinity());
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskDesc& task = program.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) ready[t] = std::max(ready[t], event_done[program.waits[task.wait_begin + i]]);
  }
  return ready;
}

}  // namespace

DeviceFit fit_device(const Program& program, const std::vector<SimulatedTask>& observed, uint32_t context,
                     const DeviceModel& base, uint32_t sequences) {
  const uint32_t tasks = uint32_t(program.tasks.size());
  std::vector<const SimulatedTask*> by_task(tasks, nullptr);
  uint32_t workers = 0;
  for (const SimulatedTask& o : observed) {
    if (o.task >= tasks) throw InputError("the trace has task " + std::to_string(o.task) + ", the program " + std::to_string(tasks) + " tasks");
    if (by_task[o.task]) throw InputError("the trace has task " + std::to_string(o.task) + " twice");
    if (!(o.end_ns >= o.start_ns)) throw InputError("the trace's task " + std::to_string(o.task) + " ends before it starts");
    // Compared before adding one: a worker of 2^32 - 1 would wrap to 0 workers.
    if (o.worker >= base.workers)
      throw InputError("the trace has worker " + std::to_string(o.worker) + ", the device " + std::to_string(base.workers) + " workers");
    by_task[o.task] = &o;
    workers = std::max(workers, o.worker + 1);
  }
  for (uint32_t t = 0; t < tasks; ++t)
    if (!by_task[t]) throw InputError("the trace lacks task " + std::to_string(t) + " of the program's " + std::to_string(tasks));

  DeviceFit fit;
  fit.device = base;
  fit.device.name = base.name + "-fitted";
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const SimulatedTask& o : observed) first = std::min(first, o.start_ns), last = std::max(last, o.end_ns);
  fit.observed_step_ns = last - first;
  if (!(fit.observed_step_ns > 0)) throw InputError("the trace's step takes no time (every task starts and ends at one instant)");

  // Dispatch and signal, from each worker's consecutive pairs: the next task was ready before the previous
  // started (a dispatch gap), or it waited for an input (a signal's latency, from that input's end).
  const std::vector<double> ready = inputs_done_ns(program, by_task);
  std::vector<std::vector<const SimulatedTask*>> per_worker(workers);
  for (const SimulatedTask& o : observed) per_worker[o.worker].push_back(&o);
  std::vector<double> dispatch, signal;
  std::vector<bool> waited(tasks, true);  // first tasks of a worker count as waited: no pair shows otherwise
  for (auto& row : per_worker) {
    std::sort(row.begin(), row.end(), [](const SimulatedTask* a, const SimulatedTask* b) { return a->start_ns < b->start_ns; });
    for (size_t i = 1; i < row.size(); ++i) {
      const SimulatedTask& previous = *row[i - 1];
      const SimulatedTask& next = *row[i];
      // Clear cases only: inputs done before the previous task even started (their signals had its whole
      // run to arrive), or after it ended (the worker was free and waited). Between, the gap mixes both.
      if (ready[next.task] <= previous.start_ns) {
        dispatch.push_back(std::max(0.0, next.start_ns - previous.end_ns));
        waited[next.task] = false;
      } else if (ready[next.task] > previous.end_ns) {
        signal.push_back(std::max(0.0, next.start_ns - ready[next.task]));
      }
    }
  }
  fit.dispatch_samples = uint32_t(dispatch.size());
  fit.signal_samples = uint32_t(signal.size());
  if (!dispatch.empty()) fit.device.dispatch_ns = median(dispatch);
  if (!signal.empty()) fit.device.signal_ns = median(signal);

  // Bandwidth: the model gives a task alone bandwidth / workers, so workers x bytes / time over the
  // tasks that stream weights (a decode step's matrix tiles: one token, bandwidth-bound by design; not
  // collectives, whose time is the link's). Only tasks that did not wait: a worker that waits fetches the
  // next task's weights meanwhile (both backends; the simulator too), so a task that waited runs shorter
  // than its bytes take.
  // The base device's stalls (time the machine took from the workers) are in those tasks' times too, and
  // the simulator charges them on their own: the bandwidth is that of the time the stalls leave each
  // worker, as many stalls as the simulator places in a step of the observed length. (So none in a step
  // shorter than every / (2 x workers), where worker 0's first stall starts: on the 2-core VM, a quarter of
  // 0.5 to 0.9 ms, so tiny's 0.1 ms step usually gets none, as on the VM most of its steps run between
  // two; with more workers the first stalls come sooner.)
  const StallSchedule stalls{base.stall_ns, base.stall_every_ns, base.workers};
  std::vector<double> unstalled(base.workers, 1.0);  // per worker: the share of the step its stalls leave
  if (stalls.any() && stalls.valid())
    for (uint32_t w = 0; w < base.workers; ++w) {
      unstalled[w] = 1.0 - stalls.stalled(w, 0, fit.observed_step_ns) / fit.observed_step_ns;
      if (unstalled[w] < 1e-9) unstalled[w] = 0;  // stalled throughout, but for rounding (which fitted a bandwidth of 1e16)
    }
  // Per worker, the bytes and the streaming time of its tasks that did not wait, without the epilogue the
  // device charges them (RoPE, sigmoids: not streaming) at that worker's `speeds`.
  std::vector<double> worker_bytes(base.workers), worker_ns(base.workers);
  bool bandwidth_fitted = false;
  // Streaming tasks whose traced times the modelled epilogues or stalls use up leave the base device's
  // bandwidth standing, which would print as fitted. The stalls do when a step is shorter than the stall
  // that, by its phase, began before the step and still runs at its end (a device measured on a busy
  // machine, whose stalls take most of each period).
  auto require_fitted = [&] {
    if (fit.streaming_tasks == 0 || bandwidth_fitted) return;
    bool stalled_throughout = true;  // every worker with streaming tasks stalled for the whole step, as modelled
    for (uint32_t w = 0; w < base.workers; ++w)
      if (worker_bytes[w] > 0 && unstalled[w] > 0) stalled_throughout = false;
    if (stalled_throughout)
      throw InputError("the stalls the base device models (" + std::to_string(std::llround(base.stall_ns)) + " ns every " +
                       std::to_string(std::llround(base.stall_every_ns)) + " ns on each worker) cover the whole traced step of " +
                       std::to_string(std::llround(fit.observed_step_ns)) + " ns of its " + std::to_string(fit.streaming_tasks) +
                       " tasks that stream weights without waiting: no time is left to fit a bandwidth to (stalls measured on a "
                       "machine busy with other work?)");
    throw InputError("the trace's " + std::to_string(fit.streaming_tasks) + " tasks that stream weights without waiting take no " +
                     "longer than the epilogues the base device models for them (rotation_ns, exp_ns): no time is left to fit a " +
                     "bandwidth to");
  };
  auto streaming = [&](const std::vector<double>& speeds) {
    std::fill(worker_bytes.begin(), worker_bytes.end(), 0.0);
    std::fill(worker_ns.begin(), worker_ns.end(), 0.0);
    fit.streaming_tasks = 0;
    double traced_ns = 0;  // their times as traced, before the epilogues come off
    for (uint32_t t = 0; t < tasks; ++t) {
      if (waited[t]) continue;
      const TaskWork work = task_work(program, program.tasks[t], context, sequences);
      if (work.weight_bytes <= 0 || work.link_bytes > 0) continue;
      const uint32_t w = by_task[t]->worker;
      const double speed = speeds.empty() ? 1.0 : speeds[w];
      worker_bytes[w] += streamed_bytes(base, work);
      traced_ns += by_task[t]->end_ns - by_task[t]->start_ns;
      worker_ns[w] += std::max(0.0, by_task[t]->end_ns - by_task[t]->start_ns - modelled_epilogue_ns(base, work) / speed);
      ++fit.streaming_tasks;
    }
    double bytes = 0, ns = 0;
    for (uint32_t w = 0; w < base.workers; ++w) {
      worker_ns[w] *= unstalled[w];
      bytes += worker_bytes[w];
      ns += worker_ns[w];
    }
    // Durations of zero (a trace written by hand, or rounded) say nothing of the bandwidth: keeping the
    // base device's would print it as fitted.
    if (fit.streaming_tasks > 0 && !(traced_ns > 0))
      throw InputError("the trace's " + std::to_string(fit.streaming_tasks) + " tasks that stream weights without waiting all take no " +
                       "time, so they give no bandwidth to fit");
    if (ns > 0) {
      fit.device.memory_gbs = double(base.workers) * bytes / ns;
      bandwidth_fitted = true;
    }
    fit.worker_gbs.assign(base.workers, 0.0);
    for (uint32_t w = 0; w < base.workers; ++w)
      if (worker_ns[w] > 0) fit.worker_gbs[w] = worker_bytes[w] / worker_ns[w];
    return ns > 0;
  };
  if (base.worker_speed.size() != base.workers) {
    streaming({});
    require_fitted();
    return fit;
  }
  // Each worker's rate; the epilogues come off at the base device's speeds first, then at the fitted
  // ones until they settle.
  std::vector<double> speeds = base.worker_speed;
  for (int round = 0; round < 8 && streaming(speeds); ++round) {
    set_worker_rates(fit.device, fit.worker_gbs);
    double moved = 0;
    for (uint32_t w = 0; w < base.workers; ++w) moved = std::max(moved, std::abs(fit.device.worker_speed[w] - speeds[w]));
    speeds = fit.device.worker_speed;
    if (moved < 1e-12) break;
  }
  require_fitted();
  return fit;
}

}  // namespace tilefire
