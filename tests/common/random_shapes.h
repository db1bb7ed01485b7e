#pragma once
// Random model shapes and engine settings for differential tests (tests/e2e/random_shapes_test.cpp
// against the reference, tests/e2e/cuda_engine_test.cpp against the cpu backend): shapes no preset has
// (head_dim 8 to 128, one KV head or as many as query heads, odd hidden, FFN and vocabulary sizes, one
// layer), every architecture feature, every weight dtype, prompts that span prefill chunks, and the
// scheduling knobs (threads, schedule, policy, granularity, split-KV, tensor parallelism over 2 to 4
// ranks). A case is a function of its seed alone, so a failure reruns alone.
#include <cstdint>
#include <string>
#include <vector>

#include "graph/model_spec.h"
#include "tilefire/engine.h"

namespace tilefire::testing {

struct RandomCase {
  ModelSpec spec;
  DType dtype = DType::f32;  // of the checkpoint's weights
  EngineOptions options;     // cpu backend; model_dir left to the test
  std::vector<int32_t> prompt;
  std::string description;   // every drawn setting, for failure messages
};

RandomCase draw_random_case(uint64_t seed);

// The case's options with another draw of what must not change the logits, bit for bit: threads,
// schedule, placement policy and event granularity (tensor parallelism and split-KV stay).
EngineOptions redraw_schedule(const RandomCase& c, uint64_t seed);
std::string describe_schedule(const EngineOptions& options);  // those four settings, in words

// How many seeds a test runs: TILEFIRE_RANDOM_SHAPES=N when set (a longer sweep), else `default_count`.
uint64_t random_case_count(uint64_t default_count);

}  // namespace tilefire::testing
