// tilefire simulate: a model's decode program on a device model (a discrete-event simulation of the
// megakernel): the predicted step time, its bound, the share of the bound reached, idle time, and the
// ratio against bsp under the same model.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "commands.h"
#include "tilefire/simulate.h"

namespace tilefire::cli {

namespace {

const char* kSimulateHelp = R"(usage: tilefire simulate (--model DIR | --preset NAME) [flags]

  --model DIR      a Hugging Face folder (its config.json is read; no weights are needed, though the names
                   of those there are when the config leaves the LM head's tie to them)
  --preset NAME    a preset shape: tiny small llama-3.2-1b qwen3-0.6b gemma-3-1b gemma-2-2b llama-3.1-8b qwen3-8b
  --dtype NAME     weight dtype: of a preset (default bf16), or of a checkpoint's weights in place of its
                   config.json's torch_dtype, which is often wrong (default: as config.json says)
  --device NAME    h100, h200 (default), b200 (datasheet figures), cpu (measured on this machine now),
                   or FILE.json with workers, memory_gbs, flops, dispatch_ns, signal_ns (and link_gbs,
                   required with --tp, 0 for no link, and link_latency_ns; rotation_ns, exp_ns for RoPE pairs and exponentials;
                   prefetch_bytes, prefetch_tasks, prefetch_max_tokens for what a waiting worker
                   fetches ahead; stall_ns, stall_every_ns for time the machine takes from each worker;
                   worker_speed, one relative speed per worker, for workers that are not alike;
                   input_rows_cached, true where matrix tiles read their input rows from a cache;
                   shared_memory_bytes per worker, where a GPU's weight stages are fitted beside the
                   tiles; flops may be one peak or one per dtype, {"bf16": ..., "f32": ...})
  --threads N      the cpu device's workers (default: every core)
  --policy NAME    placement policy (the policies are listed at the end)
  --list-policies  print the policies' names, one a line, and nothing else (for scripts)
  --granularity G  events per producer tile (tile, default), head-wide band (head), or op
  --kv-splits N    split-KV attention: each KV head's positions in N tiles (1: none; default automatic)
  --tp N, --rank R tensor parallelism: simulate rank R's program of N
  --batch B        sequences per decode step, each at --context positions (default 1; the cpu backend
                   batches, `bench --batch`; on a GPU model batch > 1 is a prediction nothing checks yet)
  --context T      positions in the KV cache (default 512)
  --trace FILE     the simulated timeline as a Chrome/Perfetto trace (the format of `run --trace`)
  --fit-trace FILE a step traced by `run --trace` (cpu or cuda) of this same program (give the traced
                   run's workers, --policy, --granularity, --kv-splits and about its --context; with
                   --batch B, a step of `bench --batch B --trace`): fits the device's bandwidth,
                   dispatch and signal costs to it and predicts the step with them
  --fit-out FILE   with --fit-trace: write the fitted device as a file --device reads
  --json           one JSON object: step_ms, bound_ms, bound_share, bsp_ratio, idle_share, idle_ms_per_worker, ...
)";

}  // namespace

int simulate_command(int argc, char** argv) {
  Args args("simulate", {"--json", "--help", "--list-policies"},
            {"--model", "--preset", "--dtype", "--device", "--threads", "--policy", "--granularity", "--kv-splits", "--tp", "--rank", "--batch", "--context",
             "--trace", "--fit-trace", "--fit-out"});
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kSimulateHelp, stdout);
    std::fputs(policy_help().c_str(), stdout);
    return 0;
  }
  if (args.has("--list-policies")) {
    for (const auto& [name, description] : placement_policies()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (args.has("--model") && args.has("--preset")) throw InputError("tilefire simulate: give --model DIR or --preset NAME, not both");
  if (!args.has("--model") && !args.has("--preset")) throw InputError("tilefire simulate: give --model DIR or --preset NAME");
  SimulateOptions o;
  o.model_dir = args.text_or("--model", "");
  o.preset = args.text_or("--preset", "");
  o.dtype = args.text_or("--dtype", "");
  o.device = args.text_or("--device", "h200");
  o.threads = uint32_t(args.unsigned_or("--threads", 0, 1, 256));
  o.policy = args.text_or("--policy", "");
  o.granularity = args.text_or("--granularity", "tile");
  o.kv_splits = uint32_t(args.unsigned_or("--kv-splits", 0, 1, 256));
  o.tp = uint32_t(args.unsigned_or("--tp", 1, 1, 1024));
  o.rank = uint32_t(args.unsigned_or("--rank", 0, 0, 1023));
  o.batch = uint32_t(args.unsigned_or("--batch", 1, 1, 256));
  o.context = uint32_t(args.unsigned_or("--context", 512, 1, 1u << 20));
  o.trace_path = args.text_or("--trace", "");
  o.fit_trace_path = args.text_or("--fit-trace", "");
  o.fit_out_path = args.text_or("--fit-out", "");
  if (!o.fit_out_path.empty() && o.fit_trace_path.empty()) throw InputError("tilefire simulate: --fit-out needs --fit-trace");
  const SimulateReport r = simulate_model(o);
  const std::string busy = busy_machine_warning(r);
  if (!busy.empty()) std::fprintf(stderr, "%s\n", busy.c_str());
  if (args.has("--json")) {
    nlohmann::json out = nlohmann::json{{"model", r.model},         {"device", r.device},           {"workers", r.workers},
                                {"tasks", r.tasks},         {"memory_gbs", r.memory_gbs},   {"flops", r.flops},
                                {"dispatch_ns", r.dispatch_ns}, {"signal_ns", r.signal_ns}, {"step_ms", r.step_ms},
                                {"link_gbs", r.link_gbs},   {"link_latency_ns", r.link_latency_ns},
                                {"bound_ms", r.bound_ms},   {"bound_share", r.bound_share}, {"bsp_ms", r.bsp_ms},
                                {"bsp_ratio", r.bsp_ratio}, {"idle_share", r.idle_share}, {"idle_ms_per_worker", r.idle_ms},
                                {"collective_ms", r.collective_ms}, {"exposed_collective_ms", r.exposed_collective_ms},
                                {"hidden_collective_share", r.hidden_collective_share},
                                {"rotation_ns", r.rotation_ns}, {"exp_ns", r.exp_ns},
                                {"prefetch_bytes", r.prefetch_bytes}, {"prefetch_tasks", r.prefetch_tasks},
                                {"prefetch_max_tokens", r.prefetch_max_tokens}, {"input_rows_cached", r.input_rows_cached},
                                {"stall_ns", r.stall_ns}, {"stall_every_ns", r.stall_every_ns},
                                {"worker_speed", r.worker_speed}, {"shared_memory_bytes", r.shared_memory_bytes},
                                {"weight_stages", r.weight_stages},
                                {"weight_stage_bytes", r.weight_stage_bytes}, {"busy_machine", !busy.empty()}};
    if (r.fitted)
      out["fit"] = {{"traced_step_ms", r.traced_step_ms},        {"fitted_step_ms", r.fitted_step_ms},
                    {"memory_gbs", r.fitted_memory_gbs},         {"dispatch_ns", r.fitted_dispatch_ns},
                    {"signal_ns", r.fitted_signal_ns},           {"dispatch_samples", r.fit_dispatch_samples},
                    {"signal_samples", r.fit_signal_samples},    {"streaming_tasks", r.fit_streaming_tasks}};
    std::cout << out.dump() << std::endl;
    return 0;
  }
  const bool no_ring = r.shared_memory_bytes > 0 && r.weight_stages == 0;
  const std::string prefetch_bytes = no_ring ? "nothing" : r.prefetch_bytes > 0 ? std::to_string(uint64_t(r.prefetch_bytes / 1024)) + " KiB" : "all";
  const std::string prefetch_tasks = r.prefetch_tasks == 0   ? "its queue"
                                     : r.prefetch_tasks == 1 ? "the next task"
                                                             : "the next " + std::to_string(r.prefetch_tasks) + " tasks";
  std::printf("%s on %s: %u workers, %.0f GB/s, %.3g flop/s, %.0f ns per task, %.0f ns per signal, %.2f ns per RoPE pair, "
              "%.2f ns per exp, waiting prefetches %s of %s; %u tasks\n",
              r.model.c_str(), r.device.c_str(), r.workers, r.memory_gbs, r.flops, r.dispatch_ns, r.signal_ns, r.rotation_ns,
              r.exp_ns, prefetch_bytes.c_str(), prefetch_tasks.c_str(), r.tasks);
  if (r.shared_memory_bytes > 0)
    std::printf("%.0f KiB of shared memory per worker: %u weight stages of %u KiB beside this program's tiles%s\n",
                r.shared_memory_bytes / 1024, r.weight_stages, r.weight_stage_bytes / 1024,
                r.weight_stages == 0                                               ? " (none: no prefetch)"
                : r.prefetch_max_tokens > 0 && r.tokens_per_step > r.prefetch_max_tokens ? " (unused: steps of more tokens than a "
                                                                                     "vector pass are not staged)"
                                                                                   : "");
  if (!r.worker_speed.empty()) {
    const auto [slowest, fastest] = std::minmax_element(r.worker_speed.begin(), r.worker_speed.end());
    std::printf("workers' speeds relative to their mean: %.2f to %.2f\n", *slowest, *fastest);
  }
  if (r.stall_ns > 0 && r.stall_every_ns > 0)
    std::printf("each worker stalls %.3g us every %.3g ms (%.2g%% of its time taken by the machine)\n", r.stall_ns * 1e-3,
                r.stall_every_ns * 1e-6, 100 * r.stall_ns / r.stall_every_ns);
  std::printf("predicted decode step: %.4f ms (bound %.4f ms: %.0f%% of it reached), bsp %.4f ms (bsp / dataflow %.3f)\n",
              r.step_ms, r.bound_ms, 100 * r.bound_share, r.bsp_ms, r.bsp_ratio);
  const auto [least, most] = std::minmax_element(r.idle_ms.begin(), r.idle_ms.end());
  std::printf("workers idle %.0f%% of the step on average (per worker from %.4f to %.4f ms; --json lists each)\n",
              100 * r.idle_share, r.idle_ms.empty() ? 0.0 : *least, r.idle_ms.empty() ? 0.0 : *most);
  if (r.collective_ms > 0)
    std::printf("collectives: %.4f ms over the link (node by node, nothing hidden), %.4f ms of it adds to the step: "
                "overlap hides %.0f%%\n", r.collective_ms, r.exposed_collective_ms, 100 * r.hidden_collective_share);
  if (r.fitted) {
    std::printf("traced step: %.4f ms; fitted to it: %.0f GB/s (%u streaming tasks), %.0f ns per task (%u gaps), "
                "%.0f ns per signal (%u waits)\n", r.traced_step_ms, r.fitted_memory_gbs, r.fit_streaming_tasks,
                r.fitted_dispatch_ns, r.fit_dispatch_samples, r.fitted_signal_ns, r.fit_signal_samples);
    std::printf("predicted with the fitted device: %.4f ms (traced / predicted %.2f; the unfitted device: %.2f)\n",
                r.fitted_step_ms, r.fitted_step_ms > 0 ? r.traced_step_ms / r.fitted_step_ms : 0.0,
                r.step_ms > 0 ? r.traced_step_ms / r.step_ms : 0.0);
    if (r.fit_written) std::printf("fitted device: %s\n", o.fit_out_path.c_str());
  }
  if (r.trace_written) std::printf("simulated timeline: %s\n", o.trace_path.c_str());
  return 0;
}

}  // namespace tilefire::cli
