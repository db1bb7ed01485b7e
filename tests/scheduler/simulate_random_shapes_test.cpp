// `simulate` (the public simulate_model) on random model shapes and settings (tests/common/random_shapes.h;
// every other one scaled to a real model's size) over the GPU device models, with tensor parallelism,
// batches and contexts. Whatever the shape, a prediction is finite and no faster than its bound, idle
// time lies within the step, and the collective figures are consistent. No analytic value exists for
// these programs (simulator_test has those); these are the properties every prediction must keep. And
// `inspect` on the same draws (decode and prefill, any rank, any worker count): its counts add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tests/common/random_shapes.h"
#include "tests/common/test_models.h"
#include "tilefire/inspect.h"
#include "tilefire/simulate.h"

namespace tilefire::testing {
namespace {

class SimulateRandomShapes : public ::testing::TestWithParam<uint64_t> {};

// The case's config.json in `dir` (the planning tools read nothing else); `real_size` scales the shape
// to a real model's (up to 8 GB of weights). Returns the folder.
std::string write_config(const RandomCase& c, const TempDir& dir, bool real_size) {
  ModelSpec spec = c.spec;
  spec.dtype = c.dtype;
  if (real_size) {
    spec.hidden *= 16;
    spec.ffn *= 16;
    spec.vocab *= 64;
    spec.layers *= 8;
  }
  std::ofstream(dir.path() / "config.json") << to_hf_config_json(spec);
  return dir.path().string();
}

TEST_P(SimulateRandomShapes, PredictionsKeepTheirInvariants) {
  const uint64_t seed = GetParam();
  const RandomCase c = draw_random_case(seed);
  SimulateOptions o;
  o.device = std::vector<std::string>{"h100", "h200", "b200"}[seed % 3];
  o.dtype = dtype_name(c.dtype);
  o.policy = c.options.policy;
  o.granularity = granularity_name(c.options.granularity);
  o.kv_splits = c.options.kv_splits;
  o.tp = c.options.tp;
  o.batch = seed % 4 == 0 ? 4 : 1;
  o.context = 1 + uint32_t(seed * 37 % 255);
  SCOPED_TRACE(c.description + "; simulated on " + o.device + ", batch " + std::to_string(o.batch) + ", context " +
               std::to_string(o.context));
  TempDir dir("simulate-random-" + std::to_string(seed));
  o.model_dir = write_config(c, dir, seed % 2 == 0);
  SimulateReport r;
  try {
    r = simulate_model(o);
  } catch (const std::exception& e) {
    FAIL() << "threw: " << e.what();
  }
  EXPECT_GT(r.tasks, 0u);
  EXPECT_GT(r.workers, 0u);
  ASSERT_TRUE(std::isfinite(r.step_ms) && r.step_ms > 0) << r.step_ms;
  ASSERT_TRUE(std::isfinite(r.bound_ms) && r.bound_ms > 0) << r.bound_ms;
  ASSERT_TRUE(std::isfinite(r.bsp_ms) && r.bsp_ms > 0) << r.bsp_ms;
  // Every byte and flop is charged at most at the device's full rate, so no schedule beats the bound.
  EXPECT_GE(r.step_ms, r.bound_ms * (1 - 1e-9));
  EXPECT_GE(r.bsp_ms, r.bound_ms * (1 - 1e-9));
  EXPECT_LE(r.bound_share, 1 + 1e-9);
  EXPECT_NEAR(r.bound_share, r.bound_ms / r.step_ms, 1e-9);
  EXPECT_NEAR(r.bsp_ratio, r.bsp_ms / r.step_ms, 1e-9);
  EXPECT_GE(r.idle_share, 0.0);
  EXPECT_LE(r.idle_share, 1.0);
  ASSERT_EQ(r.idle_ms.size(), r.workers);
  for (double idle : r.idle_ms) {
    EXPECT_GE(idle, -1e-9);
    EXPECT_LE(idle, r.step_ms * (1 + 1e-9));
  }
  if (o.tp > 1) {
    EXPECT_GT(r.collective_ms, 0.0);
    EXPECT_GE(r.hidden_collective_share, 0.0);
    EXPECT_LE(r.hidden_collective_share, 1.0 + 1e-9);
  } else {
    EXPECT_EQ(r.collective_ms, 0.0);
  }
}

// The collectives' time with none hidden: each collective node's tiles side by side, so a node of fewer
// tiles than workers pays the link latency once (spread over the workers, as before 2026-12-01, the
// latency was divided and the exposed time came out nine times the whole). Tiny at TP 2 on the H200
// model: 9 nodes of a few tiles on 132 SMs, in a step too short to hide them behind anything.
TEST(SimulateCollectives, EachCollectiveNodePaysTheLinkLatencyOnce) {
  SimulateOptions o;
  o.preset = "tiny";
  o.device = "h200";
  o.tp = 2;
  const SimulateReport r = simulate_model(o);
  const double nodes = 2 * 4 + 1;  // tiny's 4 layers: an all-reduce after attention and after the FFN; the logits' all-gather
  ASSERT_GT(r.link_latency_ns, 0.0);
  EXPECT_GE(r.collective_ms, nodes * r.link_latency_ns * 1e-6);
  EXPECT_LE(r.collective_ms, nodes * r.link_latency_ns * 1e-6 * 1.1);  // and a little for the bytes
  EXPECT_NEAR(r.exposed_collective_ms, r.collective_ms, 0.05 * r.collective_ms);
}

// `inspect` on the same draws: its counts add up and the critical path is a path of the program.
TEST_P(SimulateRandomShapes, InspectCountsAddUp) {
  const uint64_t seed = GetParam();
  const RandomCase c = draw_random_case(seed);
  SCOPED_TRACE(c.description);
  TempDir dir("inspect-random-" + std::to_string(seed));
  InspectOptions o;
  o.model_dir = write_config(c, dir, false);
  o.dtype = dtype_name(c.dtype);
  o.policy = c.options.policy;
  o.granularity = granularity_name(c.options.granularity);
  o.kv_splits = c.options.kv_splits;
  o.tp = c.options.tp;
  o.rank = c.options.tp > 1 ? uint32_t(seed % c.options.tp) : 0;
  o.tokens = seed % 3 == 0 ? uint32_t(c.prompt.size()) : 1;
  o.workers = uint32_t(seed % 7 == 0 ? 0 : 1 + seed % 16);
  o.context = std::max<uint32_t>(o.tokens, 1 + uint32_t(seed * 37 % 255));  // within the model's 256 positions
  o.dot_path = (dir.path() / "layer.dot").string();
  InspectReport r;
  try {
    r = inspect_program(o);
  } catch (const std::exception& e) {
    FAIL() << "threw: " << e.what();
  }
  ASSERT_GT(r.tasks, 0u);
  uint32_t op_tasks = 0, layer_tasks = 0;
  for (const OpShape& op : r.ops) {
    EXPECT_GT(op.tasks, 0u) << op.op;
    op_tasks += op.tasks;
  }
  for (const LayerShape& layer : r.layers) layer_tasks += layer.tasks;
  EXPECT_EQ(op_tasks, r.tasks);
  EXPECT_EQ(layer_tasks, r.tasks);
  EXPECT_GE(r.critical_path_tasks, 1u);
  EXPECT_LE(r.critical_path_tasks, r.tasks);
  uint32_t path_tasks = 0;
  for (const auto& [op, count] : r.critical_path_ops) path_tasks += count;
  EXPECT_EQ(path_tasks, r.critical_path_tasks);
  EXPECT_TRUE(std::isfinite(r.critical_path_ns) && r.critical_path_ns > 0) << r.critical_path_ns;
  EXPECT_TRUE(std::isfinite(r.bound_ns) && r.bound_ns > 0) << r.bound_ns;
  EXPECT_GT(r.total_bytes, 0.0);
  EXPECT_TRUE(r.dot_written);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SimulateRandomShapes, ::testing::Range<uint64_t>(1, random_case_count(40) + 1));

}  // namespace
}  // namespace tilefire::testing
