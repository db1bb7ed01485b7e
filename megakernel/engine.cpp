// Engine internals: binding a Program's slots to memory, the prefill program cache, running a step.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "megakernel/engine_impl.h"
#include "scheduler/policy.h"

namespace tilefire {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

AlignedFloats::AlignedFloats(size_t count) : size_(count) {
  if (count == 0) return;
  size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  std::fill_n(static_cast<float*>(p), count, 0.0f);
  data_.reset(static_cast<float*>(p));
}

void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

CompileOptions Engine::Impl::compile_options(uint32_t tokens) const {
  CompileOptions o;
  o.workers = workers();
  o.tokens = tokens;
  o.max_context = max_context;
  o.policy = options.policy.empty() ? std::string(kDefaultPolicy) : options.policy;
  o.granularity = options.granularity == Granularity::op ? EventGranularity::op : EventGranularity::tile;
  return o;
}

namespace {

const TensorView& checkpoint_tensor(const LoadedModel& model, const SlotDesc& slot) {
  const TensorView* t = model.weights.find(slot.name);
  if (!t) throw InputError(model.origin + ": missing tensor '" + slot.name + "'");
  if (t->numel() != slot.rows * slot.cols)
    throw InputError(model.origin + ": tensor '" + slot.name + "' has " + std::to_string(t->numel()) + " elements, expected " +
                     std::to_string(slot.rows * slot.cols));
  return *t;
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

}  // namespace

void* Engine::Impl::device_slot(const SlotDesc& slot) {
  const std::string key = std::to_string(int(slot.kind)) + ":" + slot.name;
  auto it = device_tensors.find(key);
  if (it != device_tensors.end()) return it->second.get();
  DeviceBuffer buffer;
  switch (slot.kind) {
    case SlotKind::weight: {  // bf16 on the device; f32 and f16 checkpoints are rounded once, here
      const TensorView& t = checkpoint_tensor(model, slot);
      if (t.dtype == DType::bf16) {
        buffer = cuda->upload(t.data, t.numel() * 2);
      } else {
        std::vector<uint16_t> converted(t.numel());
        for (size_t k = 0; k < converted.size(); ++k) converted[k] = f32_to_bf16(load_as_f32(t.data, t.dtype, k));
        buffer = cuda->upload(converted.data(), converted.size() * 2);
      }
      break;
    }
    case SlotKind::weight_f32: {
      const std::vector<float> values = finite_f32_values(checkpoint_tensor(model, slot), slot.name);
      buffer = cuda->upload(values.data(), values.size() * sizeof(float));
      break;
    }
    case SlotKind::kv_cache:
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
    if (cuda) {
      slots[i] = device_slot(slot);
      continue;
    }
    switch (slot.kind) {
      case SlotKind::weight: {
        const TensorView& t = checkpoint_tensor(model, slot);
        if (t.dtype != slot.dtype)
          throw InputError(model.origin + ": tensor '" + slot.name + "' is " + std::string(dtype_name(t.dtype)) +
                           ", expected " + std::string(dtype_name(slot.dtype)) + " like the other matrices");
        slots[i] = const_cast<void*>(t.data);
        break;
      }
      case SlotKind::weight_f32: {
        auto it = f32_vectors.find(slot.name);
        if (it == f32_vectors.end())
          it = f32_vectors.emplace(slot.name, finite_f32_values(checkpoint_tensor(model, slot), slot.name)).first;
        slots[i] = it->second.data();
        break;
      }
      case SlotKind::kv_cache: {
        auto it = kv_cache.find(slot.name);
        if (it == kv_cache.end()) it = kv_cache.emplace(slot.name, AlignedFloats(slot.rows * slot.cols)).first;
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

BoundProgram& Engine::Impl::prefill_program(uint32_t tokens, double* compile_ms) {
  *compile_ms = 0;
  auto it = prefill_programs.find(tokens);
  if (it == prefill_programs.end()) {
    if (cuda) cuda->stop_resident_kernel();  // device memory is freed and allocated below
    if (prefill_programs.size() >= kPrefillProgramsKept) {  // evict the least recently used
      auto oldest = prefill_programs.begin();
      for (auto p = prefill_programs.begin(); p != prefill_programs.end(); ++p)
        if (p->second->last_used < oldest->second->last_used) oldest = p;
      prefill_programs.erase(oldest);
    }
    auto start = std::chrono::steady_clock::now();
    Program program = compile_model(program_spec, compile_options(tokens));
    *compile_ms = ms_since(start);
    it = prefill_programs.emplace(tokens, bind(std::move(program), *compile_ms)).first;
  }
  it->second->last_used = ++use_clock;
  return *it->second;
}

void Engine::Impl::check_tokens(const std::vector<int32_t>& tokens) const {
  for (int32_t t : tokens)
    if (t < 0 || uint32_t(t) >= info.vocab)
      throw InputError("token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(info.vocab) + ")");
  if (uint64_t(position) + tokens.size() > max_context)
    throw InputError("the sequence needs " + std::to_string(uint64_t(position) + tokens.size()) +
                     " positions but the context holds " + std::to_string(max_context) + " (see --max-context)");
}

StepInputs Engine::Impl::prepare_step(BoundProgram& bound, const std::vector<int32_t>& tokens) {
  check_tokens(tokens);
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
  return StepInputs{tokens.data(), uint32_t(tokens.size()), position};
}

CudaStepResult Engine::Impl::run_cuda(BoundProgram& bound, const std::vector<int32_t>& tokens) {
  const StepInputs inputs = prepare_step(bound, tokens);
  const CudaStepResult result =
      cuda->run_step(*bound.cuda_program, inputs, schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow);
  position += uint32_t(tokens.size());
  return result;
}

const float* Engine::Impl::run(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace) {
  if (cuda) {
    if (trace) throw InputError("--trace: the cuda backend records no per-task timeline yet (use --backend cpu)");
    run_cuda(bound, tokens);
    host_logits.resize(info.vocab);
    cuda->download(host_logits.data(), bound.logits, info.vocab * sizeof(float));
    return host_logits.data();
  }
  const StepInputs inputs = prepare_step(bound, tokens);
  StepOptions step_options;
  step_options.mode = schedule == Schedule::bsp ? ScheduleMode::bsp : ScheduleMode::dataflow;
  step_options.trace = trace;
  step_options.max_random_delay_us = options.stress_delay_us;
  step_options.delay_seed = options.stress_seed + position;
  executor->run_step(*bound.instance, inputs, step_options);
  position += uint32_t(tokens.size());
  return bound.logits;
}

int32_t Engine::Impl::run_greedy(BoundProgram& bound, const std::vector<int32_t>& tokens) {
  const uint32_t at = position + uint32_t(tokens.size()) - 1;
  auto nonfinite = [&] {
    return InputError(model.origin + ": the model produced NaN logits (or other non-finite values) at position " + std::to_string(at) +
                      "; its weight matrices hold NaN or Inf values");
  };
  if (cuda) {
    const CudaStepResult result = run_cuda(bound, tokens);
    if (result.nonfinite || result.argmax < 0) throw nonfinite();
    return result.argmax;
  }
  const float* logits = run(bound, tokens, nullptr);
  for (uint32_t v = 0; v < info.vocab; ++v)
    if (!std::isfinite(logits[v])) throw nonfinite();
  return int32_t(std::max_element(logits, logits + info.vocab) - logits);
}

const float* Engine::Impl::prefill(const std::vector<int32_t>& tokens, double* compile_ms) {
  if (tokens.empty()) throw InputError("the prompt is empty: give --prompt or --prompt-tokens");
  check_tokens(tokens);  // before compiling anything for it
  const float* logits = nullptr;
  for (size_t begin = 0; begin < tokens.size(); begin += kPrefillChunk) {
    const size_t end = std::min(tokens.size(), begin + kPrefillChunk);
    double chunk_compile_ms = 0;
    BoundProgram& program = prefill_program(uint32_t(end - begin), &chunk_compile_ms);
    *compile_ms += chunk_compile_ms;
    logits = run(program, std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + end), nullptr);
  }
  return logits;
}

}  // namespace tilefire
