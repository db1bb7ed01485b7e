#pragma once
// What a task costs: the bytes it moves and the flops it does (from its op and tile shapes), and a
// device model that turns them into time. The first pieces of the scheduling research kit (issue 5):
// `tilefire inspect` uses them for the critical path in modelled time; the simulator will use them to
// run whole programs.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/program.h"

namespace tilefire {

struct TaskWork {
  double weight_bytes = 0;      // weights streamed
  double activation_bytes = 0;  // activations and KV cache read and written
  // Of those, a matrix tile's reads of activations (its input rows, which every tile of the matrix reads
  // again, and a residual's columns): written earlier in the step and small, they sit in a cache
  // (DeviceModel::input_rows_cached).
  double input_row_bytes = 0;
  double flops = 0;
  double link_bytes = 0;        // collective tasks: bytes read from peer ranks over the link
  // Work beside the multiply-adds that costs far more than a flop on a CPU core: RoPE's (cos, sin) of
  // each rotated pair of q and k (in double, as transformers computes them), and the exponentials of
  // SwiGLU's sigmoid and of attention's softmax.
  double rotations = 0;
  double exps = 0;
  double bytes() const { return weight_bytes + activation_bytes; }
};

// A task's work when `context` positions are in the KV cache (attention reads them). With `sequences`
// > 1 the step's tokens are one decode token of each of that many sequences (the simulator's --batch),
// each with its own cache of `context` positions: attention reads `sequences` caches.
TaskWork task_work(const Program& program, const TaskDesc& task, uint32_t context, uint32_t sequences = 1);

// A device as the cost model sees it. Presets come from datasheets; the per-task costs are leads to be
// corrected against measurements (docs/SIMULATOR.md).
struct DeviceModel {
  std::string name;
  uint32_t workers = 1;        // SMs or cores
  double memory_gbs = 0;       // memory bandwidth, GB/s
  double flops = 0;            // peak flop/s for the weights' dtype (dense bf16 on GPUs): see dtype_flops
  double dispatch_ns = 0;      // per task: taking it from the queue and starting it
  double signal_ns = 0;        // an event's signal reaching a waiting worker
  double link_gbs = 0;         // to the other GPUs, per direction (NVLink); 0: no link
  double link_latency_ns = 0;  // a collective task's round trip to its peers' flags
  double rotation_ns = 0;      // one RoPE (cos, sin) pair on one worker
  double exp_ns = 0;           // one exponential on one worker
  // What a worker fetches ahead while it waits, as the backends' prefetch does: weights of at most
  // `prefetch_tasks` of its upcoming tasks (the one it waits for first; 0: no bound), at most
  // `prefetch_bytes` held at once (0: no bound). The cuda kernel's producer warp walks the CTA's queue
  // into its shared-memory stages; the cpu executor fetches the first 256 KB of the next task only.
  double prefetch_bytes = 0;
  uint32_t prefetch_tasks = 1;
  // Steps of more tokens than this fetch nothing ahead (0: no such limit). The cuda kernel stages a
  // tile's weights only for its vector pass, at most 4 tokens (kDeviceMaxPassTokens).
  uint32_t prefetch_max_tokens = 0;
  // Time the machine takes a worker away: every `stall_every_ns` each worker loses `stall_ns` (an
  // interrupt, or a virtual machine's host running something else on the core), at its own phase. 0: no
  // stalls (the GPU presets; an SM is not taken away). The cpu device measures them (docs/SIMULATOR.md):
  // a stall on one worker also delays every worker that waits on its tiles.
  double stall_ns = 0;
  double stall_every_ns = 0;
  // Each worker's speed relative to the others (mean 1; empty: all alike): worker w streams at
  // memory_gbs / workers * worker_speed[w] and runs its tiles that much faster or slower. The cores of a
  // virtual machine are not alike (a busy neighbour on the host's core), nor a hybrid CPU's; SMs are. The
  // cpu device measures them (docs/SIMULATOR.md, "Workers that are not alike").
  std::vector<double> worker_speed = {};
  // Peak flop/s per weight dtype, indexed by DType (f32, bf16, f16); 0 where the device gives none of
  // its own. `select_weight_dtype` puts the program's figure in `flops`.
  std::array<double, 3> dtype_flops = {};
  // Shared memory one worker's tiles may hold (a CTA's dynamic shared memory; 0: none modelled). On a GPU
  // the kernel's weight stages take what the tiles' workspace leaves (megakernel/kernel_layout.h), and
  // simulate sets the device's prefetch_bytes to those stages (in place of the figure given).
  double shared_memory_bytes = 0;
  // False: a waiting worker fetches nothing ahead (a GPU whose shared memory leaves no room for two
  // weight stages beside the tiles' workspace: the tiles read their weights from memory as they run).
  bool fetch_ahead = true;
  // True: a matrix tile's input rows cost no memory time (TaskWork::input_row_bytes), their reads being
  // part of the flop rate. The cpu device: its flop rate is measured on a tile whose input rows are in
  // the core's cache, as a step's are after the matrix's first tile reads them. At batch 1 they are a few
  // percent of a step's bytes; at batch 8 on `small` they were 40% (docs/SIMULATOR.md). False for the GPU
  // presets: there they come from L2, a bandwidth the model does not have yet.
  bool input_rows_cached = false;
};

// Puts the device's peak for weights of `dtype` in `flops`: its own figure for that dtype when it has
// one, else `flops` as it is. False when it has neither (the caller names the device).
bool select_weight_dtype(DeviceModel& device, DType dtype);

// h100 (SXM), h200, b200; nullopt for other names.
std::optional<DeviceModel> device_preset(const std::string& name);
std::vector<std::string> device_preset_names();

// The bytes a task moves through memory on `device`: its bytes() less its input rows' where the device
// has them in cache.
double streamed_bytes(const DeviceModel& device, const TaskWork& work);
// A task alone on one worker, which gets an even share of the device's bandwidth and flops: the larger
// of the memory time and the compute time, then its rotations and exponentials (an epilogue after the
// streaming, as the tiles do them), plus the dispatch cost; a collective task also reads its peers'
// data over an even share of the link, after the link's latency.
double modelled_task_ns(const DeviceModel& device, const TaskWork& work);
// The rotations' and exponentials' part of that time.
double modelled_epilogue_ns(const DeviceModel& device, const TaskWork& work);
// The link part of that time (0 for tasks that read nothing from peers).
double modelled_link_ns(const DeviceModel& device, const TaskWork& work);

}  // namespace tilefire
