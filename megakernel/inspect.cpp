// tilefire/inspect.h: the shape of a compiled program and its critical path on a device model.
#include "tilefire/inspect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "graph/compile.h"
#include "graph/model_spec.h"
#include "megakernel/engine_impl.h"
#include "megakernel/tool_spec.h"
#include "scheduler/cost_model.h"
#include "scheduler/policy.h"

namespace tilefire {

namespace {

void write_layer_dot(const std::string& path, const Program& program, const TaskGraph& graph, uint32_t layer) {
  std::ofstream out(path);
  if (!out) throw InputError("--dot: cannot write '" + path + "'");
  out << "digraph layer_" << layer << " {\n  rankdir=LR;\n  node [shape=box, fontsize=10];\n";
  bool any = false;
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskDesc& task = program.tasks[t];
    if (task.layer != layer || task.op == OpCode::embed || task.op == OpCode::lm_head) continue;
    any = true;
    out << "  t" << t << " [label=\"" << op_name(task.op) << " [" << task.tile_begin << "," << task.tile_end << ")\"];\n";
    graph.for_each_predecessor(t, [&](uint32_t p) {
      const TaskDesc& pred = program.tasks[p];
      if (pred.layer == layer && pred.op != OpCode::embed && pred.op != OpCode::lm_head)
        out << "  t" << p << " -> t" << t << ";\n";
    });
  }
  out << "}\n";
  if (!any) throw InputError("--dot-layer " + std::to_string(layer) + ": the program has no tasks in that layer");
  out.close();  // a full disk shows only once the buffer is written
  if (!out) throw InputError("--dot: failed writing '" + path + "'");
}

}  // namespace

InspectReport inspect_program(const InspectOptions& options) {
  ModelSpec spec;
  InspectReport report;
  const std::optional<DType> dtype = options.dtype.empty() ? std::nullopt : parse_dtype(options.dtype);
  if (!options.dtype.empty() && !dtype) throw InputError("--dtype must be f32, bf16 or f16, got '" + options.dtype + "'");
  spec = spec_for_tool(options.model_dir, options.preset, dtype, &report.model);
  std::optional<DeviceModel> device = device_preset(options.device);
  if (!device)
    throw InputError("--device: unknown device '" + options.device + "' (expected h100, h200 or b200)");
  select_weight_dtype(*device, spec.dtype);  // every preset has a peak for every dtype
  const EventGranularity granularity = event_granularity(parse_granularity(options.granularity));
  if (!options.policy.empty() && !find_policy(options.policy))
    throw InputError("--policy: unknown placement policy '" + options.policy + "' (expected one of " + policy_names() + ")");
  if (options.tokens == 0 || options.context == 0) throw InputError("--tokens and --context must be at least 1");
  // A step's tokens take positions of the cache: more of them than the context cannot be.
  if (options.tokens > options.context)
    throw InputError("--tokens " + std::to_string(options.tokens) + " is more than --context " + std::to_string(options.context) +
                     " (the step's tokens are positions of the context)");
  DeviceModel model = *device;
  if (options.workers) model.workers = options.workers;

  CompileOptions compile;
  compile.workers = model.workers;
  compile.tokens = options.tokens;
  compile.max_context = std::max(std::min(spec.max_context, 4096u), options.context);
  if (compile.max_context > spec.max_context)
    throw InputError("--context " + std::to_string(options.context) + " exceeds the model's " + std::to_string(spec.max_context));
  compile.policy = options.policy.empty() ? std::string(kDefaultPolicy) : options.policy;
  compile.granularity = granularity;
  compile.kv_splits = options.kv_splits;
  compile.tp = options.tp;
  compile.rank = options.rank;
  if (options.rank >= options.tp)  // without --tp there is one rank, rank 0
    throw InputError("--rank " + std::to_string(options.rank) + " is not below --tp " + std::to_string(options.tp));
  const Program program = compile_model(spec, compile);
  const TaskGraph graph = task_graph(program);

  report.device = model.name;
  report.workers = model.workers;
  report.tokens = options.tokens;
  report.context = options.context;
  report.tp = options.tp;
  report.nodes = uint32_t(program.nodes.size());
  report.tasks = uint32_t(program.tasks.size());
  report.events = uint32_t(program.events.size());
  report.edges = uint32_t(program.waits.size());

  std::map<uint16_t, OpShape> by_op;
  std::map<uint32_t, LayerShape> by_layer;
  std::vector<double> task_ns(program.tasks.size());
  std::vector<uint32_t> event_layer(program.events.size(), 0);
  std::vector<uint16_t> event_op(program.events.size(), 0);
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    const TaskDesc& task = program.tasks[t];
    const TaskWork work = task_work(program, task, options.context);
    task_ns[t] = modelled_task_ns(model, work);
    OpShape& op = by_op[uint16_t(task.op)];
    op.op = std::string(op_name(task.op));
    ++op.tasks;
    op.weight_bytes += work.weight_bytes;
    op.activation_bytes += work.activation_bytes;
    op.flops += work.flops;
    op.modelled_ns += task_ns[t];
    LayerShape& layer = by_layer[task.layer];
    layer.layer = task.layer;
    ++layer.tasks;
    report.total_bytes += work.bytes();
    report.total_flops += work.flops;
    for (uint32_t i = 0; i < task.signal_count; ++i) {
      event_layer[program.signals[task.signal_begin + i]] = task.layer;
      event_op[program.signals[task.signal_begin + i]] = uint16_t(task.op);
    }
  }
  for (uint32_t e = 0; e < program.events.size(); ++e) {
    ++by_layer[event_layer[e]].events;
    ++by_op[event_op[e]].events;
  }
  for (auto& [code, op] : by_op) report.ops.push_back(op);
  for (auto& [index, layer] : by_layer) report.layers.push_back(layer);

  // Longest paths over the dependency DAG: tasks are in topological order.
  std::vector<uint32_t> count(program.tasks.size(), 0);
  std::vector<double> time(program.tasks.size(), 0);
  std::vector<int64_t> via(program.tasks.size(), -1);
  uint32_t last = 0;
  for (uint32_t t = 0; t < program.tasks.size(); ++t) {
    uint32_t best_count = 0;
    double best_time = 0;
    graph.for_each_predecessor(t, [&](uint32_t p) {
      best_count = std::max(best_count, count[p]);
      if (time[p] + model.signal_ns > best_time) {
        best_time = time[p] + model.signal_ns;
        via[t] = p;
      }
    });
    count[t] = best_count + 1;
    time[t] = best_time + task_ns[t];
    report.critical_path_tasks = std::max(report.critical_path_tasks, count[t]);
    if (time[t] > time[last]) last = t;
  }
  report.critical_path_ns = program.tasks.empty() ? 0 : time[last];
  std::map<std::string, uint32_t> path_ops;
  for (int64_t t = last; t >= 0 && !program.tasks.empty(); t = via[t]) ++path_ops[std::string(op_name(program.tasks[t].op))];
  report.critical_path_ops.assign(path_ops.begin(), path_ops.end());
  report.bound_ns = std::max(report.total_bytes / model.memory_gbs, report.total_flops / (model.flops * 1e-9));
  if (!options.dot_path.empty()) {
    write_layer_dot(options.dot_path, program, graph, options.dot_layer);
    report.dot_written = true;
  }
  return report;
}

}  // namespace tilefire
