// tilefire inspect: the shape of a compiled program (tasks and events per op and per layer, edges), its
// critical path in tasks and in modelled time on a device model, bytes and flops per task; --dot writes
// one layer's task graph for Graphviz.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "commands.h"
#include "tilefire/inspect.h"

namespace tilefire::cli {

namespace {

const char* kInspectHelp = R"(usage: tilefire inspect (--model DIR | --preset NAME) [flags]

  --model DIR            a Hugging Face folder (its config.json is read; no weights are needed, though the
                         names of those there are when the config leaves the LM head's tie to them)
  --preset NAME          a preset shape: tiny small llama-3.2-1b qwen3-0.6b gemma-3-1b gemma-2-2b llama-3.1-8b qwen3-8b
  --dtype f32|bf16|f16   weight dtype: of a preset (default bf16), or of a checkpoint's weights in place of
                         its config.json's torch_dtype (default: as config.json says)
  --tp N, --rank R       tensor parallelism: inspect rank R's program of N
  --granularity tile|head|op  events per producer tile (default), head-wide band, or op
  --kv-splits N          split-KV attention: each KV head's positions in N tiles (1: none; default automatic)
  --policy NAME          placement policy (the policies are listed at the end)
  --device NAME          device model for the modelled time: h100, h200 (default), b200
  --workers N            workers the program is placed for (default: the device's SMs)
  --tokens N             tokens per step (default 1: a decode step)
  --context T            positions in the KV cache (default 512)
  --dot FILE             write the task graph of one layer as Graphviz (--dot-layer L, default 0)
  --json                 one JSON object
)";

}  // namespace

int inspect_command(int argc, char** argv) {
  Args args("inspect", {"--json", "--help"},
            {"--model", "--preset", "--dtype", "--tp", "--rank", "--granularity", "--kv-splits", "--policy", "--device", "--workers",
             "--tokens", "--context", "--dot", "--dot-layer"});
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kInspectHelp, stdout);
    std::fputs(policy_help().c_str(), stdout);
    return 0;
  }
  if (args.has("--model") && args.has("--preset")) throw InputError("tilefire inspect: give --model DIR or --preset NAME, not both");
  if (!args.has("--model") && !args.has("--preset")) throw InputError("tilefire inspect: give --model DIR or --preset NAME");
  if (args.has("--dot-layer") && !args.has("--dot")) throw InputError("tilefire inspect: --dot-layer picks the layer --dot FILE writes");
  InspectOptions o;
  o.model_dir = args.text_or("--model", "");
  o.preset = args.text_or("--preset", "");
  o.dtype = args.text_or("--dtype", "");
  o.tp = uint32_t(args.unsigned_or("--tp", 1, 1, 1024));
  o.rank = uint32_t(args.unsigned_or("--rank", 0, 0, 1023));
  o.granularity = args.text_or("--granularity", "tile");
  o.kv_splits = uint32_t(args.unsigned_or("--kv-splits", 0, 1, 256));
  o.policy = args.text_or("--policy", "");
  o.device = args.text_or("--device", "h200");
  o.workers = uint32_t(args.unsigned_or("--workers", 0, 1, 4096));
  o.tokens = uint32_t(args.unsigned_or("--tokens", 1, 1, 4096));
  o.context = uint32_t(args.unsigned_or("--context", 512, 1, 1u << 20));
  o.dot_path = args.text_or("--dot", "");
  o.dot_layer = uint32_t(args.unsigned_or("--dot-layer", 0, 0, 1u << 16));
  const InspectReport r = inspect_program(o);

  if (args.has("--json")) {
    nlohmann::json ops = nlohmann::json::array(), layers = nlohmann::json::array(), path = nlohmann::json::object();
    for (const OpShape& op : r.ops)
      ops.push_back({{"op", op.op}, {"tasks", op.tasks}, {"events", op.events}, {"weight_bytes", op.weight_bytes},
                     {"activation_bytes", op.activation_bytes}, {"flops", op.flops}, {"modelled_ns", op.modelled_ns}});
    for (const LayerShape& l : r.layers) layers.push_back({{"layer", l.layer}, {"tasks", l.tasks}, {"events", l.events}});
    for (const auto& [op, n] : r.critical_path_ops) path[op] = n;
    std::cout << nlohmann::json{{"model", r.model},
                                {"device", r.device},
                                {"workers", r.workers},
                                {"tokens", r.tokens},
                                {"context", r.context},
                                {"tp", r.tp},
                                {"nodes", r.nodes},
                                {"tasks", r.tasks},
                                {"events", r.events},
                                {"edges", r.edges},
                                {"ops", ops},
                                {"layers", layers},
                                {"critical_path_tasks", r.critical_path_tasks},
                                {"critical_path_ns", r.critical_path_ns},
                                {"critical_path_ops", path},
                                {"bound_ns", r.bound_ns},
                                {"total_bytes", r.total_bytes},
                                {"total_flops", r.total_flops}}
                     .dump()
              << std::endl;
    return 0;
  }
  std::printf("%s on %s (%u workers), %u token(s) per step, %u positions of context%s\n", r.model.c_str(), r.device.c_str(),
              r.workers, r.tokens, r.context, r.tp > 1 ? (", rank " + std::to_string(o.rank) + " of " + std::to_string(r.tp)).c_str() : "");
  std::printf("%u op nodes, %u tasks, %u events, %u edges (task waits on an event)\n", r.nodes, r.tasks, r.events, r.edges);
  std::printf("| op | tasks | events | MB weights / task | KB activations / task | MFLOP / task | modelled us, all tasks |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const OpShape& op : r.ops)
    std::printf("| %s | %u | %u | %.3f | %.2f | %.3f | %.1f |\n", op.op.c_str(), op.tasks, op.events, op.weight_bytes / op.tasks / 1e6,
                op.activation_bytes / op.tasks / 1e3, op.flops / op.tasks / 1e6, op.modelled_ns / 1e3);
  std::printf("per layer (tasks / events):");
  for (const LayerShape& l : r.layers) std::printf(" %u: %u/%u", l.layer, l.tasks, l.events);
  std::printf("\ncritical path: %u tasks; %.1f us modelled (", r.critical_path_tasks, r.critical_path_ns / 1e3);
  for (size_t i = 0; i < r.critical_path_ops.size(); ++i)
    std::printf("%s%s x%u", i ? ", " : "", r.critical_path_ops[i].first.c_str(), r.critical_path_ops[i].second);
  std::printf(")\nbound: %.1f us (%.1f MB over the bandwidth, %.2f GFLOP over the peak); the critical path is %.2fx the bound\n",
              r.bound_ns / 1e3, r.total_bytes / 1e6, r.total_flops / 1e9, r.bound_ns > 0 ? r.critical_path_ns / r.bound_ns : 0.0);
  if (r.dot_written) std::printf("task graph of layer %u: %s\n", o.dot_layer, o.dot_path.c_str());
  return 0;
}

}  // namespace tilefire::cli
