// tilefire/simulate.h: a model's decode program on a device model, and the `cpu` device measured here.
#include "tilefire/simulate.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>

#include "graph/compile.h"
#include "megakernel/cuda/device_job.h"
#include "megakernel/engine_impl.h"
#include "megakernel/kernel_layout.h"
#include "megakernel/tool_spec.h"
#include "ops/activation.h"
#include "ops/matmul.h"
#include "ops/rope.h"
#include "scheduler/cost_model.h"
#include "scheduler/policy.h"
#include "scheduler/simulator.h"
#include "scheduler/trace_fit.h"

namespace tilefire {

namespace {

// `weights` weights of 0.5 in `dtype`, in storage of whole floats.
std::vector<float> weights_of_half(uint64_t weights, DType dtype) {
  std::vector<float> storage((weights * dtype_size(dtype) + 3) / 4);
  if (dtype == DType::f32) {
    std::fill(storage.begin(), storage.end(), 0.5f);
  } else {
    const uint16_t half = dtype == DType::bf16 ? uint16_t(0x3f00) : uint16_t(0x3800);  // 0.5 in bf16, in f16
    uint16_t* words = reinterpret_cast<uint16_t*>(storage.data());
    std::fill(words, words + weights, half);
  }
  return storage;
}

// The stalls of `threads` workers on this machine (DeviceModel::stall_ns, stall_every_ns): each spins on
// the core the executor would give it (when there are enough), reading the clock; a read more than 5 us
// after the one before is time the core was taken away (an interrupt, or on a virtual machine the host).
// Reads are tens of ns apart otherwise. The 2-core VM loses 30 to 50 us about every 0.5 ms on each core,
// some 7% of its time, with spells of a stall every 0.1 ms (docs/SIMULATOR.md, "Stalls"). So the figures
// are the median of 11 windows of 20 ms, as bench reports the median step: a spell in one window moves
// them little. No stalls: both 0.
struct StallFigures {
  double stall_ns = 0, every_ns = 0;
  double share() const { return every_ns > 0 ? stall_ns / every_ns : 0; }
};

StallFigures probe_stalls(uint32_t threads) {
  using Clock = std::chrono::steady_clock;
  constexpr int kWindows = 11;
  constexpr double kWindowNs = 20e6, kStallNs = 5e3;
  const std::vector<uint32_t> cpus = allowed_cpus();
  const bool pin = cpus.size() >= threads;
  std::vector<double> lost(size_t(threads) * kWindows, 0.0), stalls(size_t(threads) * kWindows, 0.0);  // [worker, window]
  auto spin = [&](uint32_t w) {
    if (pin) pin_to_core(pthread_self(), cpus[w]);  // as the executor pins its workers
    const Clock::time_point begin = Clock::now();
    Clock::time_point last = begin;
    for (;;) {
      const Clock::time_point now = Clock::now();
      const double gap = std::chrono::duration<double, std::nano>(now - last).count();
      const double since = std::chrono::duration<double, std::nano>(now - begin).count();
      if (since >= kWindowNs * kWindows) break;
      if (gap > kStallNs) {
        const size_t at = size_t(w) * kWindows + size_t(since / kWindowNs);
        lost[at] += gap;
        stalls[at] += 1;
      }
      last = now;
    }
  };
  std::vector<std::thread> spinners;
  for (uint32_t w = 0; w < threads; ++w) spinners.emplace_back(spin, w);
  for (std::thread& t : spinners) t.join();
  // Per window, over the workers: the time lost and the stalls; the window of the median time lost.
  std::vector<std::pair<double, double>> windows(kWindows, {0.0, 0.0});
  for (uint32_t w = 0; w < threads; ++w)
    for (int i = 0; i < kWindows; ++i) {
      windows[i].first += lost[size_t(w) * kWindows + i];
      windows[i].second += stalls[size_t(w) * kWindows + i];
    }
  std::nth_element(windows.begin(), windows.begin() + kWindows / 2, windows.end());
  const auto [lost_ns, count] = windows[kWindows / 2];
  if (count == 0) return {};  // none: the device has no stalls
  StallFigures figures{lost_ns / count, kWindowNs * double(threads) / count};
  figures.stall_ns = std::min(figures.stall_ns, 0.9 * figures.every_ns);  // a core almost never running is still modelled
  return figures;
}

// The machine's own stalls, not another process's: a process that starts beside the measurement takes
// cores from it for a few hundred ms (a shell pipe's consumer starting as the tool runs took 30 to 35% of
// each core on the 2-core VM, and the prediction of tiny's 0.13 ms step came out 3 to 4 times too long:
// docs/SIMULATOR.md, "A busy machine"). So a measurement that finds more than 15% of each core taken
// (this VM's own: 3 to 9%) is taken again after 50 ms, at most twice, and the least stalled kept. Work
// that keeps the cores busy throughout is still measured, and the report warns of it.
void measure_stalls(uint32_t threads, DeviceModel& d) {
  constexpr double kQuietShare = 0.15;
  constexpr int kAttempts = 3;
  StallFigures least = probe_stalls(threads);
  for (int attempt = 1; attempt < kAttempts && least.share() > kQuietShare; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const StallFigures again = probe_stalls(threads);
    if (again.share() < least.share()) least = again;
  }
  d.stall_ns = least.stall_ns;
  d.stall_every_ns = least.every_ns;
}

// The model's weight matrices in the order a decode step streams them, layer by layer (QKV, O, gate
// and up as one matrix, down), then the LM head: as many as fill `budget_bytes` in `wdtype`, two at
// least. The whole model when it fits; a prefix of its layers when not.
std::vector<ChainMatrix> model_matrices(const ModelSpec& spec, DType wdtype, uint64_t budget_bytes) {
  const uint32_t q = spec.heads * spec.head_dim, kv = spec.kv_heads * spec.head_dim;
  const std::vector<ChainMatrix> layer{{q + 2 * kv, spec.hidden}, {spec.hidden, q}, {2 * spec.ffn, spec.hidden}, {spec.hidden, spec.ffn}};
  auto bytes_of = [&](const ChainMatrix& m) { return uint64_t(m.rows) * m.cols * dtype_size(wdtype); };
  std::vector<ChainMatrix> chain;
  uint64_t bytes = 0;
  for (uint32_t l = 0; l < spec.layers; ++l)
    for (const ChainMatrix& m : layer) {
      if (chain.size() >= 2 && bytes + bytes_of(m) > budget_bytes) return chain;
      chain.push_back(m);
      bytes += bytes_of(m);
    }
  const ChainMatrix lm_head{spec.vocab, spec.hidden};
  if (chain.size() < 2 || bytes + bytes_of(lm_head) <= budget_bytes) chain.push_back(lm_head);
  return chain;
}

// The cpu device measured on this machine with `threads` workers, for a program of `spec`'s model in
// `wdtype` that reads `working_set_bytes` per step (at most 1 GiB is measured: beyond it every cache is
// far too small anyway) in tiles that stream `tile_bytes` of weights on average.
//
// Bandwidth, dispatch and signal are fitted (scheduler/trace_fit.h) to traced steps of a calibration
// program with a transformer's traffic, `matrix_chain_program`: the model's own weight matrices, as
// many as fill the working set, in a chain, cut into tiles of the program's mean size, each tile
// reading the output of the matrix before after waiting on it. So the figures carry what real tiles
// pay and empty tasks do not: inputs and event counters another core wrote (a fitted tiny trace showed
// 180-270 ns per task where empty tasks measured 9), the cache residency of a working set of this size
// (tiny's 6 MB streams at about twice the rate of small's 257 MB on the 2-core VM), and the model's
// own row lengths and matrix sizes. Placed on the dynamic ready queue when the program is. Each figure
// is the median over the steps.
// The flop rate is the matmul kernel's on tiles of the program's `tokens` per step, over as many weights
// as the step streams (at most 64 MiB: twice this VM's L3): it converts each weight once for a block of
// up to 4 tokens, so a batched step does up to 4 times the multiply-adds per second of a one-token step,
// and past that its time grows with the tokens while the weights stream. Measured at one token on one
// tile in cache, batched steps of `small` were predicted 1.7 to 2 times too slow; at their tokens on one
// tile in cache, 16 tokens 0.65 times too fast (docs/BENCHMARKS.md).
DeviceModel measure_cpu_device(uint32_t threads, uint64_t working_set_bytes, const ModelSpec& spec, DType wdtype,
                               uint64_t tile_bytes, bool dynamic_queue, uint32_t tokens) {
  DeviceModel d;
  d.name = "cpu";
  d.workers = threads;
  {
    const uint32_t rows = 64, k = 1024;  // a decode tile's shape, weights in the model's dtype
    const uint64_t tile_weights = uint64_t(rows) * k;
    // Tiles of the working set, at most 64 MiB of them, and at most 2^29 multiply-adds per pass (a pass of
    // 256 tokens reads fewer weights: it is bound by its arithmetic anyway).
    const uint64_t by_bytes = std::min<uint64_t>(working_set_bytes, 64ull << 20) / (tile_weights * dtype_size(wdtype));
    const uint64_t tiles = std::max<uint64_t>(1, std::min<uint64_t>(by_bytes, (1ull << 29) / (tile_weights * tokens)));
    const std::vector<float> w = weights_of_half(tiles * tile_weights, wdtype);
    std::vector<float> x(size_t(k) * tokens, 0.25f), y(size_t(rows) * tokens);  // x: [tokens, k], y: [tokens, rows]
    const size_t tile_floats = size_t(tile_weights * dtype_size(wdtype) / 4);
    std::vector<double> samples;  // ns per tile, each over one pass of all the tiles
    for (int pass = 0; pass < 9; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      for (uint64_t t = 0; t < tiles; ++t) matmul_rows(w.data() + t * tile_floats, wdtype, k, 0, rows, x.data(), k, tokens, y.data(), rows);
      if (pass > 0)  // the first pass brings what fits into the caches, as the step before does
        samples.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / double(tiles));
    }
    d.flops = 2.0 * double(tile_weights) * tokens / (median(samples) * 1e-9) * threads;
  }
  {
    // The epilogues, with the tiles' own functions on one core: RoPE on heads of 128 at a decode
    // position (ops/rope.cpp: cos and sin in double per pair), and SwiGLU's sigmoid (ops/activation.h),
    // the same std::exp as attention's softmax.
    constexpr uint32_t kHeadDim = 128, kHeads = 32, kValues = 4096;
    const std::vector<float> inverse_frequencies = rope_inverse_frequencies(kHeadDim, 10000.0f, RopeScaling{});
    std::vector<float> heads(size_t(kHeads) * kHeadDim, 0.5f), values(kValues);
    for (uint32_t i = 0; i < kValues; ++i) values[i] = float(int(i % 200) - 100) * 0.05f;
    volatile float sink = 0;
    std::vector<double> rotations, exps;
    for (int i = 0; i < 31; ++i) {
      auto start = std::chrono::steady_clock::now();
      for (uint32_t h = 0; h < kHeads; ++h) rope_apply_head(heads.data() + size_t(h) * kHeadDim, kHeadDim, 17 + i, inverse_frequencies.data());
      rotations.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
                          (kHeads * kHeadDim / 2));
      start = std::chrono::steady_clock::now();
      float sum = 0;
      for (uint32_t v = 0; v < kValues; ++v) sum += silu(values[v]);
      exps.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / kValues);
      sink = sink + sum + heads[i];
    }
    d.rotation_ns = median(rotations);
    d.exp_ns = median(exps);
  }
  // The executor's prefetch while a task waits: the next task's first bytes only.
  d.prefetch_bytes = double(kCpuIdlePrefetchBytes);
  d.prefetch_tasks = 1;
  // The flop rate above read its tile's input rows from cache, as a step's matrix tiles do after the
  // first of each matrix: they are in it, not in the bandwidth's bytes.
  d.input_rows_cached = true;
  // Measured before the calibration, whose fit takes the stalls out of the bandwidth (they are in its
  // tiles' times, and the simulator charges them on their own).
  measure_stalls(threads, d);

  const std::vector<ChainMatrix> matrices = model_matrices(spec, wdtype, std::min<uint64_t>(working_set_bytes, 1ull << 30));
  Program chain = matrix_chain_program(matrices, tile_bytes, threads, wdtype);
  if (dynamic_queue) find_policy("dynamic")->place(chain, threads);
  const uint64_t width = chain.slots[0].cols;
  const uint32_t nodes = uint32_t(matrices.size());
  std::vector<float> norm(width, 1.0f), activations(size_t(nodes + 1) * width, 0.0f);
  std::fill(activations.begin(), activations.begin() + width, 0.5f);
  uint64_t weight_count = 0;
  for (const ChainMatrix& m : matrices) weight_count += uint64_t(m.rows) * m.cols;
  const std::vector<float> weights = weights_of_half(weight_count, wdtype);
  std::vector<void*> slots{norm.data()};
  for (uint32_t a = 0; a <= nodes; ++a) slots.push_back(activations.data() + size_t(a) * width);
  uint64_t offset = 0;
  for (const ChainMatrix& m : matrices) {
    slots.push_back(const_cast<char*>(reinterpret_cast<const char*>(weights.data())) + offset);
    offset += uint64_t(m.rows) * m.cols * dtype_size(wdtype);
  }

  CpuExecutor executor(threads);
  ProgramInstance instance(chain, std::move(slots));
  const int32_t token = 0;
  for (int i = 0; i < 10; ++i) executor.run_step(instance, StepInputs{&token, 1, 0}, StepOptions{});  // untimed
  std::vector<double> bandwidth, dispatch, signal;
  std::vector<std::vector<double>> worker_gbs(threads);  // [worker][step]
  // Fifteen fitted steps. A step can leave nothing to fit: on a machine busy with other work the stalls
  // measured above take most of each period, and a step shorter than the stall the model places over its
  // start is stalled throughout as modelled (docs/SIMULATOR.md, "Stalls"). Such a step is one more sample
  // the medians do without, up to a bound; past it the machine is too busy to measure, which is said.
  constexpr int kFittedSteps = 15, kMostSteps = 3 * kFittedSteps;
  int fitted = 0, traced_steps = 0;
  std::string refusal;
  for (; traced_steps < kMostSteps && fitted < kFittedSteps; ++traced_steps) {
    std::vector<TaskTiming> timings;
    StepOptions traced;
    traced.trace = &timings;
    executor.run_step(instance, StepInputs{&token, 1, 0}, traced);
    std::vector<SimulatedTask> observed;
    for (const TaskTiming& t : timings) observed.push_back({t.task, t.worker, double(t.start_ns), double(t.end_ns)});
    DeviceFit fit;
    try {
      fit = fit_device(chain, observed, 0, d);  // d's workers and flops; the rest is fitted
    } catch (const InputError& error) {
      refusal = error.what();
      continue;
    }
    ++fitted;
    bandwidth.push_back(fit.device.memory_gbs);
    dispatch.push_back(fit.device.dispatch_ns);
    signal.push_back(fit.device.signal_ns);
    for (uint32_t w = 0; w < threads; ++w)
      if (fit.worker_gbs[w] > 0) worker_gbs[w].push_back(fit.worker_gbs[w]);
  }
  if (fitted < kFittedSteps)
    throw InputError("measuring the cpu device: " + std::to_string(traced_steps - fitted) + " of " + std::to_string(traced_steps) +
                     " traced steps of its calibration left nothing to fit (is the machine busy with other work?): " + refusal);
  d.memory_gbs = median(bandwidth);
  d.dispatch_ns = median(dispatch);
  d.signal_ns = median(signal);
  // The workers are not alike on every machine (a virtual machine's cores, a hybrid CPU's): each
  // worker's median rate, their sum the bandwidth, their ratios its speeds. (On the 2-core VM the model's
  // own traced steps had one core at 16 GB/s and the other at 22 in some spells, while the chain's came
  // out alike in the same spell: docs/SIMULATOR.md.)
  if (threads > 1) {
    std::vector<double> rates(threads, 0.0);
    for (uint32_t w = 0; w < threads; ++w)
      if (!worker_gbs[w].empty()) rates[w] = median(worker_gbs[w]);
    set_worker_rates(d, rates);
  }
  return d;
}

// A device file (docs/SIMULATOR.md lists its keys). *gives_link: whether it has 'link_gbs' (0 included).
DeviceModel device_from_file(const std::string& path, bool* gives_link) {
  const nlohmann::json j = read_json_file(path, "--device " + path);
  if (!j.is_object()) throw InputError("--device " + path + ": must be a JSON object of the device's figures (workers, memory_gbs, ...)");
  DeviceModel d;
  // A misspelt optional key would silently leave its default in place, so every key must be one of these.
  static const char* const kKeys[] = {"name",        "workers",          "memory_gbs", "flops",          "shared_memory_bytes",
                                      "dispatch_ns", "signal_ns",        "link_gbs",   "link_latency_ns", "rotation_ns",
                                      "exp_ns",      "prefetch_bytes",   "prefetch_tasks", "prefetch_max_tokens",
                                      "worker_speed", "stall_ns",        "stall_every_ns", "input_rows_cached"};
  for (const auto& [key, value] : j.items()) {
    if (std::find_if(std::begin(kKeys), std::end(kKeys), [&](const char* known) { return key == known; }) != std::end(kKeys)) continue;
    std::string known;
    for (const char* k : kKeys) known += (known.empty() ? "" : ", ") + std::string(k);
    throw InputError("--device " + path + ": unknown key '" + key + "' (a device file has " + known + ")");
  }
  auto present = [&](const char* key) {
    if (!j.contains(key)) throw InputError("--device " + path + ": '" + key + "' is missing");
    return j[key];
  };
  // Finite and at most 1e18 (flop/s past any device's; GB/s, ns and bytes far past): a figure out
  // there, or a bandwidth or peak next to 0, would make a task's time infinite or zero.
  auto number = [&](const char* key) {
    const nlohmann::json value = present(key);
    if (!value.is_number() || !(value.get<double>() >= 0) || value.get<double>() > 1e18)
      throw InputError("--device " + path + ": '" + key + "' must be a number from 0 to 1e18");
    return value.get<double>();
  };
  // A count: a whole number from `least` to `most` (bounded first, so the conversion is defined).
  auto whole = [&](const char* key, double least, double most, const char* unit) {
    const nlohmann::json value = present(key);
    if (!value.is_number() || !(value.get<double>() >= least) || value.get<double>() > most ||
        value.get<double>() != std::floor(value.get<double>()))
      throw InputError("--device " + path + ": '" + key + "' must be a whole number of " + unit + " from " +
                       std::to_string(uint64_t(least)) + " to " + std::to_string(uint64_t(most)));
    return value.get<double>();
  };
  if (j.contains("name") && !j["name"].is_string()) throw InputError("--device " + path + ": 'name' must be a string");
  d.name = j.value("name", path);
  d.workers = uint32_t(whole("workers", 1, 4096, "workers"));
  d.memory_gbs = number("memory_gbs");
  if (d.memory_gbs < 1e-3) throw InputError("--device " + path + ": 'memory_gbs' must be at least 0.001");
  // One peak for every weight dtype, or one per dtype: {"bf16": ..., "f16": ..., "f32": ...}.
  if (j.contains("flops") && j["flops"].is_object()) {
    if (j["flops"].empty()) throw InputError("--device " + path + ": 'flops' per dtype gives no peak (f32, bf16 or f16)");
    for (const auto& [key, value] : j["flops"].items()) {
      const std::optional<DType> dtype = parse_dtype(key);
      if (!dtype) throw InputError("--device " + path + ": 'flops' per dtype: '" + key + "' is not a dtype (f32, bf16 or f16)");
      if (!value.is_number() || !(value.get<double>() >= 1e3) || value.get<double>() > 1e18)
        throw InputError("--device " + path + ": 'flops' of " + key + " must be a number from 1000 to 1e18");
      if (d.dtype_flops[size_t(*dtype)] > 0)  // "bf16" and "bfloat16" name one dtype
        throw InputError("--device " + path + ": 'flops' gives " + std::string(dtype_name(*dtype)) + " twice");
      d.dtype_flops[size_t(*dtype)] = value.get<double>();
    }
  } else {
    d.flops = number("flops");
    if (d.flops < 1e3) throw InputError("--device " + path + ": 'flops' must be at least 1000");
  }
  // Optional: none modelled.
  d.shared_memory_bytes = j.contains("shared_memory_bytes") ? whole("shared_memory_bytes", 0, 1e12, "bytes") : 0;
  d.dispatch_ns = number("dispatch_ns");
  d.signal_ns = number("signal_ns");
  *gives_link = j.contains("link_gbs");
  d.link_gbs = *gives_link ? number("link_gbs") : 0;  // optional: devices without a link
  d.link_latency_ns = j.contains("link_latency_ns") ? number("link_latency_ns") : 0;
  d.rotation_ns = j.contains("rotation_ns") ? number("rotation_ns") : 0;  // optional: 0 charges no epilogue
  d.exp_ns = j.contains("exp_ns") ? number("exp_ns") : 0;
  // Optional: without them a waiting worker fetches its next task's weights, unbounded.
  d.prefetch_bytes = j.contains("prefetch_bytes") ? number("prefetch_bytes") : 0;
  if (j.contains("prefetch_tasks")) d.prefetch_tasks = uint32_t(whole("prefetch_tasks", 0, 1e6, "tasks (0: no bound)"));
  if (j.contains("prefetch_max_tokens"))
    d.prefetch_max_tokens = uint32_t(whole("prefetch_max_tokens", 0, 1e6, "tokens (0: no bound)"));
  // Optional; absent or empty (as --json and --fit-out write it for a device without speeds): all alike.
  if (j.contains("worker_speed") && !(j["worker_speed"].is_array() && j["worker_speed"].empty())) {
    const nlohmann::json& speeds = j["worker_speed"];
    if (!speeds.is_array() || speeds.size() != d.workers)
      throw InputError("--device " + path + ": 'worker_speed' must be an array of one speed per worker (" + std::to_string(d.workers) + ")");
    double sum = 0;
    for (const nlohmann::json& speed : speeds) {
      if (!speed.is_number() || !(speed.get<double>() >= 1e-3) || speed.get<double>() > 1e3)
        throw InputError("--device " + path + ": each of 'worker_speed' must be a number from 0.001 to 1000");
      d.worker_speed.push_back(speed.get<double>());
      sum += speed.get<double>();
    }
    for (double& speed : d.worker_speed) speed *= double(d.workers) / sum;  // relative: mean 1
  }
  if (j.contains("input_rows_cached")) {  // optional: read from memory
    if (!j["input_rows_cached"].is_boolean()) throw InputError("--device " + path + ": 'input_rows_cached' must be true or false");
    d.input_rows_cached = j["input_rows_cached"].get<bool>();
  }
  d.stall_ns = j.contains("stall_ns") ? number("stall_ns") : 0;  // optional: no stalls
  d.stall_every_ns = j.contains("stall_every_ns") ? number("stall_every_ns") : 0;
  if ((d.stall_ns > 0 && d.stall_every_ns <= 0) || !StallSchedule{d.stall_ns, d.stall_every_ns, d.workers}.valid())
    throw InputError("--device " + path + ": 'stall_ns' must be at most 0.99 of 'stall_every_ns', which must be at least 1 ns "
                     "(a worker stalls for stall_ns once every stall_every_ns)");
  if (d.link_gbs > 0 && d.link_gbs < 1e-3)
    throw InputError("--device " + path + ": 'link_gbs' must be 0 (no link) or at least 0.001");
  return d;
}

// A device's peak as a device file gives it: one per dtype when it has them, else the one figure.
nlohmann::json flops_of(const DeviceModel& device) {
  nlohmann::json per_dtype = nlohmann::json::object();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    if (device.dtype_flops[size_t(dtype)] > 0) per_dtype[std::string(dtype_name(dtype))] = device.dtype_flops[size_t(dtype)];
  return per_dtype.empty() ? nlohmann::json(device.flops) : per_dtype;
}

// --fit-trace: the device fitted to a traced step of this program (scheduler/trace_fit.h), its prediction
// against the traced step, and with --fit-out the fitted device as a file `--device` reads. With --batch B
// the step is one of B sequences each at --context positions, as `bench --batch B --trace` takes one
// (its sequences' prompts are alike, so their contexts are too).
// gives_link: whether the device had a link of its own; a fitted file writes link_gbs only then, so a
// device without one does not come back as a deliberate "no link" that --tp would accept.
void fit_to_trace(const SimulateOptions& options, const Program& program, const DeviceModel& device, bool gives_link,
                  SimulateReport& report) {
  const std::vector<SimulatedTask> observed = read_chrome_trace(options.fit_trace_path, program);
  DeviceFit fit;
  try {
    fit = fit_device(program, observed, options.context, device, options.batch);
  } catch (const InputError& error) {  // what is wrong with the trace: say which file
    throw InputError("--fit-trace " + options.fit_trace_path + ": " + error.what());
  }
  report.fitted = true;
  report.traced_step_ms = fit.observed_step_ns * 1e-6;
  report.fitted_memory_gbs = fit.device.memory_gbs;
  report.fitted_dispatch_ns = fit.device.dispatch_ns;
  report.fitted_signal_ns = fit.device.signal_ns;
  report.fit_dispatch_samples = fit.dispatch_samples;
  report.fit_signal_samples = fit.signal_samples;
  report.fit_streaming_tasks = fit.streaming_tasks;
  SimulationOptions fitted_options;
  fitted_options.sequences = options.batch;
  report.fitted_step_ms = simulate_program(program, fit.device, options.context, fitted_options).step_ns * 1e-6;
  if (options.fit_out_path.empty()) return;
  nlohmann::json out = {{"name", fit.device.name},
                        {"workers", fit.device.workers},
                        {"memory_gbs", fit.device.memory_gbs},
                        {"dispatch_ns", fit.device.dispatch_ns},
                        {"signal_ns", fit.device.signal_ns},
                        {"link_gbs", fit.device.link_gbs},
                        {"link_latency_ns", fit.device.link_latency_ns},
                        {"rotation_ns", fit.device.rotation_ns},
                        {"exp_ns", fit.device.exp_ns},
                        {"prefetch_bytes", fit.device.prefetch_bytes},
                        {"prefetch_tasks", fit.device.prefetch_tasks},
                        {"prefetch_max_tokens", fit.device.prefetch_max_tokens},
                        {"input_rows_cached", fit.device.input_rows_cached},
                        {"shared_memory_bytes", fit.device.shared_memory_bytes},
                        {"flops", flops_of(fit.device)},
                        {"stall_ns", fit.device.stall_ns},
                        {"stall_every_ns", fit.device.stall_every_ns},
                        {"worker_speed", fit.device.worker_speed}};
  if (!gives_link) {
    out.erase("link_gbs");
    out.erase("link_latency_ns");
  }
  std::ofstream file(options.fit_out_path);
  if (!file) throw InputError("--fit-out: cannot write '" + options.fit_out_path + "'");
  file << out.dump(2) << "\n";
  file.close();  // a full disk shows only once the buffer is written
  if (!file) throw InputError("--fit-out: failed writing '" + options.fit_out_path + "'");
  report.fit_written = true;
}

}  // namespace

SimulateReport simulate_model(const SimulateOptions& options) {
  SimulateReport report;
  const std::optional<DType> dtype = options.dtype.empty() ? std::nullopt : parse_dtype(options.dtype);
  if (!options.dtype.empty() && !dtype) throw InputError("--dtype must be f32, bf16 or f16, got '" + options.dtype + "'");
  if (options.batch == 0 || options.batch > 256) throw InputError("--batch expects 1 to 256 sequences");
  if (!options.policy.empty() && !find_policy(options.policy))
    throw InputError("--policy: unknown placement policy '" + options.policy + "' (expected one of " + policy_names() + ")");
  const ModelSpec spec = spec_for_tool(options.model_dir, options.preset, dtype, &report.model);
  // The cpu device is measured once the program is compiled (its bandwidth depends on the program's
  // working set); until then only its workers are known.
  const bool cpu_device = options.device == "cpu";
  DeviceModel device;
  bool gives_link = true;  // the cpu device (ranks share memory) and the presets (NVLink) do
  if (cpu_device) {
    device.workers = options.threads ? options.threads : usable_cores();
    // One worker per core, as the executor pins them: with more, the measurement would time-share cores
    // and count it as stalls, and the figures would describe no machine.
    if (device.workers > usable_cores())
      throw InputError("--threads " + std::to_string(device.workers) + " is more than the " + std::to_string(usable_cores()) +
                       " cores this process may use: the cpu device is measured with one worker per core (for more workers, "
                       "give --device a file: --fit-out writes one)");
  } else if (const std::optional<DeviceModel> preset = device_preset(options.device)) {
    device = *preset;
  } else if (options.device.size() > 5 && options.device.ends_with(".json")) {
    device = device_from_file(options.device, &gives_link);
  } else {
    throw InputError("--device: unknown device '" + options.device + "' (expected h100, h200, b200, cpu or a .json file)");
  }
  if (options.threads && !cpu_device)
    throw InputError("--threads applies to --device cpu (it sets the cpu device's workers; a device file gives its own)");
  // A device file without a link would make --tp's collectives cost nothing over one; 0 says so on purpose.
  if (options.tp > 1 && !gives_link)
    throw InputError("--device " + options.device + " has no 'link_gbs': --tp " + std::to_string(options.tp) +
                     " needs the link its collectives cross (link_gbs and link_latency_ns; link_gbs 0 for ranks without one, "
                     "whose collectives then cost their memory traffic only)");
  if (!cpu_device && !select_weight_dtype(device, spec.dtype))  // the cpu device measures its own, below
    throw InputError("--device " + options.device + ": 'flops' gives no peak for " + std::string(dtype_name(spec.dtype)) +
                     " weights (the model's; --dtype sets them)");

  CompileOptions compile;
  compile.workers = device.workers;
  // --batch B: one decode token of each of B sequences, each with `context` positions of its own. The
  // matrix tiles read their weights once for all B tokens; attention reads B caches (task_work).
  compile.tokens = options.batch;
  compile.batched_decode = options.batch > 1;
  compile.max_context = std::max(std::min(spec.max_context, 4096u), options.context);
  if (compile.max_context > spec.max_context)
    throw InputError("--context " + std::to_string(options.context) + " exceeds the model's " + std::to_string(spec.max_context));
  compile.policy = options.policy.empty() ? std::string(kDefaultPolicy) : options.policy;
  compile.granularity = event_granularity(parse_granularity(options.granularity));
  // As the engine: the cpu backend splits only when asked.
  compile.kv_splits = options.kv_splits != 0 ? options.kv_splits : cpu_device ? 1 : 0;
  compile.tp = options.tp;
  compile.rank = options.rank;
  if (options.rank >= options.tp)  // without --tp there is one rank, rank 0
    throw InputError("--rank " + std::to_string(options.rank) + " is not below --tp " + std::to_string(options.tp));
  const Program program = compile_model(spec, compile);
  std::vector<TaskWork> work;  // per task
  double bytes = 0, flops = 0, weight_bytes = 0;
  uint32_t weight_tasks = 0;
  for (const TaskDesc& t : program.tasks) {
    work.push_back(task_work(program, t, options.context, options.batch));
    bytes += work.back().bytes();
    flops += work.back().flops;
    weight_bytes += work.back().weight_bytes;
    weight_tasks += work.back().weight_bytes > 0;
  }
  if (cpu_device)
    device = measure_cpu_device(device.workers, uint64_t(bytes), spec, spec.dtype,
                                uint64_t(weight_bytes / std::max(1u, weight_tasks)), program.placement == Placement::dynamic_queue,
                                program.tokens);

  // A device with shared memory (a GPU) fetches ahead into the kernel's weight stages: as many as fit
  // beside this program's tile workspace, as the cuda executor sizes them (megakernel/kernel_layout.h).
  if (device.shared_memory_bytes > 0) {
    const uint32_t workspace_floats = tile_workspace_floats(program);
    if (uint64_t(workspace_floats) * 4 > device.shared_memory_bytes)  // as the cuda executor refuses to load it
      throw InputError("on the device '" + device.name + "', a tile of this program needs " + std::to_string(uint64_t(workspace_floats) * 4) +
                       " bytes of shared memory, more than its " + std::to_string(uint64_t(device.shared_memory_bytes)) +
                       " (fewer tokens per step, or smaller tiles)");
    report.weight_stage_bytes = kDeviceStageBytes;
    report.weight_stages = weight_stage_count(uint64_t(device.shared_memory_bytes), workspace_floats, kDeviceStageBytes);
    device.prefetch_bytes = double(report.weight_stages) * kDeviceStageBytes;
    device.fetch_ahead = report.weight_stages > 0;
  }

  SimulationOptions dataflow_options;
  dataflow_options.sequences = options.batch;
  const SimulationResult dataflow = simulate_program(program, device, options.context, dataflow_options);
  SimulationOptions bsp_options = dataflow_options;
  bsp_options.bsp = true;
  const SimulationResult bsp = simulate_program(program, device, options.context, bsp_options);
  // The collectives' time were none of it hidden: each collective node's tiles run side by side, the node
  // taking as long as its busiest worker's link time (latency included per tile): with static queues, the
  // worker the policy gave most of it; for the dynamic queue, rounds of the workers, slowest tiles first.
  // (Spreading every tile's link time over the workers instead divided the latency, which a collective of
  // fewer tiles than workers pays in full: tiny's exposed time came out nine times its "whole".)
  std::vector<uint32_t> worker_of(program.tasks.size(), 0);
  for (uint32_t w = 0; w < program.queues.size(); ++w)
    for (uint32_t t : program.queues[w]) worker_of[t] = w;
  const bool placed = program.placement == Placement::static_queues;
  double unhidden_ns = 0;
  for (const NodeDesc& node : program.nodes) {
    std::vector<double> link(placed ? device.workers : 0, 0.0);  // per worker, or per tile
    for (uint32_t t = node.first_task; t < node.first_task + node.task_count; ++t)
      if (const double ns = modelled_link_ns(device, work[t]); ns > 0) {
        if (placed)
          link[worker_of[t]] += ns;
        else
          link.push_back(ns);
      }
    if (placed) {
      unhidden_ns += *std::max_element(link.begin(), link.end());
    } else {
      std::sort(link.begin(), link.end(), std::greater<>());
      for (size_t first = 0; first < link.size(); first += device.workers) unhidden_ns += link[first];
    }
  }
  if (unhidden_ns > 0) {
    DeviceModel free_link = device;
    free_link.link_gbs = 0;  // collectives cost what any task costs, nothing over the link
    const double without = simulate_program(program, free_link, options.context, dataflow_options).step_ns;
    report.collective_ms = unhidden_ns * 1e-6;
    report.exposed_collective_ms = std::max(0.0, dataflow.step_ns - without) * 1e-6;
    report.hidden_collective_share = std::clamp(1.0 - report.exposed_collective_ms / report.collective_ms, 0.0, 1.0);
  }
  report.device = device.name;
  report.device_measured = cpu_device;
  report.workers = device.workers;
  report.tasks = uint32_t(program.tasks.size());
  report.memory_gbs = device.memory_gbs;
  report.flops = device.flops;
  report.dispatch_ns = device.dispatch_ns;
  report.signal_ns = device.signal_ns;
  report.link_gbs = device.link_gbs;
  report.link_latency_ns = device.link_latency_ns;
  report.rotation_ns = device.rotation_ns;
  report.exp_ns = device.exp_ns;
  report.prefetch_bytes = device.prefetch_bytes;
  report.prefetch_tasks = device.prefetch_tasks;
  report.prefetch_max_tokens = device.prefetch_max_tokens;
  report.input_rows_cached = device.input_rows_cached;
  report.stall_ns = device.stall_ns;
  report.stall_every_ns = device.stall_every_ns;
  report.shared_memory_bytes = device.shared_memory_bytes;
  report.tokens_per_step = program.tokens;
  report.worker_speed = device.worker_speed;
  report.step_ms = dataflow.step_ns * 1e-6;
  double streamed = 0;  // what the device moves through memory (its cached input rows left out)
  for (const TaskWork& w : work) streamed += streamed_bytes(device, w);
  report.bound_ms = std::max(streamed / device.memory_gbs, flops / (device.flops * 1e-9)) * 1e-6;
  report.bound_share = report.step_ms > 0 ? report.bound_ms / report.step_ms : 0;
  report.bsp_ms = bsp.step_ns * 1e-6;
  report.bsp_ratio = report.step_ms > 0 ? report.bsp_ms / report.step_ms : 0;
  report.idle_share = dataflow.idle_share;
  for (double busy : dataflow.busy_ns) report.idle_ms.push_back(std::max(0.0, dataflow.step_ns - busy) * 1e-6);
  if (!options.fit_trace_path.empty()) fit_to_trace(options, program, device, gives_link, report);
  if (!options.trace_path.empty()) {
    std::vector<TaskTiming> timings;
    for (const SimulatedTask& t : dataflow.timeline)
      timings.push_back({t.task, t.worker, int64_t(t.start_ns), int64_t(t.end_ns)});
    std::ofstream probe(options.trace_path);
    if (!probe) throw InputError("--trace: cannot write '" + options.trace_path + "'");
    probe.close();
    write_chrome_trace(options.trace_path, program, timings);
    report.trace_written = true;
  }
  return report;
}

std::string busy_machine_warning(const SimulateReport& report) {
  if (!report.device_measured || report.stall_every_ns <= 0) return "";
  const double share = report.stall_ns / report.stall_every_ns;
  if (share <= kBusyMachineStallShare) return "";
  char text[640];
  std::snprintf(text, sizeof text,
                "warning: while the cpu device was measured, other work took %.0f%% of each core from its workers (stalls of %.0f "
                "us every %.2f ms; an idle machine loses under 10%%). The simulator models that work as periodic stalls, and "
                "its prediction can then be several times off the real step (docs/SIMULATOR.md, \"A busy machine\"): measure "
                "on an idle machine.",
                100 * share, report.stall_ns * 1e-3, report.stall_every_ns * 1e-6);
  return text;
}

}  // namespace tilefire
