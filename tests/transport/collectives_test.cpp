// The collective protocol: 2, 3, 4 and 8 ranks as threads, many epochs, random skew between ranks; every
// rank must get bitwise the sum in rank order (computed here independently), the one-shot and two-phase
// all-reduce must agree bit for bit, and the all-gather and reduce-scatter must return the owners' data.
// Runs under ThreadSanitizer in CI (scripts/test-sanitizers). Faults: a rank that never arrives, or stops mid-run,
// ends the others' waits with a TransportError naming it, within the timeout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "ops/splitmix64.h"
#include "transport/collectives.h"
#include "transport/groups.h"

namespace tilefire::testing {
namespace {

constexpr uint32_t kCount = 257;  // floats per buffer: not a multiple of any rank count

// The value rank r contributes at element i in epoch e (exactly representable, so the sums are exact to
// check; the order still matters for rounding when magnitudes differ).
float contribution(uint32_t rank, uint64_t epoch, uint32_t i) {
  uint64_t state = (epoch * 1315423911ull) ^ (uint64_t(rank) << 40) ^ i;
  return float(int32_t(splitmix64_next(state) % 2001) - 1000) * 0.001953125f * float(1 + rank);  // k / 512
}

float rank_order_sum(uint32_t ranks, uint64_t epoch, uint32_t i) {
  float sum = contribution(0, epoch, i);
  for (uint32_t r = 1; r < ranks; ++r) sum += contribution(r, epoch, i);
  return sum;
}

// Window layout: two input buffers and two reduced buffers, alternating by epoch parity.
uint64_t input_offset(uint64_t epoch) { return (epoch & 1) * kCount * 4; }
uint64_t reduced_offset(uint64_t epoch) { return (2 + (epoch & 1)) * kCount * 4; }

void run_rank(const RankView& view, uint64_t epochs, uint64_t seed, std::atomic<uint64_t>& mismatches) {
  uint64_t skew = seed * 7919 + view.rank;
  std::vector<float> out(kCount), two_phase(kCount), gathered(kCount), scattered(kCount);
  for (uint64_t epoch = 1; epoch <= epochs; ++epoch) {
    float* input = view.at<float>(view.rank, input_offset(epoch));
    for (uint32_t i = 0; i < kCount; ++i) input[i] = contribution(view.rank, epoch, i);
    if (splitmix64_next(skew) % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(splitmix64_next(skew) % 200));
    // Three slices with their own slots, as tile tasks would run them.
    allreduce_one_shot(view, input_offset(epoch), 0, 100, 0, epoch, out.data());
    allreduce_one_shot(view, input_offset(epoch), 100, 200, 1, epoch, out.data());
    allreduce_one_shot(view, input_offset(epoch), 200, kCount, 2, epoch, out.data());
    allreduce_two_phase(view, input_offset(epoch), reduced_offset(epoch), 0, kCount, 3, epoch, two_phase.data());
    allgather(view, input_offset(epoch), 0, kCount, 5, epoch, gathered.data());
    reduce_scatter(view, input_offset(epoch), 0, kCount, 6, epoch, scattered.data());
    uint32_t first, last;
    rank_share(0, kCount, view.ranks, view.rank, &first, &last);
    uint64_t bad = 0;
    for (uint32_t i = 0; i < kCount; ++i) {
      const float expected = rank_order_sum(view.ranks, epoch, i);
      bad += out[i] != expected;
      bad += two_phase[i] != expected;
      for (uint32_t r = 0; r < view.ranks; ++r) {  // the all-gather takes element i from its owner
        uint32_t b, e;
        rank_share(0, kCount, view.ranks, r, &b, &e);
        if (i >= b && i < e) bad += gathered[i] != contribution(r, epoch, i);
      }
      if (i >= first && i < last) bad += scattered[i - first] != expected;
    }
    mismatches += bad;
  }
}

TEST(Collectives, EveryRankGetsTheRankOrderSumUnderSkew) {
  for (uint32_t ranks : {2u, 3u, 4u, 8u}) {
    InProcessGroup group(ranks, 4 * kCount * sizeof(float), 8, 20000);
    std::atomic<uint64_t> mismatches{0};
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] { run_rank(group.view(r), 60, ranks, mismatches); });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0u) << ranks << " ranks";
  }
}

// A rank that never arrives: the others stop with an error naming it and the collective.
TEST(Collectives, ARankThatNeverArrivesEndsTheWaitWithAnError) {
  InProcessGroup group(3, kCount * sizeof(float), 4, 300);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> out(kCount);
      try {
        allreduce_one_shot(group.view(r), 0, 0, kCount, 0, 1, out.data());
      } catch (const TransportError& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + " of 3: all-reduce"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("for rank 2, which is at epoch 0"), std::string::npos) << errors[r];
  }
}

// A rank that stops after some epochs (it died): the others fail on the next epoch, naming it.
TEST(Collectives, ARankThatStopsMidRunEndsTheOthersWaits) {
  InProcessGroup group(4, 2 * kCount * sizeof(float), 4, 300);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> out(kCount);
      const uint64_t last_epoch = r == 1 ? 5 : 20;  // rank 1 dies after epoch 5
      try {
        for (uint64_t epoch = 1; epoch <= last_epoch; ++epoch)
          allreduce_one_shot(group.view(r), input_offset(epoch), 0, kCount, 0, epoch, out.data());
      } catch (const TransportError& e) {
        errors[r] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(errors[1].empty()) << errors[1];
  for (uint32_t r : {0u, 2u, 3u}) {
    EXPECT_NE(errors[r].find("(slot 0, epoch 6)"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("for rank 1, which is at epoch 5"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace tilefire::testing
