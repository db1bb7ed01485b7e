// Chrome trace / Perfetto JSON of one step: a row (tid) per worker, a complete slice ("ph": "X") per task.
#include <fstream>

#include <nlohmann/json.hpp>

#include "megakernel/engine_impl.h"

namespace tilefire {

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
    std::string name = std::string(op_name(task.op)) + " L" + std::to_string(task.layer) + " [" +
                       std::to_string(task.tile_begin) + "," + std::to_string(task.tile_end) + ")";
    events.push_back({{"name", name},
                      {"cat", std::string(op_name(task.op))},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", t.worker},
                      {"ts", double(t.start_ns - origin) / 1000.0},
                      {"dur", double(t.end_ns - t.start_ns) / 1000.0},
                      {"args", {{"task", t.task}, {"layer", task.layer}, {"node", task.node}}}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  std::ofstream out(path);
  if (!out) throw InputError("--trace: cannot write '" + path + "'");
  out << trace.dump() << "\n";
  if (!out) throw InputError("--trace: failed writing '" + path + "'");
}

}  // namespace tilefire
