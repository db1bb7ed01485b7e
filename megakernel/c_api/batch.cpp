// The C API's batched decoding (tilefire/tilefire.h): Engine::generate_batch and continuous batching.
#include <vector>

#include "megakernel/c_api/c_api.h"

using tilefire::c_api::guarded;
using tilefire::c_api::required;

namespace tilefire::c_api {
namespace {

// Frees the results handed out so far when a later one fails, so that a failed call hands out nothing.
struct HandedOut {
  std::vector<tilefire_generate_result> results;
  bool kept = false;
  ~HandedOut() {
    if (!kept)
      for (tilefire_generate_result& r : results) tilefire_generate_result_free(&r);
  }
};

}  // namespace
}  // namespace tilefire::c_api

extern "C" {

tilefire_status tilefire_generate_batch(tilefire_engine* engine, const tilefire_generate_request* requests, size_t count,
                                        tilefire_generate_result* results) {
  using namespace tilefire;
  return guarded([&] {
    const char* call = "tilefire_generate_batch";
    Engine& cpp_engine = required(engine, call, "engine").engine;
    if (count && !requests) throw InputError(std::string(call) + ": requests is NULL with a count of " + std::to_string(count));
    if (count && !results) throw InputError(std::string(call) + ": results is NULL with a count of " + std::to_string(count));
    std::vector<GenerateRequest> cpp;
    for (size_t i = 0; i < count; ++i) {
      const std::string name = "requests[" + std::to_string(i) + "]";
      c_api::check_output_size(results[i].struct_size, sizeof(tilefire_generate_result), call,
                               ("results[" + std::to_string(i) + "]").c_str());
      cpp.push_back(c_api::generate_request(requests[i], call, name.c_str(), cpp_engine.model()));
    }
    const std::vector<GenerateResult> generated = cpp_engine.generate_batch(cpp);
    c_api::HandedOut made;
    for (size_t i = 0; i < count; ++i) made.results.push_back(c_api::hand_out_result(generated[i], cpp[i].logprobs, results[i].struct_size));
    for (size_t i = 0; i < count; ++i) results[i] = made.results[i];  // the outputs last: nothing below can fail
    made.kept = true;
  });
}

tilefire_status tilefire_engine_add_sequence(tilefire_engine* engine, const tilefire_generate_request* request,
                                             uint64_t* sequence) {
  return guarded([&] {
    const char* call = "tilefire_engine_add_sequence";
    tilefire::Engine& cpp_engine = required(engine, call, "engine").engine;
    uint64_t& out = required(sequence, call, "sequence");
    out = cpp_engine.add_sequence(
        tilefire::c_api::generate_request(required(request, call, "request"), call, "request", cpp_engine.model()));
  });
}

tilefire_status tilefire_engine_step_sequences(tilefire_engine* engine, uint32_t* unfinished) {
  return guarded([&] {
    const char* call = "tilefire_engine_step_sequences";
    tilefire::Engine& cpp_engine = required(engine, call, "engine").engine;
    uint32_t& out = required(unfinished, call, "unfinished");
    engine->sequence_failed = false;
    try {
      out = cpp_engine.step_sequences();
    } catch (const tilefire::SequenceError& e) {
      engine->sequence_failed = true;
      engine->failed_sequence = e.sequence;
      throw;
    }
  });
}

tilefire_status tilefire_engine_failed_sequence(const tilefire_engine* engine, int* failed, uint64_t* sequence) {
  return guarded([&] {
    const char* call = "tilefire_engine_failed_sequence";
    const tilefire_engine& handle = required(engine, call, "engine");
    int& failed_out = required(failed, call, "failed");
    uint64_t& sequence_out = required(sequence, call, "sequence");
    failed_out = handle.sequence_failed ? 1 : 0;
    sequence_out = handle.sequence_failed ? handle.failed_sequence : 0;
  });
}

tilefire_status tilefire_engine_sequence_finished(const tilefire_engine* engine, uint64_t sequence, int* finished) {
  return guarded([&] {
    const char* call = "tilefire_engine_sequence_finished";
    const tilefire::Engine& cpp_engine = required(engine, call, "engine").engine;
    int& out = required(finished, call, "finished");
    out = cpp_engine.sequence_finished(sequence) ? 1 : 0;
  });
}

tilefire_status tilefire_engine_remove_sequence(tilefire_engine* engine, uint64_t sequence, tilefire_generate_result* result) {
  return guarded([&] {
    const char* call = "tilefire_engine_remove_sequence";
    tilefire::Engine& cpp_engine = required(engine, call, "engine").engine;
    tilefire_generate_result& out = required(result, call, "result");
    tilefire::c_api::check_output_size(out.struct_size, sizeof(tilefire_generate_result), call, "result");
    // The logprobs' width is the request's; the result holds it per token (none for a sequence that only
    // scored its prompt: then no width is needed).
    const tilefire::GenerateResult removed = cpp_engine.remove_sequence(sequence);
    const uint32_t k = removed.logprobs.empty() ? 0 : uint32_t(removed.logprobs.front().size());
    out = tilefire::c_api::hand_out_result(removed, k, out.struct_size);
  });
}

}  // extern "C"
