// The collective tiles on the device (ops/cuda/collectives.cuh), with tensor-parallel ranks sharing one
// GPU: each rank its own executor on its share of the SMs, over windows and flags in device memory
// (transport/device_windows.h).
//  - all-reduce: every rank's result is bitwise the rank-order sum the host computes (values whose sums
//    round differently in another order), step after step (growing epochs), dataflow and bsp;
//  - logits all-gather: every rank gets every owner's share of an uneven split, and the greedy token
//    and the non-finite flag of the whole vocabulary;
//  - a rank whose peer never runs stops within the group's timeout with an error that names the peer
//    and the flag, never a hang.
// The path "written by another CTA of the rank, then published" is covered end to end by the TP case
// of tests/e2e/cuda_engine_test.cpp. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <thread>

#include "megakernel/cuda/cuda_executor.h"
#include "ops/all_ops.h"
#include "ops/splitmix64.h"
#include "tests/common/cuda_device.h"
#include "transport/device_windows.h"

namespace tilefire::testing {
namespace {

constexpr uint32_t kTokens = 3, kCols = 1000, kTileWidth = 96;  // an uneven last tile
constexpr uint32_t kVocab = 1001;                                // an uneven split of the logits

// Floats with full mantissas, so a sum in another order rounds differently.
float value_of(uint64_t seed) {
  const uint64_t bits = splitmix64_next(seed);
  return float(int64_t(bits % 2000001) - 1000000) / 7919.0f;
}

// One node of `tiles` tiles, tile t covering units [begin(t), end(t)), dealt round-robin over the workers.
Program one_node_program(uint32_t workers, uint32_t tokens, OpParams params, uint32_t tiles,
                         const std::function<std::pair<uint32_t, uint32_t>(uint32_t)>& tile_units) {
  Program p;
  p.tokens = tokens;
  p.workers = workers;
  p.nodes.push_back({params, 0, tiles, kNoSlot});
  p.queues.resize(workers);
  for (uint32_t t = 0; t < tiles; ++t) {
    TaskDesc task;
    task.op = params.op;
    std::tie(task.tile_begin, task.tile_end) = tile_units(t);
    task.tile_index = t;
    p.tasks.push_back(task);
    p.queues[t % workers].push_back(t);
  }
  return p;
}

struct Rank {
  std::unique_ptr<CudaExecutor> cuda;
  Program program;
  std::vector<DeviceBuffer> buffers;  // the rank's activations
  CudaProgramPtr loaded;
  CudaStepResult result;
};

std::vector<Rank> make_executors(const DeviceWindowGroup& group, uint32_t count) {
  std::vector<Rank> ranks(count);
  for (uint32_t r = 0; r < count; ++r) {
    CudaOptions options;
    options.sm_share = group.ranks();
    options.watchdog_ms = 5000;
    ranks[r].cuda = std::make_unique<CudaExecutor>(options);
    ranks[r].cuda->set_rank_view(group.view(r));
  }
  return ranks;
}

// One step of every rank at once, each on its own thread (as the engine's rank threads).
void run_all(std::vector<Rank>& ranks, uint32_t tokens, uint64_t epoch, ScheduleMode mode) {
  const std::vector<int32_t> token_ids(tokens, 0);
  std::vector<std::exception_ptr> failures(ranks.size());
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        ranks[r].result = ranks[r].cuda->run_step(*ranks[r].loaded, StepInputs{token_ids.data(), tokens, 0, epoch}, mode);
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& f : failures)
    if (f) std::rethrow_exception(f);
}

// out = residual + the ranks' partial sums, or the sums alone without a residual (the input of Gemma's
// post-norm); slots: 0 partial (window), 1 residual, 2 out.
void load_allreduce(Rank& rank, const RankView& view, const std::vector<float>& residual, bool with_residual) {
  AllreduceResidualParams p;
  p.partial = 0;
  p.residual = with_residual ? 1 : kNoSlot;
  p.out = 2;
  p.cols = kCols;
  p.tile_width = kTileWidth;
  p.ranks = view.ranks;
  const uint32_t tiles = (kCols + kTileWidth - 1) / kTileWidth;
  rank.program = one_node_program(rank.cuda->workers(), kTokens, OpParams::make(OpCode::allreduce_residual, 0, p), tiles,
                                  [](uint32_t t) { return std::pair(t * kTileWidth, std::min(kCols, (t + 1) * kTileWidth)); });
  rank.program.slots.push_back({SlotKind::window, DType::f32, kTokens, kCols, 0, "partial"});
  rank.program.slots.push_back({SlotKind::activation, DType::f32, kTokens, kCols, 0, "residual"});
  rank.program.slots.push_back({SlotKind::activation, DType::f32, kTokens, kCols, 0, "out"});
  rank.program.collective_flags = tiles;
  rank.buffers.push_back(rank.cuda->upload(residual.data(), residual.size() * sizeof(float)));
  rank.buffers.push_back(DeviceBuffer(residual.size() * sizeof(float)));
  rank.loaded = rank.cuda->load(rank.program, {view.windows[view.rank], rank.buffers[0].get(), rank.buffers[1].get()});
}

// Three ranks reduce without a residual.
TEST(CudaCollectives, VirtualRanksAllReduceToTheRankOrderSumBitwise) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t ranks_count : {2u, 3u, 4u}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks_count));
    const bool with_residual = ranks_count != 3;
    DeviceWindowGroup group(std::vector<int>(ranks_count, 0), kTokens * kCols * sizeof(float), 64, 5000);
    std::vector<Rank> ranks = make_executors(group, ranks_count);
    std::vector<std::vector<float>> residuals(ranks_count, std::vector<float>(kTokens * kCols));
    for (uint32_t r = 0; r < ranks_count; ++r) {
      for (uint64_t i = 0; i < residuals[r].size(); ++i) residuals[r][i] = value_of(1000003 * r + i);
      load_allreduce(ranks[r], group.view(r), residuals[r], with_residual);
    }
    for (uint64_t epoch = 1; epoch <= 6; ++epoch) {
      // Every rank's partial sums of this epoch; no kernel runs between steps, so rewriting is safe.
      std::vector<std::vector<float>> partials(ranks_count, std::vector<float>(kTokens * kCols));
      for (uint32_t r = 0; r < ranks_count; ++r) {
        for (uint64_t i = 0; i < partials[r].size(); ++i) partials[r][i] = value_of((epoch << 40) + (uint64_t(r) << 32) + i);
        ranks[r].cuda->upload_to(group.view(r).windows[r], partials[r].data(), partials[r].size() * sizeof(float));
      }
      run_all(ranks, kTokens, epoch, epoch % 3 == 0 ? ScheduleMode::bsp : ScheduleMode::dataflow);
      for (uint32_t r = 0; r < ranks_count; ++r) {
        std::vector<float> out(kTokens * kCols);
        ranks[r].cuda->download(out.data(), ranks[r].buffers[1].get(), out.size() * sizeof(float));
        for (uint64_t i = 0; i < out.size(); ++i) {
          float sum = partials[0][i];
          for (uint32_t q = 1; q < ranks_count; ++q) sum += partials[q][i];
          ASSERT_EQ(out[i], with_residual ? residuals[r][i] + sum : sum) << "rank " << r << ", epoch " << epoch << ", element " << i;
        }
      }
    }
  }
}

// The logits all-gather of `rows` rows over `ranks` ranks as rank view.rank's one-node program; slots: 0
// the rank's share (window, [rows, largest share]), 1 the logits ([rows, kVocab]).
void load_allgather(Rank& rank, const RankView& view, uint32_t ranks, uint32_t rows) {
  AllgatherLogitsParams p;
  p.local = 0;
  p.out = 1;
  p.vocab = kVocab;
  p.ranks = ranks;
  p.rank = view.rank;
  p.rows = rows;
  rank.program = one_node_program(rank.cuda->workers(), rows, OpParams::make(OpCode::allgather_logits, 0, p), ranks,
                                  [](uint32_t t) { return std::pair(t, t + 1); });
  rank.program.slots.push_back({SlotKind::window, DType::f32, rows, (kVocab + ranks - 1) / ranks, 0, "logits.local"});
  rank.program.slots.push_back({SlotKind::activation, DType::f32, rows, kVocab, 0, "logits"});
  rank.program.collective_flags = ranks;
  rank.buffers.push_back(DeviceBuffer(uint64_t(rows) * kVocab * sizeof(float)));
  rank.loaded = rank.cuda->load(rank.program, {view.windows[view.rank], rank.buffers[0].get()});
}

TEST(CudaCollectives, LogitsAllGatherOfAnUnevenSplitWithTheGreedyTokenOfTheWholeVocabulary) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  constexpr uint32_t kRanks = 3;  // shares of 334, 334 and 333 logits
  const uint32_t largest_share = (kVocab + kRanks - 1) / kRanks;
  DeviceWindowGroup group(std::vector<int>(kRanks, 0), largest_share * sizeof(float), 8, 5000);
  std::vector<Rank> ranks = make_executors(group, kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) load_allgather(ranks[r], group.view(r), kRanks, 1);
  for (uint64_t epoch = 1; epoch <= 4; ++epoch) {
    std::vector<float> logits(kVocab);
    for (uint32_t v = 0; v < kVocab; ++v) logits[v] = value_of((epoch << 32) + v);
    if (epoch == 2) logits[700] = 1e9f;                 // the winner in the last share
    if (epoch == 3) logits[10] = logits[900] = 1e9f;    // a tie: the lower index wins, as std::max_element
    if (epoch == 4) logits[500] = std::nanf("");       // reported, never chosen
    for (uint32_t r = 0; r < kRanks; ++r) {
      uint32_t begin, end;
      rank_share(0, kVocab, kRanks, r, &begin, &end);
      ranks[r].cuda->upload_to(group.view(r).windows[r], logits.data() + begin, (end - begin) * sizeof(float));
    }
    run_all(ranks, 1, epoch, ScheduleMode::dataflow);
    const int32_t expected = int32_t(std::max_element(logits.begin(), logits.end(), [](float a, float b) {
                                       return std::isnan(a) || (!std::isnan(b) && a < b);
                                     }) - logits.begin());
    for (uint32_t r = 0; r < kRanks; ++r) {
      std::vector<float> out(kVocab);
      ranks[r].cuda->download(out.data(), ranks[r].buffers[0].get(), out.size() * sizeof(float));
      for (uint32_t v = 0; v < kVocab; ++v) {
        if (std::isnan(logits[v])) {
          EXPECT_TRUE(std::isnan(out[v])) << "rank " << r << ", logit " << v;
        } else {
          ASSERT_EQ(out[v], logits[v]) << "rank " << r << ", epoch " << epoch << ", logit " << v;
        }
      }
      EXPECT_EQ(ranks[r].result.argmax, expected) << "rank " << r << ", epoch " << epoch;
      EXPECT_EQ(ranks[r].result.nonfinite, epoch == 4) << "rank " << r << ", epoch " << epoch;
    }
  }
}

// A batched decode step's all-gather: every sequence's row, each owner's rows packed at its own share's
// length (as its LM head writes them), into [rows, vocab]; no greedy token is reduced.
TEST(CudaCollectives, LogitsAllGatherOfEverySequencesRow) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  constexpr uint32_t kRanks = 3, kRows = 3;  // shares of 334, 334 and 333 logits
  const uint32_t largest_share = (kVocab + kRanks - 1) / kRanks;
  DeviceWindowGroup group(std::vector<int>(kRanks, 0), kRows * largest_share * sizeof(float), 8, 5000);
  std::vector<Rank> ranks = make_executors(group, kRanks);
  for (uint32_t r = 0; r < kRanks; ++r) load_allgather(ranks[r], group.view(r), kRanks, kRows);
  for (uint64_t epoch = 1; epoch <= 2; ++epoch) {
    std::vector<float> logits(kRows * kVocab);  // [rows, vocab]
    for (uint64_t i = 0; i < logits.size(); ++i) logits[i] = value_of((epoch << 32) + i);
    for (uint32_t r = 0; r < kRanks; ++r) {
      uint32_t begin, end;
      rank_share(0, kVocab, kRanks, r, &begin, &end);
      std::vector<float> local;  // [rows, this rank's share]
      for (uint32_t row = 0; row < kRows; ++row)
        local.insert(local.end(), logits.begin() + row * kVocab + begin, logits.begin() + row * kVocab + end);
      ranks[r].cuda->upload_to(group.view(r).windows[r], local.data(), local.size() * sizeof(float));
    }
    run_all(ranks, kRows, epoch, epoch == 2 ? ScheduleMode::bsp : ScheduleMode::dataflow);
    for (uint32_t r = 0; r < kRanks; ++r) {
      std::vector<float> out(kRows * kVocab);
      ranks[r].cuda->download(out.data(), ranks[r].buffers[0].get(), out.size() * sizeof(float));
      for (uint64_t i = 0; i < out.size(); ++i)
        ASSERT_EQ(out[i], logits[i]) << "rank " << r << ", epoch " << epoch << ", row " << i / kVocab << ", logit " << i % kVocab;
    }
  }
}

TEST(CudaCollectives, APeerThatNeverRunsIsNamedWithinTheTimeout) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  DeviceWindowGroup group(std::vector<int>(2, 0), kTokens * kCols * sizeof(float), 64, 300);
  std::vector<Rank> ranks = make_executors(group, 1);  // rank 1 never runs
  load_allreduce(ranks[0], group.view(0), std::vector<float>(kTokens * kCols, 1.0f), true);
  const auto start = std::chrono::steady_clock::now();
  try {
    run_all(ranks, kTokens, 1, ScheduleMode::dataflow);
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
