#pragma once
// The shape of a compiled program (`tilefire inspect`): tasks and events per op and per layer, edges, the
// critical path in tasks and in modelled time on a device model, bytes and flops per task; and the task
// graph of one layer as Graphviz. The first tool of the scheduling research kit (issue 5).
#include <cstdint>
#include <string>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire {

struct InspectOptions {
  std::string model_dir;     // a Hugging Face folder (config.json), or
  std::string preset;        // a preset shape (weights are not needed)
  std::string dtype;         // a preset's weights (empty: bf16), or a checkpoint's in place of config.json's
  uint32_t tp = 1, rank = 0;  // tensor parallelism: inspect this rank's program
  std::string granularity = "tile";  // tile, head or op (events per producer tile, head-wide band, or op)
  uint32_t kv_splits = 0;            // split-KV attention at decode: chunks per KV head (0: automatic, 1: none)
  std::string policy;        // placement policy (default balanced)
  std::string device = "h200";  // device model for the modelled time: h100, h200, b200
  uint32_t workers = 0;      // 0: the device's SMs
  uint32_t tokens = 1;       // tokens per step (1: a decode step)
  uint32_t context = 512;    // positions in the KV cache (attention's work)
  std::string dot_path;      // when set, the task graph of layer dot_layer is written here
  uint32_t dot_layer = 0;
};

struct OpShape {
  std::string op;
  uint32_t tasks = 0;
  uint32_t events = 0;           // events its tasks signal
  double weight_bytes = 0;       // over all its tasks
  double activation_bytes = 0;
  double flops = 0;
  double modelled_ns = 0;        // sum of its tasks' modelled times
};

struct LayerShape {
  uint32_t layer = 0;
  uint32_t tasks = 0, events = 0;
};

struct InspectReport {
  std::string model, device;
  uint32_t workers = 0, tokens = 0, context = 0, tp = 1;
  uint32_t nodes = 0, tasks = 0, events = 0, edges = 0;  // edges: (waiting task, awaited event) pairs
  std::vector<OpShape> ops;        // in op-list order, ops with tasks only
  std::vector<LayerShape> layers;
  uint32_t critical_path_tasks = 0;  // the longest chain of dependent tasks
  double critical_path_ns = 0;       // the longest chain in modelled time (task times + signal latencies)
  std::vector<std::pair<std::string, uint32_t>> critical_path_ops;  // ops along that chain, with counts
  double bound_ns = 0;               // all bytes over the bandwidth, or all flops over the peak
  double total_bytes = 0, total_flops = 0;
  bool dot_written = false;
};

InspectReport inspect_program(const InspectOptions& options);  // throws InputError for bad options

}  // namespace tilefire
