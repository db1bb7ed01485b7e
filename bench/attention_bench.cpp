// Decode attention of one query head over one KV head's cache on one thread (attention_head_partial, the
// cpu backend's tile): positions per second at a head size and context length, with the bytes of K and V
// read per second beside it. At long contexts this is the decode step's largest cost on the cpu.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/attention.h"

namespace {

// args: head_dim, positions.
void BM_AttentionHeadPartial(benchmark::State& state) {
  const uint32_t head_dim = uint32_t(state.range(0)), positions = uint32_t(state.range(1));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(head_dim), k(size_t(positions) * head_dim), v(size_t(positions) * head_dim);  // [positions, head_dim]
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  std::vector<float> record(tilefire::attention_record_floats(head_dim));
  const float scale = 1.0f / std::sqrt(float(head_dim));
  for (auto _ : state) {
    tilefire::attention_head_partial(q.data(), k.data(), v.data(), 0, positions, positions, head_dim, scale, 0.0f, record.data());
    benchmark::DoNotOptimize(record.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * positions);
  state.SetBytesProcessed(int64_t(state.iterations()) * positions * head_dim * 2 * int64_t(sizeof(float)));
}
BENCHMARK(BM_AttentionHeadPartial)
    ->Args({64, 512})->Args({64, 4096})->Args({64, 32768})
    ->Args({128, 512})->Args({128, 4096})->Args({128, 32768});

}  // namespace

BENCHMARK_MAIN();
