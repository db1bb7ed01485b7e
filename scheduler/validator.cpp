#include "scheduler/validator.h"

#include <deque>
#include <sstream>
#include <vector>

namespace tilefire {

std::string describe_task(const Program& program, uint32_t task) {
  std::ostringstream out;
  if (task >= program.tasks.size()) {
    out << "task " << task << " (out of range)";
    return out.str();
  }
  const TaskDesc& t = program.tasks[task];
  out << op_name(t.op) << " layer " << t.layer << " tile [" << t.tile_begin << ", " << t.tile_end << ") (task "
      << task << ")";
  return out.str();
}

namespace {

void check_ranges(const Program& p) {
  const uint64_t event_count = p.events.size();
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskDesc& task = p.tasks[t];
    if (uint64_t(task.wait_begin) + task.wait_count > p.waits.size() ||
        uint64_t(task.signal_begin) + task.signal_count > p.signals.size())
      throw ProgramError("program: " + describe_task(p, t) + " has a wait or signal list out of range");
    for (uint32_t i = 0; i < task.wait_count; ++i)
      if (p.waits[task.wait_begin + i] >= event_count)
        throw ProgramError("program: " + describe_task(p, t) + " waits on event " +
                           std::to_string(p.waits[task.wait_begin + i]) + ", which does not exist");
    for (uint32_t i = 0; i < task.signal_count; ++i)
      if (p.signals[task.signal_begin + i] >= event_count)
        throw ProgramError("program: " + describe_task(p, t) + " signals event " +
                           std::to_string(p.signals[task.signal_begin + i]) + ", which does not exist");
    if (task.node >= p.nodes.size())
      throw ProgramError("program: " + describe_task(p, t) + " names node " + std::to_string(task.node) +
                         ", which does not exist");
    if (uint16_t(task.op) >= uint16_t(OpCode::count))
      throw ProgramError("program: task " + std::to_string(t) + " has unknown opcode " + std::to_string(uint16_t(task.op)));
    const NodeDesc& node = p.nodes[task.node];
    if (t < node.first_task || t >= node.first_task + node.task_count || task.op != node.params.op)
      throw ProgramError("program: " + describe_task(p, t) + " is not among the tasks of its node " +
                         std::to_string(task.node) + " (or has another op)");
  }
  for (uint32_t e = 0; e < event_count; ++e)
    if (p.events[e].trigger_count == 0)
      throw ProgramError("program: event " + std::to_string(e) + " has trigger count 0 (every event needs a signal)");
}

void check_trigger_counts(const Program& p) {
  std::vector<uint32_t> signals_per_event(p.events.size(), 0);
  std::vector<int64_t> first_waiter(p.events.size(), -1);
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.signal_count; ++i) ++signals_per_event[p.signals[task.signal_begin + i]];
    for (uint32_t i = 0; i < task.wait_count; ++i) {
      uint32_t e = p.waits[task.wait_begin + i];
      if (first_waiter[e] < 0) first_waiter[e] = t;
    }
  }
  for (uint32_t e = 0; e < p.events.size(); ++e) {
    const uint32_t trigger = p.events[e].trigger_count;
    const uint32_t got = signals_per_event[e];
    if (got == trigger) continue;
    std::string who = first_waiter[e] >= 0 ? " (waited on by " + describe_task(p, uint32_t(first_waiter[e])) + ")" : "";
    if (got == 0)
      throw ProgramError("program: event " + std::to_string(e) + who + " needs " + std::to_string(trigger) +
                         " signals per step but no task signals it: its waiters would hang");
    throw ProgramError("program: event " + std::to_string(e) + who + " has trigger count " +
                       std::to_string(trigger) + " but " + std::to_string(got) + " tasks signal it per step");
  }
}

// Edges signaller -> waiter through events; Kahn's algorithm finds a cycle if not every task is reached.
void check_acyclic(const Program& p) {
  const uint32_t n = uint32_t(p.tasks.size());
  std::vector<std::vector<uint32_t>> waiters_of_event(p.events.size());
  std::vector<uint32_t> pending(n, 0);
  for (uint32_t t = 0; t < n; ++t) {
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) waiters_of_event[p.waits[task.wait_begin + i]].push_back(t);
  }
  std::vector<uint32_t> event_remaining(p.events.size());
  for (uint32_t e = 0; e < p.events.size(); ++e) event_remaining[e] = p.events[e].trigger_count;
  std::deque<uint32_t> ready;
  for (uint32_t t = 0; t < n; ++t) {
    pending[t] = p.tasks[t].wait_count;
    if (pending[t] == 0) ready.push_back(t);
  }
  uint32_t visited = 0;
  while (!ready.empty()) {
    uint32_t t = ready.front();
    ready.pop_front();
    ++visited;
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.signal_count; ++i) {
      uint32_t e = p.signals[task.signal_begin + i];
      if (--event_remaining[e] != 0) continue;
      for (uint32_t w : waiters_of_event[e])
        if (--pending[w] == 0) ready.push_back(w);
    }
  }
  if (visited == n) return;
  for (uint32_t t = 0; t < n; ++t)
    if (pending[t] != 0)
      throw ProgramError("program: the task graph has a cycle: " + describe_task(p, t) +
                         " can never run (it waits, directly or not, on itself)");
}

// Runs every static queue in order, a task at a time when its events are complete; if no queue can move
// before all are done, the queues deadlock (a worker would wait on a task queued behind another wait).
void check_static_queues(const Program& p) {
  const uint32_t n = uint32_t(p.tasks.size());
  std::vector<uint8_t> queued(n, 0);
  for (uint32_t w = 0; w < p.queues.size(); ++w)
    for (uint32_t t : p.queues[w]) {
      if (t >= n) throw ProgramError("program: worker " + std::to_string(w) + "'s queue names task " + std::to_string(t) + ", which does not exist");
      if (queued[t]++) throw ProgramError("program: " + describe_task(p, t) + " is queued more than once");
    }
  for (uint32_t t = 0; t < n; ++t)
    if (!queued[t]) throw ProgramError("program: " + describe_task(p, t) + " is in no worker's queue");

  std::vector<uint32_t> event_remaining(p.events.size());
  for (uint32_t e = 0; e < p.events.size(); ++e) event_remaining[e] = p.events[e].trigger_count;
  std::vector<size_t> head(p.queues.size(), 0);
  uint32_t done = 0;
  bool progress = true;
  while (done < n && progress) {
    progress = false;
    for (uint32_t w = 0; w < p.queues.size(); ++w) {
      while (head[w] < p.queues[w].size()) {
        const TaskDesc& task = p.tasks[p.queues[w][head[w]]];
        bool ready = true;
        for (uint32_t i = 0; i < task.wait_count && ready; ++i) ready = event_remaining[p.waits[task.wait_begin + i]] == 0;
        if (!ready) break;
        for (uint32_t i = 0; i < task.signal_count; ++i) {
          uint32_t& remaining = event_remaining[p.signals[task.signal_begin + i]];
          if (remaining) --remaining;
        }
        ++head[w];
        ++done;
        progress = true;
      }
    }
  }
  if (done == n) return;
  std::ostringstream out;
  out << "program: the static queues deadlock:";
  for (uint32_t w = 0; w < p.queues.size(); ++w) {
    if (head[w] >= p.queues[w].size()) continue;
    const uint32_t t = p.queues[w][head[w]];
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) {
      uint32_t e = p.waits[task.wait_begin + i];
      if (event_remaining[e] == 0) continue;
      out << " worker " << w << " waits in " << describe_task(p, t) << " on event " << e << ";";
      break;
    }
  }
  throw ProgramError(out.str());
}

}  // namespace

void validate_program(const Program& program) {
  if (program.workers == 0) throw ProgramError("program: zero workers");
  check_ranges(program);
  check_trigger_counts(program);
  check_acyclic(program);
  if (program.placement == Placement::static_queues) {
    if (program.queues.size() != program.workers)
      throw ProgramError("program: " + std::to_string(program.queues.size()) + " static queues for " +
                         std::to_string(program.workers) + " workers");
    check_static_queues(program);
  }
}

std::string bsp_order_violation(const Program& p) {
  // Per event, the latest node that signals it (and a task of that node, for the message).
  std::vector<uint32_t> signalling_task(p.events.size(), kNoSlot), signalling_node(p.events.size(), 0);
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.signal_count; ++i) {
      const uint32_t e = p.signals[task.signal_begin + i];
      if (signalling_task[e] == kNoSlot || task.node > signalling_node[e]) signalling_task[e] = t, signalling_node[e] = task.node;
    }
  }
  for (uint32_t t = 0; t < p.tasks.size(); ++t) {
    const TaskDesc& task = p.tasks[t];
    for (uint32_t i = 0; i < task.wait_count; ++i) {
      const uint32_t e = p.waits[task.wait_begin + i];
      if (signalling_task[e] != kNoSlot && signalling_node[e] >= task.node)
        return describe_task(p, t) + " waits on event " + std::to_string(e) + ", which " + describe_task(p, signalling_task[e]) +
               " of node " + std::to_string(signalling_node[e]) + " signals: not an earlier node than its own " +
               std::to_string(task.node) + ", so bsp (node by node, no event waits) would run it before its input";
    }
  }
  return "";
}

}  // namespace tilefire
