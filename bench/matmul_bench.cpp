// GEMV throughput of matmul_rows on bf16 weights, single-threaded, in bytes of weights read per second
// (the quantity that bounds decode). A streaming read of the same bytes runs beside it so the report
// carries the ratio achieved / achievable on the machine it ran on.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/matmul.h"

namespace {

using tilefire::DType;

struct GemvProblem {
  std::vector<uint16_t> weights;  // [N, K] bf16
  std::vector<float> x;           // [K]
  std::vector<float> y;           // [N]
};

GemvProblem make_problem(uint32_t K, uint32_t N) {
  GemvProblem p{std::vector<uint16_t>(size_t(N) * K), std::vector<float>(K), std::vector<float>(N)};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& w : p.weights) w = tilefire::f32_to_bf16(dist(rng));
  for (auto& v : p.x) v = dist(rng);
  return p;
}

// args: K, N. K=1024 N=2816 is a small model's MLP (5.8 MB, cache-resident on big L3s);
// K=4096 N=14336 is Llama-3-8B's gate projection (117 MB, from DRAM).
void BM_GemvBf16(benchmark::State& state) {
  const uint32_t K = uint32_t(state.range(0)), N = uint32_t(state.range(1));
  GemvProblem p = make_problem(K, N);
  for (auto _ : state) {
    tilefire::matmul_rows(p.weights.data(), DType::bf16, K, 0, N, p.x.data(), K, 1, p.y.data(), N);
    benchmark::DoNotOptimize(p.y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(p.weights.size() * sizeof(uint16_t)));
}
BENCHMARK(BM_GemvBf16)->Args({1024, 2816})->Args({4096, 14336})->Unit(benchmark::kMicrosecond);

// The bandwidth ceiling: sum the same bytes as 64-bit words, 8 independent chains so the loads, not
// the adds, are the limit.
void BM_StreamRead(benchmark::State& state) {
  const uint32_t K = uint32_t(state.range(0)), N = uint32_t(state.range(1));
  GemvProblem p = make_problem(K, N);
  const size_t words = p.weights.size() / 4 & ~size_t(7);
  for (auto _ : state) {
    uint64_t sum[8] = {};
    const auto* data = reinterpret_cast<const uint64_t*>(p.weights.data());
    for (size_t i = 0; i < words; i += 8)
      for (size_t j = 0; j < 8; ++j) sum[j] += data[i + j];
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(p.weights.size() * sizeof(uint16_t)));
}
BENCHMARK(BM_StreamRead)->Args({1024, 2816})->Args({4096, 14336})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
