// Engine::generate_batch: several requests decoded together, one token of each unfinished sequence per
// step (docs/ARCHITECTURE.md, "Batched decoding").
//
// Each request gets a slot of the KV cache (graph/compile.h, CompileOptions::sequences): its prompt is
// prefilled there chunk by chunk, by the prefill programs every request shares, and its decode tokens go
// through a batched program of as many tokens as there are unfinished sequences (compiled once per
// width; ops read each token's position and slot from the step's inputs, ops/tile.h). The LM head of a
// batched step projects every token's row, so its weights, like every other matrix's, stream once for
// all the sequences.
#include <algorithm>
#include <chrono>

#include "megakernel/engine_impl.h"
#include "ops/sampling.h"

namespace tilefire {

namespace {

// One request while it generates.
struct LiveSequence {
  size_t request = 0;     // index into the requests and results
  uint32_t slot = 0;      // its KV cache slot
  uint32_t position = 0;  // tokens its cache holds
  int32_t next = -1;      // the last generated token, the next to feed
  UniformGenerator uniform{0};
  bool stopped = false;   // stop_when said so
  bool finished = false;
  double decode_ms = 0;
  uint32_t decode_steps = 0;
};

std::string request_name(size_t index) { return "generate_batch: request " + std::to_string(index) + ": "; }

}  // namespace

std::vector<GenerateResult> Engine::generate_batch(const std::vector<GenerateRequest>& requests) {
  Impl& m = *impl_;
  refuse_while_generating(m, "generate_batch");
  GeneratingScope generating_scope(m);
  if (requests.empty()) throw InputError("generate_batch: no requests");
  if (requests.size() > m.options.sequences)
    throw InputError("generate_batch: " + std::to_string(requests.size()) + " requests, but the engine holds " +
                     std::to_string(m.options.sequences) + " sequences at once (EngineOptions::sequences)");
  if (!m.executor)  // the constructor refuses sequences > 1 there; one request would need its own path
    throw InputError("generate_batch runs on the cpu backend with tp 1 only so far; use generate()");
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& request = requests[i];
    try {
      m.check_request(request);
    } catch (const InputError& e) {
      throw InputError(request_name(i) + e.what());
    }
    if (request.reuse_prefix)
      throw InputError(request_name(i) + "reuse_prefix is not supported by generate_batch (every request starts a new sequence)");
    if (!request.trace_path.empty())
      throw InputError(request_name(i) + "trace_path is not supported by generate_batch; trace a step with generate()");
  }

  std::vector<GenerateResult> results(requests.size());
  std::vector<LiveSequence> live;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].prompt_tokens = requests[i].prompt;
    results[i].compile_ms = m.decode_program->compile_ms;
    if (requests[i].max_new_tokens == 0) {  // as generate(): nothing to generate, no slot taken
      results[i].finish_reason = "length";
      continue;
    }
    LiveSequence s;
    s.request = i;
    s.slot = uint32_t(live.size());
    s.uniform = UniformGenerator(requests[i].sampling.seed);
    live.push_back(s);
  }
  if (live.empty()) return results;

  // The step API's sequence is slot 0's: from here it is the first live request's, or empty on failure.
  m.rewind(0);
  struct ResetOnFailure {
    Impl& m;
    bool armed = true;
    ~ResetOnFailure() {
      if (armed) m.rewind(0);
    }
  } reset_on_failure{m};

  const uint32_t vocab = m.info.vocab;
  // Picks the next token of `s` from its logits row, and decides whether it is done.
  auto take = [&](LiveSequence& s, const float* logits) {
    const GenerateRequest& request = requests[s.request];
    GenerateResult& result = results[s.request];
    try {
      m.check_finite_logits(logits, s.position - 1);
    } catch (const InputError& e) {
      throw InputError(request_name(s.request) + e.what());
    }
    if (request.logprobs) {
      std::vector<TokenProbability> top;
      for (auto [token, p] : top_probabilities(logits, vocab, request.logprobs)) top.push_back({token, p});
      result.logprobs.push_back(std::move(top));
    }
    const SamplingParams sampling{request.sampling.temperature, request.sampling.top_k, request.sampling.top_p};
    s.next = sample_token(logits, vocab, sampling, s.uniform.next());
    result.tokens.push_back(s.next);
    if (request.on_token) request.on_token(s.next);
    if (request.stop_when && request.stop_when(result.tokens)) s.stopped = true;
    // generate()'s order of reasons: eos, stopped, length, context.
    const bool eos = m.ends_request(request, s.next);
    s.finished = eos || s.stopped || result.tokens.size() >= request.max_new_tokens || s.position >= m.max_context;
    if (s.finished)
      result.finish_reason = eos ? "eos" : s.stopped ? "stopped" : result.tokens.size() >= request.max_new_tokens ? "length" : "context";
  };

  auto start = std::chrono::steady_clock::now();
  double compile_ms = 0;  // compiling is not part of any request's time to first token
  for (LiveSequence& s : live) {
    const std::vector<int32_t>& prompt = requests[s.request].prompt;
    const float* logits = nullptr;
    for (size_t begin = 0; begin < prompt.size(); begin += Impl::kPrefillChunk) {
      const size_t end = std::min(prompt.size(), begin + Impl::kPrefillChunk);
      double chunk_compile_ms = 0;
      BoundProgram& program = m.prefill_program(uint32_t(end - begin), &chunk_compile_ms);
      compile_ms += chunk_compile_ms;
      results[s.request].compile_ms += chunk_compile_ms;
      StepInputs inputs{prompt.data() + begin, uint32_t(end - begin), uint32_t(begin)};
      inputs.sequence0 = s.slot;
      logits = m.run_sequences(program, inputs);
      s.position = uint32_t(end);
    }
    take(s, logits);
    results[s.request].ttft_ms = ms_since(start) - compile_ms;
  }

  std::vector<int32_t> tokens;
  std::vector<uint32_t> positions, slots;
  std::vector<LiveSequence*> stepping;
  bool first_step = true;
  for (;;) {
    stepping.clear();
    for (LiveSequence& s : live)
      if (!s.finished) stepping.push_back(&s);
    if (stepping.empty()) break;
    const uint32_t width = uint32_t(stepping.size());
    tokens.assign(width, 0);
    positions.assign(width, 0);
    slots.assign(width, 0);
    for (uint32_t r = 0; r < width; ++r) {
      tokens[r] = stepping[r]->next;
      positions[r] = stepping[r]->position;
      slots[r] = stepping[r]->slot;
    }
    // One sequence left: the decode program (one token, the last row of logits) serves it.
    double program_compile_ms = 0;
    BoundProgram& program = width == 1 ? *m.decode_program : m.batch_program(width, &program_compile_ms);
    StepInputs inputs{tokens.data(), width, 0};
    if (width == 1) {
      inputs.position0 = positions[0];
      inputs.sequence0 = slots[0];
    } else {
      inputs.positions = positions.data();
      inputs.sequences = slots.data();
    }
    if (first_step)
      for (LiveSequence* s : stepping) {
        results[s->request].tasks_per_step = uint32_t(program.program.tasks.size());
        results[s->request].events_per_step = uint32_t(program.program.events.size());
      }
    first_step = false;
    for (LiveSequence* s : stepping) results[s->request].compile_ms += program_compile_ms;
    auto step_start = std::chrono::steady_clock::now();
    const float* logits = m.run_sequences(program, inputs);  // [width, vocab]
    const double step_ms = ms_since(step_start);
    for (uint32_t r = 0; r < width; ++r) {
      LiveSequence& s = *stepping[r];
      ++s.position;
      s.decode_ms += step_ms;
      ++s.decode_steps;
      take(s, logits + size_t(r) * vocab);
    }
  }

  for (const LiveSequence& s : live) {
    GenerateResult& result = results[s.request];
    if (s.decode_steps) {
      result.tpot_ms = s.decode_ms / s.decode_steps;
      result.decode_tok_s = 1000.0 / result.tpot_ms;
    }
  }
  // Slot 0 holds the first live request's sequence: its prompt and every generated token but the last.
  const LiveSequence& first = live.front();
  m.position = first.position;
  m.sequence = requests[first.request].prompt;
  const std::vector<int32_t>& generated = results[first.request].tokens;
  m.sequence.insert(m.sequence.end(), generated.begin(), generated.begin() + (first.position - m.sequence.size()));
  reset_on_failure.armed = false;
  return results;
}

}  // namespace tilefire
