// Public helpers around the engine: random models, the bandwidth probe, the compile-time probe.
#include <algorithm>
#include <chrono>
#include <thread>

#include <immintrin.h>

#include "graph/compile.h"
#include "graph/weights.h"
#include "megakernel/cuda/cuda_executor.h"
#include "scheduler/policy.h"
#include "tilefire/engine.h"

namespace tilefire {

double measure_device_copy_bandwidth_gbs(int device, uint64_t bytes) {
  return CudaExecutor::measure_copy_bandwidth_gbs(device, bytes);
}

void write_random_model(const std::string& preset, const std::string& folder, const std::string& dtype,
                        uint64_t seed, uint64_t max_shard_bytes) {
  if (folder.empty()) throw InputError("write_random_model: the folder (--out) is an empty path");
  std::optional<DType> parsed = parse_dtype(dtype);
  if (!parsed) throw InputError("--dtype must be f32, bf16 or f16, got '" + dtype + "'");
  ModelSpec spec = preset_spec(preset, *parsed);
  RandomWeightOptions options;
  options.dtype = *parsed;
  options.seed = seed;
  options.max_shard_bytes = max_shard_bytes;
  write_random_hf_folder(spec, options, folder);
}

namespace {

// Sums a range with wide loads and independent accumulators, so the loop is bound by memory, not adds.
float sum_floats(const float* data, size_t count) {
#if defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(data + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(data + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(data + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(data + i + 24));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float total = 0;
  for (float v : lanes) total += v;
  for (; i < count; ++i) total += data[i];
  return total;
#else
  float total = 0;
  for (size_t i = 0; i < count; ++i) total += data[i];
  return total;
#endif
}

}  // namespace

double measure_read_bandwidth_gbs(uint32_t threads, uint64_t bytes) {
  // As the engine bounds its workers; and a buffer of at least a MiB (a smaller one measures a cache, or
  // nothing) and at most 64 GiB.
  if (threads == 0 || threads > 256)
    throw InputError("measure_read_bandwidth_gbs: threads " + std::to_string(threads) + " is not from 1 to 256");
  if (bytes < (1ull << 20) || bytes > (64ull << 30))
    throw InputError("measure_read_bandwidth_gbs: bytes " + std::to_string(bytes) + " is not from 1 MiB to 64 GiB");
  const size_t count = size_t(bytes / sizeof(float)) / (32 * size_t(threads)) * (32 * size_t(threads));
  float* data = static_cast<float*>(std::aligned_alloc(64, count * sizeof(float)));
  if (!data) throw std::bad_alloc();
  const size_t share = count / threads;
  // Each thread touches (first-touch) and then reads its own share.
  auto fill = [&](uint32_t t) { std::fill_n(data + t * share, share, 1.0f); };
  {
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) pool.emplace_back(fill, t);
    for (auto& th : pool) th.join();
  }
  double best = 0;
  std::vector<float> sinks(threads);
  for (int pass = 0; pass < 5; ++pass) {
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (uint32_t t = 0; t < threads; ++t) pool.emplace_back([&, t] { sinks[t] = sum_floats(data + t * share, share); });
    for (auto& th : pool) th.join();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, double(count * sizeof(float)) / seconds / 1e9);
  }
  std::free(data);
  volatile float sink = 0;
  for (float s : sinks) sink = sink + s;
  return best;
}

std::vector<std::pair<std::string, std::string>> placement_policies() {
  std::vector<std::pair<std::string, std::string>> list;
  for (const PlacementPolicy* p : all_policies()) list.emplace_back(std::string(p->name()), std::string(p->description()));
  return list;
}

double measure_compile_ms(const std::string& preset, uint32_t threads) {
  if (threads > 256) throw InputError("measure_compile_ms: threads " + std::to_string(threads) + " is more than 256");
  ModelSpec spec = preset_spec(preset, DType::bf16);
  CompileOptions options;
  options.workers = std::max(1u, threads);
  options.tokens = 1;
  options.max_context = std::min(spec.max_context, 4096u);
  auto start = std::chrono::steady_clock::now();
  Program program = compile_model(spec, options);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tilefire
