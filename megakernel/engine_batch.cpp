// Batched decoding: Engine::add_sequence / step_sequences / remove_sequence (continuous batching) and
// Engine::generate_batch on top of them (docs/ARCHITECTURE.md, "Batched decoding").
//
// Each sequence gets a slot of the KV caches (graph/compile.h, CompileOptions::sequences): its prompt is
// prefilled there chunk by chunk, by the prefill programs every request shares, and its decode tokens go
// through a batched program of as many tokens as there are unfinished sequences (compiled once per
// width; ops read each token's position and slot from the step's inputs, ops/tile.h). The LM head of a
// batched step projects every token's row, so its weights, like every other matrix's, stream once for
// all the sequences.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "megakernel/engine_impl.h"
#include "megakernel/speculation.h"
#include "ops/sampling.h"
#include "ops/tile.h"  // kv_cache_row

namespace tilefire {

namespace {

std::string request_name(size_t index) { return "request " + std::to_string(index) + ": "; }

BatchedSequence& sequence_of(Engine::Impl& m, uint64_t id, const char* call) {
  auto it = m.batched.find(id);
  if (it == m.batched.end())
    throw InputError(std::string("Engine::") + call + ": no sequence " + std::to_string(id) + " (never added, or removed)");
  return it->second;
}

std::string sequence_name(uint64_t id) { return "sequence " + std::to_string(id) + ": "; }

// Takes the next token of sequence `id`, `s`, from its (checked) logits: samples it, records it, decides
// whether the sequence is done and calls the request's callbacks.
void take_token(Engine::Impl& m, uint64_t id, BatchedSequence& s, const float* logits) {
  const GenerateRequest& request = s.request;
  GenerateResult& result = s.result;
  const uint32_t vocab = m.info.vocab;
  UniformGenerator uniform(s.uniform_state);
  const bool too_few = result.tokens.size() < request.min_new_tokens;
  // Its constraint (GenerateRequest::allowed_tokens) may leave nothing to choose, or throw: the step has
  // already moved the sequence to this token, which it cannot take, so it is finished (no step feeds it
  // again) and the caller removes it; the others go on. Bad input names the sequence.
  const auto unchosen = [&] {
    s.finished = true;
    result.finish_reason = "stopped";
  };
  try {
    s.next = choose_token(logits, vocab, request, result.tokens, s.counts, uniform.next(),
                          too_few ? s.ending : std::vector<int32_t>{});
  } catch (const InputError& e) {
    unchosen();
    throw SequenceError(id, sequence_name(id) + e.what());
  } catch (...) {
    unchosen();
    throw;
  }
  s.uniform_state = uniform.state();
  if (request.logprobs) record_probabilities(result, logits, vocab, request.logprobs, s.next);
  result.tokens.push_back(s.next);
  // generate()'s order of reasons: eos, stopped, length, context; the callbacks see the token first.
  const bool eos = m.ends_request(request, s.next);
  const bool length = result.tokens.size() >= request.max_new_tokens, context = s.position >= m.max_context;
  if (eos || length || context) {
    s.finished = true;
    result.finish_reason = eos ? "eos" : length ? "length" : "context";
  }
  if (request.logprobs && request.on_probabilities) request.on_probabilities(result.token_probabilities.back(), result.logprobs.back());
  if (request.on_token) request.on_token(s.next);
  if (request.stop_when && request.stop_when(result.tokens)) {
    if (!eos) result.finish_reason = "stopped";
    s.finished = true;
  }
}


// A sequence of max_new_tokens 0 (its prompt's logprobs asked for) ends once its prompt is prefilled.
void end_scored_prompt(BatchedSequence& s) {
  s.finished = true;
  s.result.finish_reason = "length";
  s.result.ttft_ms = ms_since(s.added) - s.prefill_compile_ms;
}

// Prefills the next chunk of `s`'s prompt into its slot (from s.position) and returns its logits: those of
// the prompt's last token when the chunk ends the prompt. s.position moves past the chunk. With the
// request's prompt_logprobs, every row is scored (InputError on a non-finite one: s.position and the
// result stay as they were).
const float* prefill_next_chunk(Engine::Impl& m, BatchedSequence& s) {
  const std::vector<int32_t>& prompt = s.request.prompt;
  const uint32_t begin = s.position, end = uint32_t(std::min<size_t>(prompt.size(), begin + m.options.prefill_chunk));
  StepInputs inputs{prompt.data() + begin, end - begin, begin};
  inputs.sequence0 = s.slot;
  const uint32_t k = s.request.prompt_logprobs;
  const Engine::Impl::SequencesStep step =
      m.step_of_sequences(k ? Engine::Impl::StepKind::prompt_prefill : Engine::Impl::StepKind::prefill, inputs);
  s.prefill_compile_ms += step.compile_ms;
  s.result.compile_ms += step.compile_ms;
  const float* logits = step.logits;
  if (k) {
    const size_t scored = s.result.prompt_logprobs.size();
    try {
      record_prompt_probabilities(m, s.result, logits, end - begin, prompt, begin, k);
    } catch (...) {
      s.result.prompt_logprobs.resize(scored);
      s.result.prompt_token_probabilities.resize(scored);
      throw;
    }
    logits += size_t(end - begin - 1) * m.info.vocab;  // the chunk's last row
  }
  s.position = end;
  return logits;
}

// A batched step checks drafts by prompt lookup (each sequence's rows in it); a draft model drafts for one
// sequence at a time, and a trace records a decode step, which such a step is not.
void check_batched_speculation(const Engine::Impl& m, const GenerateRequest& request) {
  const Speculation& speculation = request.speculation;
  if (!speculation.draft_tokens) return;
  check_speculation(speculation, m.options.prefill_chunk, m.draft_engine != nullptr);
  if (speculation.source == DraftSource::draft_model)
    throw InputError("GenerateRequest::speculation: a draft model (--draft-model) drafts for Engine::generate alone, one "
                     "sequence at a time; in a batch (generate_batch, add_sequence, serve --sequences) drafts come by "
                     "prompt lookup");
  if (!request.trace_path.empty())
    throw InputError("--trace records a decode step, and with --speculate (GenerateRequest::speculation) the steps check "
                     "drafts instead: give one of them");
}

// The tokens a sequence's slot holds: its prompt and reply up to its position (a prompt still being
// prefilled: the part that is in).
std::vector<int32_t> cached_tokens(const BatchedSequence& s) {
  const std::vector<int32_t>& prompt = s.request.prompt;
  std::vector<int32_t> cached(prompt.begin(), prompt.begin() + std::min<size_t>(s.position, prompt.size()));
  if (s.position > prompt.size()) cached.insert(cached.end(), s.result.tokens.begin(), s.result.tokens.begin() + (s.position - prompt.size()));
  return cached;
}

// How many of `prompt`'s first tokens `cached` begins with, all but the prompt's last at most (its logits
// give the first new token, so it is always run).
uint32_t usable_prefix(const std::vector<int32_t>& cached, const std::vector<int32_t>& prompt) {
  uint32_t match = 0;
  while (match < cached.size() && match + 1 < prompt.size() && cached[match] == prompt[match]) ++match;
  return match;
}

// The same for what a sequence's slot holds (cached_tokens), read in place.
uint32_t usable_prefix(const BatchedSequence& s, const std::vector<int32_t>& prompt) {
  const std::vector<int32_t>& own = s.request.prompt;
  uint32_t match = 0;
  while (match < s.position && match + 1 < prompt.size() &&
         (match < own.size() ? own[match] : s.result.tokens[match - own.size()]) == prompt[match])
    ++match;
  return match;
}

// Whether a request may start from what a cache slot holds: reuse_prefix, and no prompt to score (that
// needs every position's logits).
bool reuses_prefix(const GenerateRequest& request) { return request.reuse_prefix && request.prompt_logprobs == 0; }

// The slot other than `own` whose cache begins `prompt` with the most tokens (usable_prefix), and how
// many: a sequence's that is in (up to its position), or a free slot's (the last sequence removed from it).
struct CachedPrefix {
  uint32_t slot = 0;
  uint32_t tokens = 0;
};
CachedPrefix longest_cached_prefix(const Engine::Impl& m, const std::vector<int32_t>& prompt, uint32_t own) {
  CachedPrefix best;
  std::vector<bool> taken(m.options.sequences, false);
  auto consider = [&](uint32_t slot, uint32_t match) {
    if (slot != own && match > best.tokens && m.rings_hold(slot, match)) best = {slot, match};
  };
  for (const auto& [id, s] : m.batched) {
    taken[s.slot] = true;
    consider(s.slot, usable_prefix(s, prompt));
  }
  for (uint32_t slot = 0; slot < m.options.sequences; ++slot)
    if (!taken[slot]) consider(slot, usable_prefix(slot == 0 ? m.sequence : m.slot_tokens[slot], prompt));
  return best;
}

// With the request's reuse_prefix: when another slot holds more of `s`'s prompt than its own cache does
// (s.position), copies those positions into its slot, so they are not prefilled again (several choices of
// one prompt, requests that share a system prompt). What the copy holds is what the other slot's
// sequence computed: bitwise what this one would get reusing that slot once it is free.
void copy_longer_prefix(Engine::Impl& m, BatchedSequence& s) {
  if (!reuses_prefix(s.request)) return;
  const CachedPrefix source = longest_cached_prefix(m, s.request.prompt, s.slot);
  if (source.tokens <= s.position) return;
  m.copy_cache_positions(source.slot, s.slot, source.tokens);
  s.result.reused_tokens += source.tokens - s.position;
  s.position = source.tokens;
}
}  // namespace

void Engine::Impl::copy_cache_positions(uint32_t from_slot, uint32_t to_slot, uint32_t end) {
  if (from_slot == to_slot || from_slot >= options.sequences || to_slot >= options.sequences || end > max_context)
    throw std::logic_error("copy_cache_positions: slots " + std::to_string(from_slot) + " and " + std::to_string(to_slot) + ", " +
                           std::to_string(end) + " positions");
  if (!rank_engines.empty()) {  // each rank copies its share of the heads
    check_not_broken();
    on_every_rank([&](Impl& rank, uint32_t) { rank.copy_cache_positions(from_slot, to_slot, end); });
    return;
  }
  std::vector<CudaExecutor::DeviceCopy> device_copies;
  for (const SlotDesc& slot : decode_program->program.slots) {
    if (slot.kind != SlotKind::kv_cache) continue;
    // [sequences, kv_heads, cache_rows, head_dim]: a slot's rows of one head are one run of floats. A
    // sliding window's ring of fewer rows than `end` holds the last of them, wherever it has wrapped to:
    // all of it is copied (ring_holds_window_before says whether those are the ones the copy needs).
    const uint64_t rows_per_head = uint64_t(options.sequences) * slot.cache_rows;
    if (slot.cache_rows == 0 || slot.rows % rows_per_head != 0)
      throw std::logic_error("copy_cache_positions: cache '" + slot.name + "' of " + std::to_string(slot.rows) + " rows");
    const uint32_t kv_heads = uint32_t(slot.rows / rows_per_head);
    float* cache = cuda ? static_cast<float*>(device_slot(slot)) : kv_cache.at(slot.name).data();
    float* to = cache + kv_cache_row(to_slot, 0, 0, kv_heads, slot.cache_rows) * slot.cols;
    const float* from = cache + kv_cache_row(from_slot, 0, 0, kv_heads, slot.cache_rows) * slot.cols;
    const size_t copied_rows = std::min<size_t>(end, slot.cache_rows);
    const size_t bytes = copied_rows * slot.cols * sizeof(float), pitch = size_t(slot.cache_rows) * slot.cols;  // pitch in floats
    if (cuda) {
      device_copies.push_back({to, from, bytes, kv_heads, pitch * sizeof(float)});
      continue;
    }
    for (uint32_t head = 0; head < kv_heads; ++head) std::memcpy(to + head * pitch, from + head * pitch, bytes);
  }
  if (cuda) cuda->copy_within(device_copies);
  written_end.at(to_slot) = written_end.at(from_slot);  // the rings now hold what the source's hold
}

void refuse_while_batching(const Engine::Impl& m, const char* call) {
  if (!m.batched.empty())
    throw InputError(std::string("Engine::") + call + " was called while " + std::to_string(m.batched.size()) +
                     " sequence(s) added by add_sequence are in: they hold the KV cache's slots (remove_sequence them first)");
}

uint64_t Engine::add_sequence(const GenerateRequest& request) {
  Impl& m = *impl_;
  refuse_while_generating(m, "add_sequence");
  m.check_request(request);
  check_batched_speculation(m, request);
  if (request.max_new_tokens == 0 && request.prompt_logprobs == 0)
    throw InputError("GenerateRequest::max_new_tokens is 0: a sequence must generate a token, or score its prompt (prompt_logprobs)");
  if (m.batched.size() >= m.options.sequences)
    throw InputError("add_sequence: all " + std::to_string(m.options.sequences) +
                     " sequences the engine holds are in (EngineOptions::sequences); remove one first");
  std::vector<bool> taken(m.options.sequences, false);
  for (const auto& [id, s] : m.batched) taken[s.slot] = true;
  auto cached_in_free = [&](uint32_t free_slot) -> const std::vector<int32_t>& {
    return free_slot == 0 ? m.sequence : m.slot_tokens[free_slot];
  };
  // The first free slot; with reuse_prefix the free slot whose cache begins the prompt with the most
  // tokens (all but the prompt's last at most: its logits give the first new token).
  uint32_t slot = uint32_t(std::find(taken.begin(), taken.end(), false) - taken.begin()), kept = 0;
  if (reuses_prefix(request)) {
    for (uint32_t candidate = 0; candidate < m.options.sequences; ++candidate) {
      if (taken[candidate]) continue;
      const uint32_t match = usable_prefix(cached_in_free(candidate), request.prompt);
      if (match > kept && m.rings_hold(candidate, match)) slot = candidate, kept = match;  // what a ring has moved past is gone
    }
    // A sequence that is in holds more of it: the prefix is copied from there (copy_longer_prefix below),
    // into the free slot that has the least to lose (the fewest cached tokens), so what the others hold
    // stays for later requests.
    if (longest_cached_prefix(m, request.prompt, m.options.sequences).tokens > kept) {
      for (uint32_t candidate = 0; candidate < m.options.sequences; ++candidate)
        if (!taken[candidate] && cached_in_free(candidate).size() < cached_in_free(slot).size()) slot = candidate;
      kept = 0;
    }
  }

  const uint64_t id = m.next_sequence_id++;
  BatchedSequence s;
  s.request = request;
  s.slot = slot;
  s.uniform_state = request.sampling.seed;
  s.counts = TokenCounts(request.prompt);
  s.ending = m.ending_tokens(request);
  s.result.prompt_tokens = request.prompt;
  s.result.compile_ms = m.decode_program_of_rank0().compile_ms;
  s.result.tasks_per_step = uint32_t(m.decode_program_of_rank0().program.tasks.size());
  s.result.events_per_step = uint32_t(m.decode_program_of_rank0().program.events.size());
  s.result.reused_tokens = kept;
  // The slot's cache past `kept` is about to be written: what it held is known no more.
  if (slot == 0) m.rewind(kept);  // the step API's sequence lived in slot 0
  else m.slot_tokens[slot].resize(kept);

  s.position = kept;
  s.added = std::chrono::steady_clock::now();
  copy_longer_prefix(m, s);  // a sequence that is in may hold more of the prompt than any free slot
  if (slot != 0) m.slot_tokens[slot].assign(request.prompt.begin(), request.prompt.begin() + s.position);
  if (m.options.prefill_chunks_per_step > 0) {  // the steps prefill it
    s.prefilling = true;
    m.batched.emplace(id, std::move(s));
    return id;
  }

  GeneratingScope generating_scope(m);  // the callbacks may not call in
  const float* logits = nullptr;
  while (s.position < request.prompt.size()) logits = prefill_next_chunk(m, s);
  m.check_finite_logits(logits, s.position - 1);  // nothing added yet: the slot stays free
  if (request.max_new_tokens == 0) {  // its prompt scored, nothing to generate
    end_scored_prompt(s);
    m.batched.emplace(id, std::move(s));
    return id;
  }
  BatchedSequence& added = m.batched.emplace(id, std::move(s)).first->second;
  try {
    take_token(m, id, added, logits);
  } catch (const SequenceError& e) {  // its constraint: the caller never learns its id, so no id is named
    m.batched.erase(id);
    throw InputError(std::string(e.what()).substr(sequence_name(id).size()));
  } catch (...) {  // from its callbacks: the caller never learns its id, so it is taken out again
    m.batched.erase(id);
    throw;
  }
  added.result.ttft_ms = ms_since(added.added) - added.prefill_compile_ms;
  return id;
}

namespace {

// A sequence's draft for this step (GenerateRequest::speculation, by prompt lookup over its prompt and
// reply), at most `room` tokens: none for its last token (a plain row gives it for less), none where the
// context has no room for the check.
std::vector<int32_t> batched_draft(const Engine::Impl& m, const BatchedSequence& s, uint32_t room) {
  const Speculation& speculation = s.request.speculation;
  const uint32_t remaining = s.request.max_new_tokens - uint32_t(s.result.tokens.size());
  const uint32_t count = std::min(speculation.draft_tokens, room);
  if (count == 0 || remaining <= 1 || s.position + count + 1 > m.max_context) return {};
  std::vector<int32_t> history = s.request.prompt;  // the prompt and the reply, its last token not yet fed
  history.insert(history.end(), s.result.tokens.begin(), s.result.tokens.end());
  return prompt_lookup_draft(history, count, speculation.min_ngram, speculation.max_ngram);
}

// A prompt's chunk that runs in the decode step's program (EngineOptions::prefill_in_decode_step): rows
// begin .. end of its sequence's prompt, the step's first rows.
struct ChunkInStep {
  uint64_t id = 0;
  BatchedSequence* s = nullptr;  // null: none
  uint32_t begin = 0, end = 0;
};

// The chunk a decode step takes: the next of the first sequence still prefilling (the order prefill_some
// keeps), at most `room` tokens, after it has copied what another slot holds of its prompt. None (the
// chunk runs apart, in prefill_some) when its prompt is scored (every row's logits: a program of its
// own); when the room would cut it below half of itself (many sequences decoding: at least twice the
// steps to its first token); and on the cpu with kv_splits forced above 1, which splits a batched
// program's attention but never a prefill's, so the rows would not be bitwise its prefill's.
ChunkInStep chunk_for_decode_step(Engine::Impl& m, uint32_t room) {
  if (!m.options.prefill_in_decode_step || m.options.prefill_chunks_per_step == 0 || room == 0) return {};
  if (m.options.backend == Backend::cpu && m.options.kv_splits > 1) return {};
  for (auto& [id, s] : m.batched) {
    if (!s.prefilling) continue;
    if (s.request.prompt_logprobs != 0) return {};
    copy_longer_prefix(m, s);
    const uint32_t whole = std::min(uint32_t(s.request.prompt.size()) - s.position, m.options.prefill_chunk);
    if (2 * room < whole) return {};
    return {id, &s, s.position, s.position + std::min(whole, room)};
  }
  return {};
}

// The end of a sequence's prefill: its first token from the logits of its prompt's last row (or, with
// max_new_tokens 0, its scored prompt ends it).
void end_prefill(Engine::Impl& m, uint64_t id, BatchedSequence& s, const float* logits) {
  s.prefilling = false;
  if (s.request.max_new_tokens == 0) return end_scored_prompt(s);
  s.result.ttft_ms = ms_since(s.added) - s.prefill_compile_ms;
  take_token(m, id, s, logits);
}

// The decode part of a step: the next token of every sequence, together, each followed by its draft when it
// speculates (its next positions in its slot: a check of the draft, in the same step); before them, with
// EngineOptions::prefill_in_decode_step, the next chunk of a prompt being prefilled. Returns whether a
// chunk ran.
bool decode_rows(Engine::Impl& m, const std::vector<BatchedSequence*>& rows, const std::vector<uint64_t>& ids) {
  // The rows whose request asks for a trace of a decode step, and whose warm (second) or last step this
  // is, as generate() picks its traced step: the step's timeline goes to each one's trace_path (a step
  // that traces takes no prompt chunk: its timeline is a decode step's).
  std::vector<BatchedSequence*> tracing;
  for (BatchedSequence* s : rows) {
    const GenerateRequest& request = s->request;
    if (!request.trace_path.empty() && !s->result.trace_written &&
        (s->decode_steps == 1 || s->result.tokens.size() + 1 >= request.max_new_tokens || s->position + 1 >= m.max_context))
      tracing.push_back(s);
  }
  // A step carries at most the widest step the engine was sized for (widest_step_rows: the
  // tensor-parallel window's rows), and at most 128 tokens (the cuda backend's posted tokens). A prompt's
  // chunk takes what the decode rows leave (its length cut to fit: with the default chunk of 128, by the
  // decode rows), and the room left for drafts is shared evenly among the sequences still to come.
  const uint32_t widest = std::min(Engine::Impl::kMaxPrefillChunk, widest_step_rows(m.options));
  uint32_t room = widest > rows.size() ? widest - uint32_t(rows.size()) : 0;
  const ChunkInStep chunk = tracing.empty() ? chunk_for_decode_step(m, room) : ChunkInStep{};
  std::vector<int32_t> tokens;
  std::vector<uint32_t> positions, slots;
  if (chunk.s) {
    for (uint32_t p = chunk.begin; p < chunk.end; ++p) {
      tokens.push_back(chunk.s->request.prompt[p]);
      positions.push_back(p);
      slots.push_back(chunk.s->slot);
    }
    room -= chunk.end - chunk.begin;
  }
  // Sequence j's rows are first[j] .. first[j + 1]: its next token, then its draft.
  std::vector<uint32_t> first;
  for (size_t j = 0; j < rows.size(); ++j) {
    BatchedSequence* s = rows[j];
    first.push_back(uint32_t(tokens.size()));
    std::vector<int32_t> draft = batched_draft(m, *s, room / uint32_t(rows.size() - j));
    room -= uint32_t(draft.size());
    draft.insert(draft.begin(), s->next);
    for (uint32_t i = 0; i < draft.size(); ++i) {
      tokens.push_back(draft[i]);
      positions.push_back(s->position + i);
      slots.push_back(s->slot);
    }
  }
  first.push_back(uint32_t(tokens.size()));
  const uint32_t width = uint32_t(tokens.size());
  StepInputs inputs{tokens.data(), width, 0};
  if (width == 1) {
    inputs.position0 = positions[0];
    inputs.sequence0 = slots[0];
  } else {
    inputs.positions = positions.data();
    inputs.sequences = slots.data();
  }
  // The LM head projects the decode rows and, before them, the chunk's last row (the first token when the
  // chunk ends its prompt): logit row r is the step's row r + logit_base.
  const uint32_t chunk_rows = chunk.end - chunk.begin;
  const uint32_t logit_base = chunk.s ? chunk_rows - 1 : 0;
  std::vector<TaskTiming> timeline;
  GeneratingScope generating_scope(m);
  // One sequence's one token: the decode program (one token, the last row of logits) serves it.
  const Engine::Impl::SequencesStep step =
      m.step_of_sequences(width == 1 ? Engine::Impl::StepKind::decode : Engine::Impl::StepKind::batched_decode, inputs,
                          tracing.empty() ? nullptr : &timeline, width - logit_base);
  const uint32_t vocab = m.info.vocab;
  // The logits of the step's row i (i >= logit_base).
  auto row_logits = [&](uint32_t i) { return step.logits + size_t(i - logit_base) * vocab; };
  const Program& program = step.program->program;
  // Every sequence's first row checked before any is taken: a failed step moves no sequence (the cache
  // entries it wrote past their positions are overwritten by the next step).
  for (size_t j = 0; j < rows.size(); ++j) {
    try {
      m.check_finite_logits(row_logits(first[j]), rows[j]->position);
    } catch (const InputError& e) {
      throw SequenceError(ids[j], sequence_name(ids[j]) + e.what());
    }
  }
  if (chunk.s) {
    chunk.s->prefill_compile_ms += step.compile_ms;
    chunk.s->result.compile_ms += step.compile_ms;
    // A chunk short of its prompt's end is in (a callback throwing below leaves it in); the one that ends
    // it gives the first token after the decode rows have theirs, as prefill_some's would.
    if (chunk.end < chunk.s->request.prompt.size()) chunk.s->position = chunk.end;
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    BatchedSequence& s = *rows[j];
    if (step.compile_ms > 0) s.result.compile_ms += step.compile_ms;
    if (s.result.tokens.size() == 1) {  // its first decode step: the program's size
      s.result.tasks_per_step = uint32_t(program.tasks.size());
      s.result.events_per_step = uint32_t(program.events.size());
    }
    s.decode_ms += step.run_ms;
    ++s.decode_steps;
    // Its rows taken in turn, each token chosen as a decode step would choose it, while the draft agrees.
    // A draft row reads the K and V its earlier rows wrote in this step, and computes what a decode step
    // at its position computes: on the cpu its logits are bitwise that step's, so the reply is plain
    // decoding's. A draft row whose logits are not finite is not taken: the sequence stops before it, and
    // its next step (feeding that row's token) fails as plain decoding's would.
    const uint32_t begin = first[j], count = first[j + 1] - first[j];
    for (uint32_t i = 0;; ++i) {
      ++s.position;
      ++s.decode_tokens;
      take_token(m, ids[j], s, row_logits(begin + i));
      // Row i is compared with the draft's token i + 1 (the last row has none: its token is a bonus).
      if (i + 1 >= count) break;
      const bool agrees = s.next == tokens[begin + i + 1];
      ++s.result.draft_tokens;
      s.result.accepted_tokens += agrees ? 1 : 0;
      if (!agrees || s.finished || !m.all_finite(row_logits(begin + i + 1))) break;
    }
  }
  if (chunk.s && chunk.end == chunk.s->request.prompt.size()) {
    const float* last = row_logits(chunk_rows - 1);
    try {
      m.check_finite_logits(last, chunk.end - 1);
    } catch (const InputError& e) {  // its chunk runs again at the next step
      throw SequenceError(chunk.id, sequence_name(chunk.id) + e.what());
    }
    chunk.s->position = chunk.end;
    end_prefill(m, chunk.id, *chunk.s, last);
  }
  // After every row has its token: a trace that cannot be written fails its own sequence alone. With
  // ranks as processes, rank 0's process writes it.
  if (!m.writes_files()) return chunk.s != nullptr;
  for (BatchedSequence* s : tracing) {
    try {
      write_chrome_trace(s->request.trace_path, program, timeline);
    } catch (const InputError& e) {
      const uint64_t id = ids[size_t(std::find(rows.begin(), rows.end(), s) - rows.begin())];
      throw SequenceError(id, sequence_name(id) + e.what());
    }
    s->result.trace_written = true;
  }
  return chunk.s != nullptr;
}

// The prefill part of a step (EngineOptions::prefill_chunks_per_step, less a chunk the decode step ran):
// the next `chunks` chunks of the prompts being prefilled, in the order their sequences were added; a
// prompt's last chunk gives its first token.
void prefill_some(Engine::Impl& m, uint32_t chunks) {
  for (auto& [id, s] : m.batched) {
    while (s.prefilling && chunks > 0) {
      --chunks;
      // The sequences before it may have prefilled what its prompt begins with since it was added.
      copy_longer_prefix(m, s);
      const uint32_t begin = s.position;
      const size_t scored = s.result.prompt_logprobs.size();
      GeneratingScope generating_scope(m);
      const float* logits = nullptr;
      try {
        logits = prefill_next_chunk(m, s);  // with prompt_logprobs every row is checked
        if (s.position < s.request.prompt.size()) continue;
        m.check_finite_logits(logits, s.position - 1);
      } catch (const InputError& e) {
        s.position = begin;  // its chunk runs again at the next step, and scores its rows again
        s.result.prompt_logprobs.resize(scored);
        s.result.prompt_token_probabilities.resize(scored);
        throw SequenceError(id, sequence_name(id) + e.what());
      }
      end_prefill(m, id, s, logits);
    }
    if (chunks == 0) return;
  }
}

}  // namespace

uint32_t Engine::step_sequences() {
  Impl& m = *impl_;
  refuse_while_generating(m, "step_sequences");
  std::vector<BatchedSequence*> rows;
  std::vector<uint64_t> ids;  // the rows' sequences
  for (auto& [id, s] : m.batched)
    if (!s.finished && !s.prefilling) {
      rows.push_back(&s);
      ids.push_back(id);
    }
  const bool chunk_ran = !rows.empty() && decode_rows(m, rows, ids);
  prefill_some(m, m.options.prefill_chunks_per_step - (chunk_ran ? 1 : 0));
  uint32_t unfinished = 0;
  for (const auto& [id, s] : m.batched) unfinished += s.finished ? 0 : 1;
  return unfinished;
}

bool Engine::sequence_finished(uint64_t id) const { return sequence_of(*impl_, id, "sequence_finished").finished; }

uint32_t Engine::sequences_in() const { return uint32_t(impl_->batched.size()); }

GenerateResult Engine::remove_sequence(uint64_t id) {
  Impl& m = *impl_;
  refuse_while_generating(m, "remove_sequence");
  BatchedSequence& s = sequence_of(m, id, "remove_sequence");
  // The slot's cache keeps the sequence (its prompt and every generated token but the last) for a later
  // request that begins with it (reuse_prefix); slot 0's is the step API's sequence, which continues it.
  std::vector<int32_t> cached = cached_tokens(s);
  GenerateResult result = std::move(s.result);
  if (!s.finished) result.finish_reason = "stopped";
  if (s.slot == 0) {
    m.sequence = std::move(cached);
    m.rewind(s.position);  // every rank's position (the sequence holds that many tokens)
  } else {
    m.slot_tokens[s.slot] = std::move(cached);
  }
  result.decode_steps = s.decode_steps;
  if (s.decode_tokens) {  // per token after the first, as generate() counts it
    result.tpot_ms = s.decode_ms / s.decode_tokens;
    result.decode_tok_s = 1000.0 / result.tpot_ms;
  }
  m.batched.erase(id);
  return result;
}

std::vector<GenerateResult> Engine::generate_batch(const std::vector<GenerateRequest>& requests) {
  Impl& m = *impl_;
  refuse_while_generating(m, "generate_batch");
  refuse_while_batching(m, "generate_batch");
  if (requests.empty()) throw InputError("generate_batch: no requests");
  if (requests.size() > m.options.sequences)
    throw InputError("generate_batch: " + std::to_string(requests.size()) + " requests, but the engine holds " +
                     std::to_string(m.options.sequences) + " sequences at once (EngineOptions::sequences)");
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& request = requests[i];
    try {
      m.check_request(request);
      check_batched_speculation(m, request);
    } catch (const InputError& e) {
      throw InputError("generate_batch: " + request_name(i) + e.what());
    }
  }

  std::vector<GenerateResult> results(requests.size());
  std::vector<uint64_t> ids(requests.size(), 0);  // 0: no sequence (max_new_tokens 0, as generate(): nothing run)
  // On failure every sequence comes out, and the step API's sequence is empty.
  struct RemoveOnFailure {
    Impl& m;
    bool armed = true;
    ~RemoveOnFailure() {
      if (!armed) return;
      m.batched.clear();
      m.rewind(0);
      for (std::vector<int32_t>& cached : m.slot_tokens) cached.clear();
    }
  } remove_on_failure{m};
  auto start = std::chrono::steady_clock::now();
  double compile_before = 0;  // compiling is not part of any request's time to first token
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].prompt_tokens = requests[i].prompt;
    if (requests[i].max_new_tokens == 0 && requests[i].prompt_logprobs == 0) {
      results[i].finish_reason = "length";
      results[i].compile_ms = m.decode_program_of_rank0().compile_ms;
      continue;
    }
    const double waited_ms = ms_since(start);
    try {
      ids[i] = add_sequence(requests[i]);
    } catch (const InputError& e) {
      throw InputError("generate_batch: " + request_name(i) + e.what());
    }
    // ttft_ms counts from the call: the prompts before this one were prefilled first.
    BatchedSequence& s = m.batched.at(ids[i]);
    s.result.ttft_ms += waited_ms - compile_before;
    compile_before += s.result.compile_ms - m.decode_program_of_rank0().compile_ms;
  }
  for (;;) {
    try {
      if (step_sequences() == 0) break;
    } catch (const InputError& e) {
      std::string message = e.what();
      for (size_t i = 0; i < requests.size(); ++i)  // name the request rather than its sequence
        if (ids[i] && message.rfind(sequence_name(ids[i]), 0) == 0)
          message = "generate_batch: " + request_name(i) + message.substr(sequence_name(ids[i]).size());
      throw InputError(message);
    }
  }
  for (size_t i = 0; i < requests.size(); ++i)
    if (ids[i]) results[i] = remove_sequence(ids[i]);  // slot 0's sequence goes on in the step API
  remove_on_failure.armed = false;
  return results;
}

}  // namespace tilefire
