// Engine internals: binding a Program's slots to memory, the prefill program cache, running a step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "megakernel/engine_impl.h"
#include "ops/sampling.h"
#include "ops/tile.h"  // ring_holds_window_before
#include "scheduler/policy.h"

namespace tilefire {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// calloc, not aligned_alloc and a fill: a large block comes zeroed from fresh pages that are committed
// only when first written (glibc's calloc, and the sanitizers' own, skip the fill for those), so a KV
// cache costs the machine the positions its sequences have reached, not every slot's whole context.
AlignedFloats::AlignedFloats(size_t count) : size_(count) {
  if (count == 0) return;
  if (count > (SIZE_MAX - 64) / sizeof(float)) throw std::bad_alloc();
  void* block = std::calloc(1, count * sizeof(float) + 64);
  if (!block) throw std::bad_alloc();
  block_.reset(block);
  const uintptr_t address = reinterpret_cast<uintptr_t>(block);
  data_ = reinterpret_cast<float*>((address + 63) / 64 * 64);
}

void AlignedFloats::Free::operator()(void* p) const { std::free(p); }

void record_probabilities(GenerateResult& result, const float* logits, uint32_t vocab, uint32_t k, int32_t token) {
  const Softmax softmax(logits, vocab);
  std::vector<TokenProbability> top;
  for (const TokenOdds& odds : softmax.top(k)) top.push_back({odds.token, odds.probability, odds.logprob});
  result.logprobs.push_back(std::move(top));
  const TokenOdds chosen = softmax.odds(token);
  result.token_probabilities.push_back({chosen.token, chosen.probability, chosen.logprob});
}

void record_prompt_probabilities(const Engine::Impl& m, GenerateResult& result, const float* logits, uint32_t rows,
                                 const std::vector<int32_t>& tokens, size_t begin, uint32_t k) {
  const uint32_t vocab = m.info.vocab;
  for (uint32_t r = 0; r < rows && begin + r + 1 < tokens.size(); ++r) {
    const float* row = logits + size_t(r) * vocab;
    m.check_finite_logits(row, uint32_t(begin + r));
    const Softmax softmax(row, vocab);
    std::vector<TokenProbability> top;
    for (const TokenOdds& odds : softmax.top(k)) top.push_back({odds.token, odds.probability, odds.logprob});
    result.prompt_logprobs.push_back(std::move(top));
    const TokenOdds next = softmax.odds(tokens[begin + r + 1]);
    result.prompt_token_probabilities.push_back({next.token, next.probability, next.logprob});
  }
}

int32_t choose_token(const float* logits, uint32_t vocab, const GenerateRequest& request, const std::vector<int32_t>& generated,
                     TokenCounts& counts, float uniform01, const std::vector<int32_t>& banned) {
  const Sampling& sampling = request.sampling;
  const SamplingParams params{sampling.temperature, sampling.top_k, sampling.top_p, sampling.min_p};
  const LogitAdjustments adjustments{sampling.logit_bias, sampling.repetition_penalty, sampling.presence_penalty,
                                     sampling.frequency_penalty};
  int32_t token = 0;
  if (adjustments.active() || !banned.empty() || request.allowed_tokens) {
    std::vector<float> adjusted;  // [vocab]
    counts.adjust(logits, vocab, adjustments, adjusted);
    constexpr float kExcluded = -std::numeric_limits<float>::infinity();
    for (int32_t t : banned)
      if (t >= 0 && uint32_t(t) < vocab) adjusted[size_t(t)] = kExcluded;
    if (request.allowed_tokens) {
      std::vector<uint8_t> allowed(vocab, 0);  // [vocab]
      request.allowed_tokens(generated, allowed);
      const auto where = [&] { return "GenerateRequest::allowed_tokens, asked for generated token " + std::to_string(generated.size()); };
      if (allowed.size() != vocab)
        throw InputError(where() + ", resized its list of " + std::to_string(vocab) + " tokens to " + std::to_string(allowed.size()));
      bool any = false;
      for (uint32_t t = 0; t < vocab; ++t) {
        if (!allowed[t]) adjusted[t] = kExcluded;
        any = any || adjusted[t] != kExcluded;  // the logits are finite (checked), and so stay after adjusting
      }
      if (!any)
        throw InputError(where() + ", allowed no token" +
                         (banned.empty() ? std::string() : " but the ending tokens min_new_tokens holds back"));
    }
    token = sample_token(adjusted.data(), vocab, params, uniform01);
  } else {
    token = sample_token(logits, vocab, params, uniform01);
  }
  counts.add_generated(token);
  return token;
}

bool needs_logits(const GenerateRequest& request) {
  const Sampling& s = request.sampling;
  return s.temperature != 0.0f || request.logprobs != 0 || !s.logit_bias.empty() || s.repetition_penalty != 1.0f ||
         s.presence_penalty != 0.0f || s.frequency_penalty != 0.0f || request.min_new_tokens != 0 ||
         request.allowed_tokens != nullptr;
}

CompileOptions Engine::Impl::compile_options(uint32_t tokens) const {
  CompileOptions o;
  o.workers = workers();
  o.tokens = tokens;
  o.max_context = max_context;
  // A sequence's tokens in one step: a prompt's chunk, or a checked draft of fewer (check_speculation); it
  // sizes a sliding-window layer's ring, alike in every program (run_chunk refuses more).
  o.step_tokens = options.prefill_chunk;
  o.sliding_rings = options.backend == Backend::cpu;  // the device's attention ops read whole caches (docs/CUDA.md)
  o.policy = options.policy.empty() ? std::string(kDefaultPolicy) : options.policy;
  o.granularity = event_granularity(options.granularity);
  // The cpu backend splits only when asked: its logits stay bitwise the same across thread counts (the
  // automatic chunk count follows the workers, and the merge's sums follow the chunks).
  o.kv_splits = options.kv_splits != 0 ? options.kv_splits : options.backend == Backend::cpu ? 1 : 0;
  o.tp = tp;
  o.rank = rank;
  o.sequences = options.sequences;  // every program shares the caches, so every program sizes them alike
  return o;
}

namespace {

const TensorView& checkpoint_tensor(const LoadedModel& model, const SlotDesc& slot) {
  const TensorView* t = model.weights.find(slot.name);
  if (!t) throw InputError(model.origin + ": missing tensor '" + slot.name + "'");
  const uint64_t expected = slot.sliced() ? slot.full_rows * slot.full_cols : slot.rows * slot.cols;
  if (t->numel() != expected)
    throw InputError(model.origin + ": tensor '" + slot.name + "' has " + std::to_string(t->numel()) + " elements, expected " +
                     std::to_string(expected));
  return *t;
}

// A tensor-parallel rank's slice of a checkpoint tensor, as contiguous rows (element size `size`).
std::vector<unsigned char> slice_bytes(const void* data, const SlotDesc& slot, size_t size) {
  std::vector<unsigned char> out(slot.rows * slot.cols * size);
  const auto* in = static_cast<const unsigned char*>(data);
  for (uint64_t r = 0; r < slot.rows; ++r)
    std::memcpy(out.data() + r * slot.cols * size, in + ((slot.row_begin + r) * slot.full_cols + slot.col_begin) * size,
                slot.cols * size);
  return out;
}

std::vector<float> finite_f32_values(const TensorView& t, const std::string& name) {
  std::vector<float> values(t.numel());
  for (size_t k = 0; k < values.size(); ++k) {
    values[k] = load_as_f32(t.data, t.dtype, k);
    if (!std::isfinite(values[k]))
      throw InputError(t.file + ": tensor '" + name + "' holds a non-finite value at element " + std::to_string(k));
  }
  return values;
}

// A weight_f32 slot's values as the kernels read them: its part of the checkpoint vector, plus the slot's
// value_offset (Gemma's 1 + w norms, added in f32 as transformers does).
std::vector<float> f32_vector_values(const LoadedModel& model, const SlotDesc& slot) {
  std::vector<float> values = finite_f32_values(checkpoint_tensor(model, slot), slot.name);
  if (slot.sliced()) values = std::vector<float>(values.begin() + slot.col_begin, values.begin() + slot.col_begin + slot.cols);
  if (slot.value_offset != 0.0f)
    for (float& value : values) value += slot.value_offset;
  return values;
}

}  // namespace

void* Engine::Impl::device_slot(const SlotDesc& slot) {
  // A tensor-parallel rank's slice is a tensor of its own (its rows and columns in the key).
  // Appended piece by piece: `"@" + to_string(...)` trips GCC 12's -Wrestrict false positive (GCC bug
  // 105651), a warning in every build.
  std::string key = std::to_string(int(slot.kind));
  key += ':';
  key += slot.name;
  if (slot.sliced())
    for (auto [separator, value] : {std::pair{'@', slot.row_begin}, {',', slot.col_begin}, {'+', slot.rows}, {'x', slot.cols}}) {
      key += separator;
      key += std::to_string(value);
    }
  auto it = device_tensors.find(key);
  if (it != device_tensors.end()) return it->second.get();
  cuda->make_current();
  DeviceBuffer buffer;
  switch (slot.kind) {
    case SlotKind::weight: {  // bf16 on the device; f32 and f16 checkpoints are rounded once, here
      const TensorView& t = checkpoint_tensor(loaded(), slot);
      const void* data = t.data;  // [rows, cols] of t.dtype
      uint64_t count = t.numel();
      std::vector<unsigned char> slice;
      if (slot.sliced()) {
        slice = slice_bytes(t.data, slot, dtype_size(t.dtype));
        data = slice.data();
        count = slot.rows * slot.cols;
      }
      if (t.dtype == DType::bf16) {
        buffer = cuda->upload(data, count * 2);
      } else {
        std::vector<uint16_t> converted(count);
        for (size_t k = 0; k < converted.size(); ++k) converted[k] = f32_to_bf16(load_as_f32(data, t.dtype, k));
        buffer = cuda->upload(converted.data(), converted.size() * 2);
      }
      break;
    }
    case SlotKind::weight_f32: {
      const std::vector<float> values = f32_vector_values(loaded(), slot);
      buffer = cuda->upload(values.data(), values.size() * sizeof(float));
      break;
    }
    case SlotKind::kv_cache:
      if (slot.cache_rows != max_context)  // the device's attention reads a position at its row: no rings there
        throw std::logic_error("device_slot: cache '" + slot.name + "' of " + std::to_string(slot.cache_rows) + " rows per head");
      buffer = DeviceBuffer(slot.rows * slot.cols * sizeof(float));
      break;
    default:
      throw std::logic_error("device_slot: slot '" + slot.name + "' is not a weight, vector or cache");
  }
  return device_tensors.emplace(key, std::move(buffer)).first->second.get();
}

std::unique_ptr<BoundProgram> Engine::Impl::bind(Program program, double compile_ms) {
  auto bound = std::make_unique<BoundProgram>();
  bound->program = std::move(program);
  bound->compile_ms = compile_ms;
  const Program& p = bound->program;
  std::vector<void*> slots(p.slots.size(), nullptr);
  if (cuda && !p.constants.empty()) bound->device_constants = cuda->upload(p.constants.data(), p.constants.size() * sizeof(float));
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const SlotDesc& slot = p.slots[i];
    if (slot.kind == SlotKind::activation) {
      bound->activation_offsets.emplace_back(uint32_t(i), bound->activation_floats);
      bound->activation_floats += (slot.rows * slot.cols + 15) / 16 * 16;  // whole cache lines each
      continue;
    }
    if (slot.kind == SlotKind::constant) {
      slots[i] = cuda ? static_cast<void*>(static_cast<float*>(bound->device_constants.get()) + slot.constant_offset)
                      : const_cast<float*>(p.constants.data() + slot.constant_offset);
      continue;
    }
    if (cuda && slot.kind != SlotKind::window) {
      slots[i] = device_slot(slot);
      continue;
    }
    switch (slot.kind) {
      case SlotKind::weight: {
        const TensorView& t = checkpoint_tensor(loaded(), slot);
        if (t.dtype != slot.dtype)
          throw InputError(loaded().origin + ": tensor '" + slot.name + "' is " + std::string(dtype_name(t.dtype)) +
                           ", expected " + std::string(dtype_name(slot.dtype)) + " like the other matrices");
        const size_t size = dtype_size(t.dtype);
        if (!slot.sliced()) {
          slots[i] = const_cast<void*>(t.data);
        } else if (slot.cols == slot.full_cols) {  // whole rows: a pointer into the checkpoint
          slots[i] = const_cast<unsigned char*>(static_cast<const unsigned char*>(t.data) + slot.row_begin * slot.full_cols * size);
        } else {  // a column slice: copied once into contiguous rows
          const std::string key = slot.name + "@" + std::to_string(slot.row_begin) + "," + std::to_string(slot.col_begin);
          auto it = weight_slices.find(key);
          if (it == weight_slices.end()) it = weight_slices.emplace(key, slice_bytes(t.data, slot, size)).first;
          slots[i] = it->second.data();
        }
        break;
      }
      case SlotKind::weight_f32: {
        const std::string key = slot.name + "@" + std::to_string(slot.col_begin) + "+" + std::to_string(slot.cols);
        auto it = f32_vectors.find(key);
        if (it == f32_vectors.end()) it = f32_vectors.emplace(key, f32_vector_values(loaded(), slot)).first;
        slots[i] = it->second.data();
        break;
      }
      case SlotKind::window: {  // 64-byte aligned, in slot order: the same layout on every rank
        if (p.collective_flags > rank_view.flag_count - 2)
          throw std::logic_error("bind: the program's collectives need " + std::to_string(p.collective_flags) +
                                 " flag slots, the group has " + std::to_string(rank_view.flag_count - 2));
        if (!group && rank_view.windows == nullptr)
          throw std::logic_error("bind: a window slot '" + slot.name + "' outside tensor parallelism");
        const uint64_t offset = bound->window_bytes;
        bound->window_bytes += (slot.rows * slot.cols * sizeof(float) + 63) / 64 * 64;
        if (bound->window_bytes > rank_view.window_bytes)
          throw std::logic_error("bind: the program's window slots need " + std::to_string(bound->window_bytes) +
                                 " bytes, the window has " + std::to_string(rank_view.window_bytes));
        slots[i] = rank_view.windows[rank] + offset;
        break;
      }
      case SlotKind::kv_cache: {
        auto it = kv_cache.find(slot.name);
        if (it == kv_cache.end()) {
          it = kv_cache.emplace(slot.name, AlignedFloats(slot.rows * slot.cols)).first;
          track_ring(slot);
        }
        // Every program of the engine shares the caches, so every one must size them alike (compile_options).
        if (it->second.size() != slot.rows * slot.cols)
          throw std::logic_error("bind: cache '" + slot.name + "' of " + std::to_string(slot.rows) + " rows against " +
                                 std::to_string(it->second.size() / slot.cols) + " already held");
        slots[i] = it->second.data();
        break;
      }
      default:
        break;
    }
  }
  grow_arena(bound->activation_floats);
  for (auto [slot, offset] : bound->activation_offsets) slots[slot] = arena_floats() + offset;
  bound->arena_generation = arena_generation;
  bound->logits = static_cast<const float*>(slots[p.slot_index(kLogitsSlotName)]);
  if (cuda)
    bound->cuda_program = cuda->load(bound->program, std::move(slots));
  else
    bound->instance = std::make_unique<ProgramInstance>(bound->program, std::move(slots));
  return bound;
}

void Engine::Impl::grow_arena(size_t floats) {
  if (cuda) {
    if (device_arena.bytes() >= floats * sizeof(float)) return;
    cuda->make_current();
    device_arena = DeviceBuffer(floats * sizeof(float));
  } else {
    if (arena.size() >= floats) return;
    arena = AlignedFloats(floats);
  }
  ++arena_generation;
}

float* Engine::Impl::arena_floats() {
  return cuda ? static_cast<float*>(device_arena.get()) : arena.data();
}

BoundProgram& Engine::Impl::prefill_program(uint32_t tokens, bool prompt_logits, double* compile_ms) {
  *compile_ms = 0;
  auto it = prefill_programs.find({tokens, prompt_logits});
  if (it == prefill_programs.end()) {
    if (cuda) cuda->stop_resident_kernel();  // device memory is freed and allocated below
    if (prefill_programs.size() >= kPrefillProgramsKept) {  // evict the least recently used
      auto oldest = prefill_programs.begin();
      for (auto p = prefill_programs.begin(); p != prefill_programs.end(); ++p)
        if (p->second->last_used < oldest->second->last_used) oldest = p;
      prefill_programs.erase(oldest);
    }
    auto start = std::chrono::steady_clock::now();
    CompileOptions compile = compile_options(tokens);
    compile.prompt_logits = prompt_logits;
    Program program = compile_model(program_spec, compile);
    *compile_ms = ms_since(start);
    it = prefill_programs.emplace(std::make_pair(tokens, prompt_logits), bind(std::move(program), *compile_ms)).first;
    it->second->logit_rows = prompt_logits ? tokens : 1;
  }
  it->second->last_used = ++use_clock;
  return *it->second;
}

void Engine::Impl::check_vocabulary(const std::vector<int32_t>& tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || uint32_t(t) >= info.vocab)
      throw InputError("token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(info.vocab) + ")");
}

void Engine::Impl::check_tokens(const std::vector<int32_t>& tokens) const {
  check_vocabulary(tokens);
  if (uint64_t(position) + tokens.size() > max_context)
    throw InputError("the sequence needs " + std::to_string(uint64_t(position) + tokens.size()) +
                     " positions but the context holds " + std::to_string(max_context) +
                     " (EngineOptions::max_context, --max-context)");
}

StepInputs Engine::Impl::prepare_step(BoundProgram& bound, const std::vector<int32_t>& tokens) {
  check_tokens(tokens);
  point_at_arena(bound);
  const StepInputs inputs{tokens.data(), uint32_t(tokens.size()), position};
  note_written(inputs);
  return inputs;
}

void Engine::Impl::point_at_arena(BoundProgram& bound) {
  if (bound.arena_generation != arena_generation) {  // the arena grew since this program was bound
    const uint32_t logits_slot = bound.program.slot_index(kLogitsSlotName);
    for (auto [slot, offset] : bound.activation_offsets) {
      float* pointer = arena_floats() + offset;
      if (cuda)
        cuda->set_slot(*bound.cuda_program, slot, pointer);
      else
        bound.instance->set_slot(slot, pointer);
      if (slot == logits_slot) bound.logits = pointer;
    }
    bound.arena_generation = arena_generation;
  }
}

const float* Engine::Impl::run_sequences(BoundProgram& bound, StepInputs inputs, bool want_logits,
                                         std::vector<TaskTiming>* trace) {
  if (!executor && !cuda) throw std::logic_error("run_sequences: on a tensor-parallel group rather than its ranks");
  point_at_arena(bound);
  note_written(inputs);
  inputs.epoch = ++epoch;
  if (cuda) {  // the logits of every row come back (a batched program reduces no greedy token on the device)
    cuda->run_step(*bound.cuda_program, inputs, schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow, trace);
    if (!want_logits) return nullptr;  // another rank of this process copies them back
    host_logits.resize(size_t(bound.logit_rows) * info.vocab);
    cuda->download(host_logits.data(), bound.logits, host_logits.size() * sizeof(float));
    return host_logits.data();
  }
  StepOptions step_options;
  step_options.ranks = tp > 1 ? &rank_view : nullptr;
  step_options.mode = schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow;
  step_options.trace = trace;
  step_options.max_random_delay_us = options.stress_delay_us;
  step_options.delay_seed = options.stress_seed + token_position(inputs, 0) + (uint64_t(token_sequence(inputs, 0)) << 32) +
                            (uint64_t(rank) << 48);  // each rank its own delays: the stress skews the ranks
  executor->run_step(*bound.instance, inputs, step_options);
  return bound.logits;
}

BoundProgram& Engine::Impl::batch_program(uint32_t tokens, uint32_t logit_rows, double* compile_ms) {
  *compile_ms = 0;
  if (logit_rows == 0 || logit_rows > tokens) logit_rows = tokens;
  const std::pair<uint32_t, uint32_t> key{tokens, logit_rows};
  auto it = batch_programs.find(key);
  if (it == batch_programs.end()) {
    if (batch_programs.size() >= kBatchProgramsKept) {  // evict the least recently used
      if (cuda) cuda->stop_resident_kernel();            // its device memory is freed
      auto oldest = batch_programs.begin();
      for (auto p = batch_programs.begin(); p != batch_programs.end(); ++p)
        if (p->second->last_used < oldest->second->last_used) oldest = p;
      batch_programs.erase(oldest);
    }
    auto start = std::chrono::steady_clock::now();
    CompileOptions compile = compile_options(tokens);
    compile.batched_decode = true;
    compile.logit_rows = logit_rows;
    Program program = compile_model(program_spec, compile);
    *compile_ms = ms_since(start);
    it = batch_programs.emplace(key, bind(std::move(program), *compile_ms)).first;
    it->second->logit_rows = logit_rows;
  }
  it->second->last_used = ++use_clock;
  return *it->second;
}

BoundProgram& Engine::Impl::program_of(StepKind kind, uint32_t tokens, double* compile_ms, uint32_t logit_rows) {
  switch (kind) {
    case StepKind::decode:
      *compile_ms = 0;
      return *decode_program;
    case StepKind::batched_decode: return batch_program(tokens, logit_rows, compile_ms);
    case StepKind::prefill: break;
    case StepKind::prompt_prefill: return prefill_program(tokens, true, compile_ms);
  }
  return prefill_program(tokens, false, compile_ms);
}

std::vector<BoundProgram*> Engine::Impl::rank_programs(StepKind kind, uint32_t tokens, double* compile_ms, uint32_t logit_rows) {
  std::vector<BoundProgram*> programs(rank_engines.size());
  on_every_rank([&](Impl& r, uint32_t index) {
    double ms = 0;
    programs[index] = &r.program_of(kind, tokens, &ms, logit_rows);
    if (index == 0) *compile_ms = ms;
  });
  if (*compile_ms > 0) setup_barrier(programs[0]->program);  // a new program: every rank compiles it first
  for (uint32_t r = 1; r < programs.size(); ++r) check_ranks_agree(programs[0]->program, 0, programs[r]->program, r);
  return programs;
}

Engine::Impl::SequencesStep Engine::Impl::step_of_sequences(StepKind kind, const StepInputs& inputs,
                                                            std::vector<TaskTiming>* trace, uint32_t logit_rows) {
  SequencesStep step;
  if (rank_engines.empty()) {
    BoundProgram& program = program_of(kind, inputs.tokens_count, &step.compile_ms, logit_rows);
    const auto start = std::chrono::steady_clock::now();
    step.logits = run_sequences(program, inputs, true, trace);
    step.run_ms = ms_since(start);
    step.program = &program;
    return step;
  }
  check_not_broken();
  const std::vector<BoundProgram*> programs = rank_programs(kind, inputs.tokens_count, &step.compile_ms, logit_rows);
  const auto start = std::chrono::steady_clock::now();
  on_every_rank([&](Impl& r, uint32_t index) {
    const float* rank_logits = r.run_sequences(*programs[index], inputs, index == 0, index == 0 ? trace : nullptr);
    if (index == 0) step.logits = rank_logits;
  });
  end_step_barrier();
  step.run_ms = ms_since(start);
  step.program = programs[0];
  return step;
}

CudaStepResult Engine::Impl::run_cuda(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace) {
  StepInputs inputs = prepare_step(bound, tokens);
  inputs.epoch = ++epoch;
  const CudaStepResult result = cuda->run_step(*bound.cuda_program, inputs,
                                               schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow, trace);
  position += uint32_t(tokens.size());
  return result;
}

const float* Engine::Impl::run(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace,
                              bool want_logits) {
  if (cuda) {
    run_cuda(bound, tokens, trace);
    if (!want_logits) return nullptr;  // another rank of this process copies them back
    host_logits.resize(size_t(bound.logit_rows) * info.vocab);
    cuda->download(host_logits.data(), bound.logits, host_logits.size() * sizeof(float));
    return host_logits.data();
  }
  StepInputs inputs = prepare_step(bound, tokens);
  inputs.epoch = ++epoch;
  StepOptions step_options;
  step_options.ranks = tp > 1 ? &rank_view : nullptr;
  step_options.mode = schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow;
  step_options.trace = trace;
  step_options.max_random_delay_us = options.stress_delay_us;
  step_options.delay_seed = options.stress_seed + position + (uint64_t(rank) << 48);  // each rank its own delays
  executor->run_step(*bound.instance, inputs, step_options);
  position += uint32_t(tokens.size());
  return bound.logits;
}

namespace {
InputError nonfinite_logits(const std::string& origin, uint32_t at) {
  return InputError(origin + ": the model produced NaN logits (or other non-finite values) at position " + std::to_string(at) +
                    "; its weight matrices hold NaN or Inf values");
}
}  // namespace

bool Engine::Impl::all_finite(const float* logits) const {
  return std::all_of(logits, logits + info.vocab, [](float v) { return std::isfinite(v); });
}

void Engine::Impl::check_finite_logits(const float* logits, uint32_t at) const {
  if (!all_finite(logits)) throw nonfinite_logits(loaded().origin, at);
}

void Engine::Impl::track_ring(const SlotDesc& slot) {
  if (slot.cache_rows >= max_context) return;  // never wraps
  // The layer whose cache it is, for its window: the rings are what the compiler made, not a second guess.
  for (uint32_t layer = 0; layer < program_spec.layers; ++layer) {
    if (slot.name != kv_cache_slot_name(layer, true) && slot.name != kv_cache_slot_name(layer, false)) continue;
    const uint32_t window = program_spec.attention_window(layer);
    if (window == 0 || window > slot.cache_rows)
      throw std::logic_error("bind: cache '" + slot.name + "' of " + std::to_string(slot.cache_rows) + " rows for a window of " +
                             std::to_string(window));
    if (std::none_of(rings.begin(), rings.end(), [&](const Ring& r) { return r.window == window && r.rows == slot.cache_rows; }))
      rings.push_back({window, slot.cache_rows});
    return;
  }
  throw std::logic_error("bind: cache '" + slot.name + "' is no layer's");
}

void Engine::Impl::note_written(const StepInputs& inputs) {
  // A ring holds a window and one step's tokens of a sequence (compile_options): no step brings more. Only
  // a step of more tokens than that in all could (a decode step's few tokens are never counted).
  if (inputs.tokens_count > options.prefill_chunk) {
    std::vector<uint32_t> tokens_of_slot(options.sequences, 0);
    for (uint32_t m = 0; m < inputs.tokens_count; ++m)
      if (++tokens_of_slot.at(token_sequence(inputs, m)) > options.prefill_chunk)
        throw std::logic_error("note_written: more than " + std::to_string(options.prefill_chunk) + " tokens of slot " +
                               std::to_string(token_sequence(inputs, m)) + " in one step");
  }
  for (uint32_t m = 0; m < inputs.tokens_count; ++m) {
    const uint32_t slot = token_sequence(inputs, m), at = token_position(inputs, m);
    uint32_t& end = written_end.at(slot);
    if (at == 0) end = 0;  // the slot's sequence starts over: what the rings held before is not its
    end = std::max(end, at + 1);
  }
}

bool Engine::Impl::rings_hold(uint32_t slot, uint32_t at) const {
  const Impl& stepping = rank_engines.empty() ? *this : *rank_engines[0];
  return std::all_of(stepping.rings.begin(), stepping.rings.end(), [&](const Ring& r) {
    return ring_holds_window_before(at, r.window, r.rows, stepping.written_end.at(slot));
  });
}

void Engine::Impl::rewind_after_failure(uint32_t to) { rewind(rings_hold(0, to) ? to : 0); }

void Engine::Impl::rewind(uint32_t to) {
  if (!rings_hold(0, to))  // callers check (Engine::rewind, reuse_prefix) or go back within a step's slack
    throw std::logic_error("rewind: position " + std::to_string(to) + " is gone from the sliding-window rings");
  position = to;
  if (sequence.size() > to) sequence.resize(to);
  for (auto& rank : rank_engines) rank->position = to;
}

Engine::Impl::GreedyToken Engine::Impl::run_greedy(BoundProgram& bound, const std::vector<int32_t>& tokens) {
  if (cuda) {
    const CudaStepResult result = run_cuda(bound, tokens);
    return {result.argmax, result.nonfinite || result.argmax < 0};
  }
  const float* logits = run(bound, tokens, nullptr);
  return {int32_t(std::max_element(logits, logits + info.vocab) - logits), !all_finite(logits)};
}

const float* Engine::Impl::prefill(const std::vector<int32_t>& tokens, double* compile_ms,
                                  const PromptProbabilities* prompt_probabilities) {
  if (tokens.empty()) throw InputError("prefill: no tokens (an empty prompt; --prompt or --prompt-tokens)");
  check_tokens(tokens);  // before compiling anything for it
  const bool every_row = prompt_probabilities != nullptr;
  const float* logits = nullptr;
  for (size_t begin = 0; begin < tokens.size(); begin += options.prefill_chunk) {
    const size_t end = std::min(tokens.size(), begin + options.prefill_chunk);
    const std::vector<int32_t> chunk(tokens.begin() + begin, tokens.begin() + end);
    logits = run_chunk(chunk, every_row, compile_ms);
    if (every_row) {  // row r follows the chunk's token r; the last row is the one the caller samples
      record_prompt_probabilities(*this, *prompt_probabilities->result, logits, uint32_t(chunk.size()), tokens, begin,
                                  prompt_probabilities->k);
      logits += (chunk.size() - 1) * size_t(info.vocab);
    }
  }
  return logits;
}

const float* Engine::Impl::run_chunk(const std::vector<int32_t>& tokens, bool every_row, double* compile_ms) {
  if (tokens.empty() || tokens.size() > options.prefill_chunk)  // the sliding layers' rings hold no more (compile_options)
    throw std::logic_error("run_chunk: " + std::to_string(tokens.size()) + " tokens in one step");
  double chunk_compile_ms = 0;
  const float* logits = nullptr;
  if (rank_engines.empty()) {
    BoundProgram& program = prefill_program(uint32_t(tokens.size()), every_row, &chunk_compile_ms);
    logits = run(program, tokens, nullptr);
  } else {
    check_not_broken();
    const std::vector<BoundProgram*> programs =
        rank_programs(every_row ? StepKind::prompt_prefill : StepKind::prefill, uint32_t(tokens.size()), &chunk_compile_ms);
    on_every_rank([&](Impl& r, uint32_t index) {
      const float* rank_logits = r.run(*programs[index], tokens, nullptr, index == 0);
      if (index == 0) logits = rank_logits;
    });
    end_step_barrier();
    position += uint32_t(tokens.size());
  }
  sequence.insert(sequence.end(), tokens.begin(), tokens.end());
  *compile_ms += chunk_compile_ms;
  return logits;
}

const float* Engine::Impl::decode_step(int32_t token, std::vector<TaskTiming>* trace) {
  if (rank_engines.empty()) {
    const float* logits = run(*decode_program, {token}, trace);
    sequence.push_back(token);
    return logits;
  }
  check_not_broken();
  const float* logits = nullptr;
  on_every_rank([&](Impl& r, uint32_t index) {
    const float* rank_logits = r.run(*r.decode_program, {token}, index == 0 ? trace : nullptr, index == 0);
    if (index == 0) logits = rank_logits;
  });
  end_step_barrier();
  ++position;
  sequence.push_back(token);
  return logits;
}

int32_t Engine::Impl::decode_greedy_step(int32_t token) {
  const uint32_t at = position;
  GreedyToken next;
  if (rank_engines.empty()) {
    next = run_greedy(*decode_program, {token});
  } else {
    check_not_broken();
    on_every_rank([&](Impl& r, uint32_t index) {
      const GreedyToken rank_next = r.run_greedy(*r.decode_program, {token});
      if (index == 0) next = rank_next;
    });
    end_step_barrier();
    ++position;
  }
  sequence.push_back(token);
  if (next.nonfinite) {
    rewind(at);
    throw nonfinite_logits(loaded().origin, at);
  }
  return next.token;
}

void Engine::Impl::check_ranks_agree(const Program& a, uint32_t first_rank, const Program& b, uint32_t other_rank) const {
  // Ranks wait on each other inside collective tasks, so every rank must run them in the same order:
  // the same tasks of the same ops on the same workers (docs/TENSOR_PARALLEL.md).
  bool same = a.tasks.size() == b.tasks.size() && a.queues == b.queues && a.placement == Placement::static_queues;
  for (size_t t = 0; same && t < a.tasks.size(); ++t)
    same = a.tasks[t].op == b.tasks[t].op && a.tasks[t].node == b.tasks[t].node;
  if (!same) refuse_disagreeing_ranks(first_rank, other_rank);
}

void Engine::Impl::refuse_disagreeing_ranks(uint32_t first_rank, uint32_t other_rank) const {
  throw InputError("--tp " + std::to_string(tp) + ": rank " + std::to_string(other_rank) +
                   "'s program runs different tasks or places them differently from rank " + std::to_string(first_rank) +
                   "'s (an FFN or vocabulary share no tile width cuts into as many tiles as the other's); ranks wait "
                   "on each other in their collective tasks, so they must agree: choose a --tp that divides the FFN "
                   "and the vocabulary");
}

void Engine::Impl::setup_barrier(const Program& own) {
  if (!process_group) return;
  RankView view = process_group->view();
  view.timeout_ms = std::max<uint32_t>(view.timeout_ms, 10 * 60 * 1000);
  ++setups;
  // Two digest slots, one per setup in turn: a peer past this barrier may publish its next program's
  // digest before this rank reads this one's, but not the one after (that waits for this rank's next
  // barrier, which comes after the reading). The barrier's release publishes the digest.
  const uint32_t slot = digest_flag + uint32_t(setups % 2);
  const uint64_t digest = placement_digest(own);
  std::atomic_ref<uint64_t>(view.flags[view.rank][slot]).store(digest, std::memory_order_relaxed);
  publish_flag(view, setup_barrier_flag, setups);
  for (uint32_t r = 0; r < view.ranks; ++r)
    if (r != view.rank) wait_flag(view, r, setup_barrier_flag, setups, "start-up barrier (loading and compiling)");
  // Every rank compares with every peer, so each one refuses when any two disagree: none is left waiting.
  for (uint32_t r = 0; r < view.ranks; ++r)
    if (r != view.rank && std::atomic_ref<uint64_t>(view.flags[r][slot]).load(std::memory_order_acquire) != digest)
      refuse_disagreeing_ranks(std::min(r, view.rank), std::max(r, view.rank));
}

void Engine::Impl::check_not_broken() const {
  if (!broken.empty())
    throw TransportError("the tensor-parallel engine stopped after an earlier failure (its ranks may have diverged): " + broken);
}

void Engine::Impl::end_step_barrier() {
  if (!process_group) return;
  const RankView view = process_group->view();
  const uint64_t epoch = rank_engines[0]->epoch;  // the step just run
  publish_flag(view, step_barrier_flag, epoch);
  for (uint32_t r = 0; r < view.ranks; ++r)
    if (r != view.rank) wait_flag(view, r, step_barrier_flag, epoch, "end-of-step barrier");
}

void Engine::Impl::on_every_rank(const std::function<void(Impl&, uint32_t)>& step) {
  std::vector<std::exception_ptr> failures(rank_engines.size());
  const std::function<void(uint32_t)> job = [&](uint32_t r) {
    try {
      step(*rank_engines[r], r);
    } catch (...) {
      failures[r] = std::current_exception();
    }
  };
  if (rank_engines.size() > 1) {
    if (!rank_threads) rank_threads = std::make_unique<RankThreads>(uint32_t(rank_engines.size()));
    rank_threads->run(job);
  } else {
    job(0);
  }
  for (const std::exception_ptr& failure : failures) {
    if (!failure) continue;
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      broken = e.what();  // the ranks' positions and epochs may now differ: no further steps
    } catch (...) {
      broken = "a rank failed";
    }
    std::rethrow_exception(failure);
  }
}

}  // namespace tilefire
