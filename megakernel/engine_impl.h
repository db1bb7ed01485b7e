#pragma once
// The Engine's insides: the loaded model, the executor, the KV cache and the compiled programs.
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "graph/compile.h"
#include "graph/weights.h"
#include "megakernel/cpu/cpu_executor.h"
#include "tilefire/engine.h"

namespace tilefire {

// 64-byte aligned f32 storage (whole cache lines per tensor, AVX loads never split a line at row 0).
class AlignedFloats {
 public:
  explicit AlignedFloats(size_t count = 0);
  float* data() { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

// A Program bound to this engine's memory: its activations, and its instance on the executor.
struct BoundProgram {
  Program program;
  std::vector<AlignedFloats> activations;
  std::unique_ptr<ProgramInstance> instance;
  const float* logits = nullptr;  // [vocab] the lm_head output of the last step
  double compile_ms = 0;
};

struct Engine::Impl {
  LoadedModel model;
  ModelInfo info;
  EngineOptions options;
  uint32_t max_context = 0;
  std::unique_ptr<CpuExecutor> executor;
  std::map<std::string, AlignedFloats> kv_cache;        // by slot name
  std::map<std::string, std::vector<float>> f32_vectors;  // norm weights and biases converted to f32
  std::unique_ptr<BoundProgram> decode_program;
  std::map<uint32_t, std::unique_ptr<BoundProgram>> prefill_programs;  // by prompt length
  uint32_t position = 0;
  Schedule schedule = Schedule::dataflow;

  CompileOptions compile_options(uint32_t tokens) const;
  std::unique_ptr<BoundProgram> bind(Program program, double compile_ms);
  BoundProgram& prefill_program(uint32_t tokens, double* compile_ms);
  // Runs one step of `bound` on `tokens` at the current position; returns the logits slot.
  const float* run(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace);
};

// Writes a Chrome trace / Perfetto JSON: one row per worker, one slice per task named by op and tile.
void write_chrome_trace(const std::string& path, const Program& program, const std::vector<TaskTiming>& timings);

}  // namespace tilefire
