// The collective tiles on the device (ops/cuda/collectives.cuh), with tensor-parallel ranks sharing one
// GPU: each rank its own executor on its share of the SMs, over windows and flags in device memory
// (transport/device_windows.h). The all-reduce of every rank is bitwise the rank-order sum the host
// computes, step after step (growing epochs); a rank whose peer never runs stops within the group's
// timeout with an error that names the peer and the flag, never a hang. Skipped without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <thread>

#include "megakernel/cuda/cuda_executor.h"
#include "ops/all_ops.h"
#include "tests/common/cuda_device.h"
#include "transport/device_windows.h"

namespace tilefire::testing {
namespace {

constexpr uint32_t kTokens = 3, kCols = 1000, kTileWidth = 96;  // an uneven last tile

// One all-reduce node: out = residual + the ranks' partial sums, a tile per kTileWidth columns, tiles
// dealt round-robin over the workers. Slots: 0 partial (window), 1 residual, 2 out.
Program allreduce_program(uint32_t workers, uint32_t ranks) {
  Program p;
  p.tokens = kTokens;
  p.workers = workers;
  p.slots.push_back({SlotKind::window, DType::f32, kTokens, kCols, 0, "partial"});
  p.slots.push_back({SlotKind::activation, DType::f32, kTokens, kCols, 0, "residual"});
  p.slots.push_back({SlotKind::activation, DType::f32, kTokens, kCols, 0, "out"});
  AllreduceResidualParams params;
  params.partial = 0;
  params.residual = 1;
  params.out = 2;
  params.cols = kCols;
  params.tile_width = kTileWidth;
  params.ranks = ranks;
  const uint32_t tiles = (kCols + kTileWidth - 1) / kTileWidth;
  p.nodes.push_back({OpParams::make(OpCode::allreduce_residual, 0, params), 0, tiles, kNoSlot});
  p.queues.resize(workers);
  for (uint32_t t = 0; t < tiles; ++t) {
    TaskDesc task;
    task.op = OpCode::allreduce_residual;
    task.tile_begin = t * kTileWidth;
    task.tile_end = std::min(kCols, (t + 1) * kTileWidth);
    task.tile_index = t;
    p.tasks.push_back(task);
    p.queues[t % workers].push_back(t);
  }
  p.collective_flags = tiles;
  return p;
}

float partial_value(uint32_t rank, uint64_t epoch, uint64_t i) {
  return float(int64_t((rank * 7919 + epoch * 104729 + i * 31) % 2001) - 1000) / 64.0f;  // exact in f32
}

struct Rank {
  std::unique_ptr<CudaExecutor> cuda;
  Program program;
  DeviceBuffer residual, out;
  CudaProgramPtr loaded;
  std::vector<float> residual_host;
};

std::vector<Rank> make_ranks(const DeviceWindowGroup& group, uint32_t ranks_run) {
  std::vector<Rank> ranks(ranks_run);
  for (uint32_t r = 0; r < ranks_run; ++r) {
    Rank& rank = ranks[r];
    CudaOptions options;
    options.sm_share = group.ranks();
    options.watchdog_ms = 5000;
    rank.cuda = std::make_unique<CudaExecutor>(options);
    rank.cuda->set_rank_view(group.view(r));
    rank.program = allreduce_program(rank.cuda->workers(), group.ranks());
    rank.residual_host.resize(kTokens * kCols);
    for (uint64_t i = 0; i < rank.residual_host.size(); ++i) rank.residual_host[i] = float(i % 97) * 0.25f;
    rank.residual = rank.cuda->upload(rank.residual_host.data(), rank.residual_host.size() * sizeof(float));
    rank.out = DeviceBuffer(kTokens * kCols * sizeof(float));
    rank.loaded = rank.cuda->load(rank.program, {group.view(r).windows[r], rank.residual.get(), rank.out.get()});
  }
  return ranks;
}

TEST(CudaCollectives, VirtualRanksAllReduceToTheRankOrderSumBitwise) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t ranks_count : {2u, 4u}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks_count));
    DeviceWindowGroup group(std::vector<int>(ranks_count, 0), kTokens * kCols * sizeof(float), 64, 5000);
    std::vector<Rank> ranks = make_ranks(group, ranks_count);
    const std::vector<int32_t> tokens(kTokens, 0);
    for (uint64_t epoch = 1; epoch <= 6; ++epoch) {
      // Every rank's partial sums of this epoch; no kernel runs between steps, so rewriting is safe.
      std::vector<std::vector<float>> partials(ranks_count, std::vector<float>(kTokens * kCols));
      for (uint32_t r = 0; r < ranks_count; ++r) {
        for (uint64_t i = 0; i < partials[r].size(); ++i) partials[r][i] = partial_value(r, epoch, i);
        ranks[r].cuda->upload_to(group.view(r).windows[r], partials[r].data(), partials[r].size() * sizeof(float));
      }
      std::vector<std::exception_ptr> failures(ranks_count);
      std::vector<std::thread> threads;
      for (uint32_t r = 0; r < ranks_count; ++r)
        threads.emplace_back([&, r] {
          try {
            StepInputs inputs{tokens.data(), kTokens, 0, epoch};
            ranks[r].cuda->run_step(*ranks[r].loaded, inputs, epoch % 3 == 0 ? ScheduleMode::bsp : ScheduleMode::dataflow);
          } catch (...) {
            failures[r] = std::current_exception();
          }
        });
      for (std::thread& t : threads) t.join();
      for (const std::exception_ptr& f : failures)
        if (f) std::rethrow_exception(f);
      for (uint32_t r = 0; r < ranks_count; ++r) {
        std::vector<float> out(kTokens * kCols);
        ranks[r].cuda->download(out.data(), ranks[r].out.get(), out.size() * sizeof(float));
        for (uint64_t i = 0; i < out.size(); ++i) {
          float sum = partials[0][i];
          for (uint32_t q = 1; q < ranks_count; ++q) sum += partials[q][i];
          ASSERT_EQ(out[i], ranks[r].residual_host[i] + sum) << "rank " << r << ", epoch " << epoch << ", element " << i;
        }
      }
    }
  }
}

TEST(CudaCollectives, APeerThatNeverRunsIsNamedWithinTheTimeout) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  DeviceWindowGroup group(std::vector<int>(2, 0), kTokens * kCols * sizeof(float), 64, 300);
  std::vector<Rank> ranks = make_ranks(group, 1);  // rank 1 never runs
  const std::vector<int32_t> tokens(kTokens, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    ranks[0].cuda->run_step(*ranks[0].loaded, StepInputs{tokens.data(), kTokens, 0, 1}, ScheduleMode::dataflow);
    FAIL() << "an all-reduce whose peer never ran returned";
  } catch (const DeviceError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("watchdog"), std::string::npos) << message;
    EXPECT_NE(message.find("allreduce_residual"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1's flag"), std::string::npos) << message;
    EXPECT_NE(message.find("needed 1"), std::string::npos) << message;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
}  // namespace tilefire::testing
