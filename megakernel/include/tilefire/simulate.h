#pragma once
// The megakernel simulator (`tilefire simulate`, docs/SIMULATOR.md): a model's decode program, placed by a
// policy, run on a device model; the predicted step time against its bound and against bsp.
#include <cstdint>
#include <string>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire {

struct SimulateOptions {
  std::string model_dir, preset;   // a Hugging Face folder (config.json), or a preset shape
  std::string dtype;               // a preset's weights (empty: bf16), or a checkpoint's in place of
                                   // config.json's torch_dtype (empty: as config.json says)
  std::string device = "h200";     // h100, h200, b200, cpu (measured on this machine), or a JSON file
  std::string policy;              // placement policy (default balanced)
  std::string granularity = "tile";  // events per producer tile, head-wide band, or op
  uint32_t kv_splits = 0;            // split-KV attention: chunks per KV head (0: automatic, 1: none)
  uint32_t tp = 1, rank = 0;
  uint32_t batch = 1;              // sequences per decode step, each at `context` positions (measured on
                                   // the cpu backend by `bench --batch`; the cuda backend runs one)
  uint32_t context = 512;          // positions in the KV cache
  uint32_t threads = 0;            // the cpu device's workers (0: every core)
  std::string trace_path;          // the simulated timeline as a Chrome/Perfetto trace
  // A traced step of this same program (`run --trace`, cpu or cuda) to fit the device to
  // (docs/SIMULATOR.md), and where to write the fitted device (a file `device` reads).
  std::string fit_trace_path, fit_out_path;
};

struct SimulateReport {
  std::string model, device;
  bool device_measured = false;  // the `cpu` device, measured on this machine by this call
  uint32_t workers = 0, tasks = 0;
  double memory_gbs = 0, flops = 0, dispatch_ns = 0, signal_ns = 0;  // the device model used
  double link_gbs = 0, link_latency_ns = 0;                           // its link (0: none)
  double rotation_ns = 0, exp_ns = 0;                                 // its epilogue costs per worker
  double prefetch_bytes = 0;   // what a waiting worker fetches ahead: at most this many bytes (0: no bound)
  uint32_t prefetch_tasks = 1; // over this many upcoming tasks (0: its whole queue)
  uint32_t prefetch_max_tokens = 0;  // and nothing for steps of more tokens than this (0: no limit)
  bool input_rows_cached = false;  // a matrix tile's input rows cost no memory time (the cpu device)
  double stall_ns = 0, stall_every_ns = 0;  // each worker loses stall_ns every stall_every_ns (0: never)
  double shared_memory_bytes = 0;  // per worker (a GPU's CTA; 0: none modelled), and the weight stages
  uint32_t weight_stages = 0;      // of the kernel's ring that fit beside this program's tiles there
  uint32_t weight_stage_bytes = 0; // bytes per stage of that ring (the cuda kernel's default)
  uint32_t tokens_per_step = 1;    // the simulated step's tokens (--batch)
  std::vector<double> worker_speed;  // each worker's speed relative to the others (mean 1; empty: all alike)
  double step_ms = 0;      // predicted decode step (dataflow)
  double bound_ms = 0;     // bytes over the bandwidth, or flops over the peak
  double bound_share = 0;  // bound / step
  double bsp_ms = 0;       // the same tiles, a barrier between ops
  double bsp_ratio = 0;    // bsp / dataflow (above 1: dataflow faster)
  double idle_share = 0;   // mean share of the step a worker spends not running a task
  std::vector<double> idle_ms;  // per worker: the predicted step less the time it runs tasks
  // Tensor parallelism (--tp): the collectives' link time were none of it hidden (per collective node, its
  // busiest worker's link time, latency included per tile; docs/SIMULATOR.md), how much of the step they
  // add (the step against one whose collectives cost nothing on the link), and the share of the former
  // that overlapping them with other tiles hides.
  double collective_ms = 0, exposed_collective_ms = 0, hidden_collective_share = 0;
  bool trace_written = false;
  // --fit-trace: the traced step, the device's figures fitted to it, the fitted device's prediction, and
  // how many pairs of tasks each figure came from.
  bool fitted = false, fit_written = false;
  double traced_step_ms = 0, fitted_step_ms = 0;
  double fitted_memory_gbs = 0, fitted_dispatch_ns = 0, fitted_signal_ns = 0;
  uint32_t fit_dispatch_samples = 0, fit_signal_samples = 0, fit_streaming_tasks = 0;
};

SimulateReport simulate_model(const SimulateOptions& options);  // throws InputError for bad options

// More than this share of each core taken from the measured `cpu` device's workers by other work means
// a busy machine, whose prediction can be far off (docs/SIMULATOR.md, "A busy machine"; an idle 2-core
// VM loses 3 to 9%).
inline constexpr double kBusyMachineStallShare = 0.25;

// A warning naming the share taken, when `report`'s device was measured here on a busy machine; empty
// otherwise (a device file or preset is the user's model, stalls and all).
std::string busy_machine_warning(const SimulateReport& report);

}  // namespace tilefire
