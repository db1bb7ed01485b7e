// Scheduler stress: 1 to 8 workers, random delays before tasks, static and dynamic queues, dataflow and
// bsp: the logits are bitwise identical to a single worker's, step after step.
#include <gtest/gtest.h>

#include <cstring>

#include "tilefire/engine.h"

namespace tilefire::testing {
namespace {

std::vector<std::vector<float>> run_steps(const EngineOptions& options) {
  Engine engine(options);
  std::vector<std::vector<float>> logits;
  logits.push_back(engine.prefill({7, 8, 9, 10, 11}));
  int32_t token = 1;
  for (int i = 0; i < 4; ++i) {
    logits.push_back(engine.decode(token));
    token = (token * 31 + 7) % 512;
  }
  return logits;
}

bool bitwise_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) return false;
  return true;
}

TEST(ScheduleStress, LogitsBitwiseIdenticalAcrossWorkersQueuesSchedulesAndDelays) {
  EngineOptions base;
  base.threads = 1;
  const auto expected = run_steps(base);
  for (uint32_t workers : {1u, 2u, 3u, 5u, 8u})
    for (const auto& [policy, description] : placement_policies())  // every registered policy
      for (Schedule schedule : {Schedule::dataflow, Schedule::bsp})
        for (uint32_t delay_us : {0u, 40u}) {
          EngineOptions options;
          options.threads = workers;
          options.policy = policy;
          options.schedule = schedule;
          options.stress_delay_us = delay_us;
          options.stress_seed = workers * 1000 + delay_us;
          EXPECT_TRUE(bitwise_equal(run_steps(options), expected))
              << workers << " workers, policy " << policy << ", "
              << (schedule == Schedule::bsp ? "bsp" : "dataflow") << ", delay " << delay_us << " us";
        }
}

// Split-KV attention merges its chunks in a fixed order: bitwise the same logits whatever the workers,
// the placement, the schedule and random delays.
TEST(ScheduleStress, SplitKvAttentionIsBitwiseStable) {
  EngineOptions base;
  base.threads = 1;
  base.kv_splits = 4;
  const auto expected = run_steps(base);
  for (uint32_t workers : {2u, 3u})
    for (const char* policy : {"balanced", "dynamic"})
      for (Schedule schedule : {Schedule::dataflow, Schedule::bsp}) {
        EngineOptions options = base;
        options.threads = workers;
        options.policy = policy;
        options.schedule = schedule;
        options.stress_delay_us = 30;
        options.stress_seed = workers;
        EXPECT_TRUE(bitwise_equal(run_steps(options), expected))
            << workers << " workers, " << policy << ", " << (schedule == Schedule::bsp ? "bsp" : "dataflow");
      }
}

TEST(ScheduleStress, HeadAndOpGranularityGiveTheSameLogits) {
  EngineOptions base;
  base.threads = 2;
  const auto expected = run_steps(base);
  for (Granularity granularity : {Granularity::head, Granularity::op})
    for (const char* policy : {"balanced", "dynamic"}) {
      EngineOptions options = base;
      options.granularity = granularity;
      options.policy = policy;
      options.stress_delay_us = 20;
      options.stress_seed = 7;
      EXPECT_TRUE(bitwise_equal(run_steps(options), expected)) << granularity_name(granularity) << ", " << policy;
    }
}

}  // namespace
}  // namespace tilefire::testing
