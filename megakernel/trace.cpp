// Chrome trace / Perfetto JSON of one step: a row (tid) per worker, a complete slice ("ph": "X") per task.
#include <cmath>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "megakernel/engine_impl.h"
#include "megakernel/tool_spec.h"

namespace tilefire {

namespace {

std::string task_name(const Program& program, uint32_t index) {
  const TaskDesc& task = program.tasks[index];
  return std::string(op_name(task.op)) + " L" + std::to_string(task.layer) + " [" + std::to_string(task.tile_begin) + "," +
         std::to_string(task.tile_end) + ")";
}

// The dtype of the program's weight matrices (none for a program without any). A trace records it, so a
// fit does not read a step of f32 weights as a slow step of bf16 ones: both compile to the same tasks.
std::string weight_dtype_of(const Program& program) {
  for (const SlotDesc& slot : program.slots)
    if (slot.kind == SlotKind::weight) return std::string(dtype_name(slot.dtype));
  return "";
}

}  // namespace

void write_chrome_trace(const std::string& path, const Program& program, const std::vector<TaskTiming>& timings) {
  int64_t origin = timings.empty() ? 0 : timings.front().start_ns;
  for (const TaskTiming& t : timings) origin = std::min(origin, t.start_ns);
  nlohmann::json events = nlohmann::json::array();
  uint32_t workers = 0;
  for (const TaskTiming& t : timings) workers = std::max(workers, t.worker + 1);
  for (uint32_t w = 0; w < workers; ++w)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", w},
                      {"args", {{"name", "worker " + std::to_string(w)}}}});
  for (const TaskTiming& t : timings) {
    const TaskDesc& task = program.tasks[t.task];
    events.push_back({{"name", task_name(program, t.task)},
                      {"cat", std::string(op_name(task.op))},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", t.worker},
                      {"ts", double(t.start_ns - origin) / 1000.0},
                      {"dur", double(t.end_ns - t.start_ns) / 1000.0},
                      {"args", {{"task", t.task}, {"layer", task.layer}, {"node", task.node}}}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  // What a fit must know that the tasks do not say: the weights' dtype, and the tokens of the step (one
  // at decode, B for a decode step of B sequences: the same tiles, B rows of input each).
  trace["otherData"] = {{"step_tokens", program.tokens}};
  if (const std::string dtype = weight_dtype_of(program); !dtype.empty()) trace["otherData"]["weight_dtype"] = dtype;
  std::ofstream out(path);
  if (!out) throw InputError("--trace: cannot write '" + path + "'");
  out << trace.dump() << "\n";
  out.close();  // a full disk shows only once the buffer is written
  if (!out) throw InputError("--trace: failed writing '" + path + "'");
}

std::vector<SimulatedTask> read_chrome_trace(const std::string& path, const Program& program) {
  const nlohmann::json trace = read_json_file(path, "--fit-trace " + path);
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    throw InputError("--fit-trace " + path + ": no traceEvents array (expected a trace written by `tilefire run --trace`)");
  // Traces written before the dtype was recorded have none; those are taken as they are.
  const nlohmann::json* other = trace.contains("otherData") && trace["otherData"].is_object() ? &trace["otherData"] : nullptr;
  if (other && other->contains("weight_dtype") && (*other)["weight_dtype"].is_string()) {
    const std::string traced = (*other)["weight_dtype"].get<std::string>(), here = weight_dtype_of(program);
    if (!here.empty() && traced != here)
      throw InputError("--fit-trace " + path + ": the traced step ran " + traced + " weights and this program has " + here +
                       " ones (the same tasks, half or twice the bytes); give simulate --dtype " + traced);
  }
  if (other && other->contains("step_tokens") && (*other)["step_tokens"].is_number_unsigned()) {
    const uint64_t traced = (*other)["step_tokens"].get<uint64_t>();
    if (traced != program.tokens)
      throw InputError("--fit-trace " + path + ": the traced step ran " + std::to_string(traced) + " token(s), a token of each of " +
                       std::to_string(traced) + " sequence(s), and this program runs " + std::to_string(program.tokens) +
                       " (the same tasks, other rows); give simulate --batch " + std::to_string(traced));
  }
  std::vector<SimulatedTask> tasks;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    // Only complete slices are tasks (a "ph" of another type, as of another kind, is skipped: a task it
    // hid is then missing, which the fit names).
    if (!event.is_object() || !event.contains("ph") || event["ph"] != "X") continue;
    const bool well_formed = event.contains("args") && event["args"].is_object() && event["args"].contains("task") &&
                             event["args"]["task"].is_number_unsigned() && event.contains("tid") && event["tid"].is_number_unsigned() &&
                             event.contains("ts") && event["ts"].is_number() && event.contains("dur") && event["dur"].is_number() &&
                             event.contains("name") && event["name"].is_string();
    if (!well_formed) throw InputError("--fit-trace " + path + ": a task slice without name, tid, ts, dur or args.task");
    const uint64_t index = event["args"]["task"].get<uint64_t>();
    if (index >= program.tasks.size())
      throw InputError("--fit-trace " + path + ": task " + std::to_string(index) + " is outside this program's " +
                       std::to_string(program.tasks.size()) + " tasks; give simulate the flags of the traced run");
    const std::string expected = task_name(program, uint32_t(index)), found = event["name"].get<std::string>();
    if (found != expected)
      throw InputError("--fit-trace " + path + ": task " + std::to_string(index) + " is '" + found + "' in the trace and '" + expected +
                       "' in this program; give simulate the flags of the traced run (its workers: --device cpu --threads N, or a device file of N "
                       "workers; and its --policy, --granularity, --kv-splits)");
    // Bounded before converting: a tid past 32 bits would wrap onto a real worker, and a time past
    // 1e12 us (11 days) would make the step's span infinite.
    const uint64_t tid = event["tid"].get<uint64_t>();
    const double ts_us = event["ts"].get<double>(), dur_us = event["dur"].get<double>();
    if (tid > std::numeric_limits<uint32_t>::max())
      throw InputError("--fit-trace " + path + ": task " + std::to_string(index) + " ran on tid " + std::to_string(tid) +
                       ", which is no worker");
    if (!(std::fabs(ts_us) <= 1e12) || !(std::fabs(dur_us) <= 1e12))
      throw InputError("--fit-trace " + path + ": task " + std::to_string(index) +
                       "'s ts and dur must be microseconds within 1e12 of 0");
    SimulatedTask task;
    task.task = uint32_t(index);
    task.worker = uint32_t(tid);
    task.start_ns = ts_us * 1000.0;
    task.end_ns = task.start_ns + dur_us * 1000.0;
    tasks.push_back(task);
  }
  return tasks;
}

}  // namespace tilefire
