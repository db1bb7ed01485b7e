#pragma once
// The Engine's insides: the loaded model, the executor, the KV cache and the compiled programs.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "graph/compile.h"
#include "graph/weights.h"
#include "megakernel/cpu/cpu_executor.h"
#include "megakernel/cuda/cuda_executor.h"
#include "megakernel/rank_threads.h"
#include "ops/logit_adjustments.h"
#include "ops/splitmix64.h"
#include "scheduler/simulator.h"
#include "tilefire/engine.h"
#include "transport/device_windows.h"
#include "transport/groups.h"
#include "transport/nccl_windows.h"

namespace tilefire {

// The public --granularity choice as the compiler's option.
inline EventGranularity event_granularity(Granularity granularity) {
  switch (granularity) {
    case Granularity::head: return EventGranularity::head;
    case Granularity::op: return EventGranularity::op;
    case Granularity::tile: break;
  }
  return EventGranularity::tile;
}

// 64-byte aligned f32 storage (whole cache lines per tensor, AVX loads never split a line at row 0).
// Zeroed; pages of a large one are committed when first written (engine.cpp).
class AlignedFloats {
 public:
  explicit AlignedFloats(size_t count = 0);
  float* data() { return data_; }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> block_;  // what calloc gave
  float* data_ = nullptr;              // its first 64-byte boundary
  size_t size_ = 0;
};

// A Program bound to this engine's memory. Its activations live in the engine's one arena (every
// activation a step reads is produced in the same step, so programs can share it); when the arena grows,
// the slots are pointed at the new one before the program's next step.
struct BoundProgram {
  Program program;
  std::vector<std::pair<uint32_t, size_t>> activation_offsets;  // (slot, float offset in the arena)
  uint64_t window_bytes = 0;  // tensor parallelism: bytes of the rank's window its window slots use
  size_t activation_floats = 0;
  uint64_t arena_generation = 0;  // the arena the slots point into
  std::unique_ptr<ProgramInstance> instance;  // cpu backend
  CudaProgramPtr cuda_program;                 // cuda backend
  DeviceBuffer device_constants;               // cuda: Program::constants on the device
  const float* logits = nullptr;  // [logit_rows, vocab] the lm_head output of the last step (device memory on cuda)
  uint32_t logit_rows = 1;        // 1, or every token's (a batched decode, a prefill for a prompt's logprobs)
  double compile_ms = 0;
  uint64_t last_used = 0;  // for least-recently-used eviction of prefill programs

  BoundProgram() = default;
  BoundProgram(const BoundProgram&) = delete;  // the instance holds a reference to `program`
  BoundProgram& operator=(const BoundProgram&) = delete;
};

// A sequence of continuous batching (Engine::add_sequence, engine_batch.cpp): its request, its slot of
// the KV caches and how far it has come.
struct BatchedSequence {
  GenerateRequest request;
  GenerateResult result;
  uint32_t slot = 0;      // its slot of the KV caches
  uint32_t position = 0;  // tokens its cache holds
  // With EngineOptions::prefill_chunks_per_step: its prompt is still being prefilled (up to `position`).
  bool prefilling = false;
  std::chrono::steady_clock::time_point added;  // when add_sequence took it (its time to first token)
  double prefill_compile_ms = 0;                // of its prompt's programs: not part of that time
  int32_t next = -1;      // the last generated token, the next to feed
  uint64_t uniform_state = 0;  // its sampling's draws (UniformGenerator's state)
  TokenCounts counts;          // its prompt and reply, for the request's penalties
  std::vector<int32_t> ending;  // its ending tokens (Engine::Impl::ending_tokens), for min_new_tokens
  bool finished = false;
  double decode_ms = 0;
  uint32_t decode_steps = 0;
  uint32_t decode_tokens = 0;  // tokens its decode steps gave (more than the steps where drafts were taken)
};

// The most rows a step of the engine holds, what the tensor-parallel window is sized for: a prefill chunk,
// or a token of every sequence; with a chunk in the decode step's program (prefill_in_decode_step), both,
// up to 128 (the cuda backend's posted tokens, kMailboxTokens). Drafts and a chunk beside decode rows
// take the room left up to min(this, 128).
inline uint32_t widest_step_rows(const EngineOptions& options) {
  uint32_t widest = std::max(options.prefill_chunk, options.sequences);
  if (options.prefill_in_decode_step && options.prefill_chunks_per_step > 0)
    widest = std::max(widest, std::min(128u, options.prefill_chunk + options.sequences));
  return widest;
}

// Not thread-safe: one Engine runs one step at a time.
struct Engine::Impl {
  // Prompts are prefilled in chunks of EngineOptions::prefill_chunk tokens, at most this many, so a
  // prefill program's activations stay bounded (tokens x layers x (4 hidden + ffn) floats) and a handful
  // of programs serve every length.
  static constexpr uint32_t kMaxPrefillChunk = 128;
  static constexpr size_t kPrefillProgramsKept = 4;
  // Batched programs by width: a batch's width changes as sequences join, finish and (speculating) bring
  // drafts, so the least recently used go past this many.
  static constexpr size_t kBatchProgramsKept = 32;

  LoadedModel model;
  ModelInfo info;
  // Tensor parallelism (docs/TENSOR_PARALLEL.md): the parent engine holds the group
  // and one Impl per rank, an engine of its own for the rank's share (its programs, executor, KV cache).
  // A step runs on every rank at once and the next starts when all have finished, so no rank reuses a
  // window buffer a peer may still read.
  uint32_t tp = 1, rank = 0;
  const LoadedModel* parent_model = nullptr;  // a rank reads the parent's weights
  std::unique_ptr<InProcessGroup> group;       // the parent, ranks as thread groups
  std::unique_ptr<SharedMemoryGroup> process_group;  // the parent, one rank per process (this one's in rank_engines)
  std::unique_ptr<DeviceWindowGroup> device_group;   // the parent, cuda ranks of this process (windows on the GPUs)
  std::unique_ptr<NcclWindowGroup> nccl_group;       // the parent, one cuda rank per process (an NCCL window)
  uint32_t step_barrier_flag = 0;              // one rank per process: the flag slot of the end-of-step barrier
  uint32_t setup_barrier_flag = 0;             // and of the barrier after compiling (loading) programs
  uint64_t setups = 0;                         // barriers passed on setup_barrier_flag
  uint32_t digest_flag = 0;                    // and the first of the two slots of the program digest (setup_barrier)
  std::string broken;                          // a tensor-parallel step failed: the engine refuses further steps
  std::vector<std::unique_ptr<Impl>> rank_engines;  // the parent
  std::unique_ptr<RankThreads> rank_threads;   // the parent, ranks as thread groups: drive ranks 1 ..
  RankView rank_view;                          // a rank: its view of the group's windows and flags
  uint64_t epoch = 0;                          // the collective epoch of the next step
  const LoadedModel& loaded() const { return parent_model ? *parent_model : model; }
  EngineOptions options;
  uint32_t max_context = 0;
  ModelSpec program_spec;  // the model's spec as programs are compiled for the backend (bf16 weights on cuda)
  std::unique_ptr<CpuExecutor> executor;  // cpu backend
  std::unique_ptr<CudaExecutor> cuda;      // cuda backend
  std::map<std::string, DeviceBuffer> device_tensors;  // cuda: weights, f32 vectors and KV caches by slot name
  DeviceBuffer device_arena;                           // cuda: activations
  std::vector<float> host_logits;                      // cuda: the last logits copied back
  std::map<std::string, AlignedFloats> kv_cache;        // by slot name
  std::map<std::string, std::vector<float>> f32_vectors;  // norm weights and biases converted to f32
  std::map<std::string, std::vector<unsigned char>> weight_slices;  // a rank's column slices of matrices
  AlignedFloats arena;                                  // activations of whichever program runs
  uint64_t arena_generation = 0;
  std::unique_ptr<BoundProgram> decode_program;
  // By tokens per step, and whether every token's logits come out (a prompt's logprobs).
  std::map<std::pair<uint32_t, bool>, std::unique_ptr<BoundProgram>> prefill_programs;
  // Batched steps, by tokens per step and the rows the LM head projects (a prompt's chunk before the
  // decoding rows needs its last row only).
  std::map<std::pair<uint32_t, uint32_t>, std::unique_ptr<BoundProgram>> batch_programs;
  std::map<uint64_t, BatchedSequence> batched;  // continuous batching: the sequences added, by id
  // The tokens each free slot's cache holds (the last sequence removed from it), for reuse_prefix; slot 0's
  // are `sequence` (the step API's), so slot_tokens[0] stays empty. Sized EngineOptions::sequences.
  std::vector<std::vector<int32_t>> slot_tokens;
  // Sliding-window layers whose caches are rings of fewer rows than max_context (ops/tile.h,
  // sliding_cache_rows): each distinct window and its rows, as the bound programs' cache slots have them
  // (track_ring). Empty when no cache wraps.
  struct Ring {
    uint32_t window = 0, rows = 0;
  };
  std::vector<Ring> rings;
  // Per cache slot (EngineOptions::sequences of them): the end of the positions steps wrote since the
  // slot's sequence last started at position 0 (note_written), a draft turned down included: what a ring
  // still holds follows from it (rings_hold). Kept by the engines that run steps (a rank's, under tensor
  // parallelism: the group's engine asks rank 0's).
  std::vector<uint32_t> written_end;
  // Adds a cache slot's ring to `rings` when it has fewer rows than max_context (bind, as it allocates it).
  void track_ring(const SlotDesc& slot);
  void note_written(const StepInputs& inputs);
  // Whether every ring of slot `slot` still holds what a token at `position` sees before itself
  // (ring_holds_window_before): a sequence may go back to `position` (a rewind, a cached prefix reused)
  // only then; position 0 always.
  bool rings_hold(uint32_t slot, uint32_t position) const;
  const std::vector<Ring>& rings_of_rank0() const { return rank_engines.empty() ? rings : rank_engines[0]->rings; }
  uint64_t next_sequence_id = 1;
  uint64_t use_clock = 0;
  uint32_t position = 0;
  // The tokens whose K and V the cache holds, in order: after every step sequence.size() == position
  // (rank engines of a tensor-parallel group keep only their position; the group's engine keeps this).
  std::vector<int32_t> sequence;
  Schedule schedule = Schedule::dataflow;
  std::unique_ptr<Engine> draft_engine;  // speculative decoding's draft model (EngineOptions::draft), or none
  bool generating = false;  // Engine::generate is running (its on_token callback may try to call in again)

  uint32_t workers() const { return cuda ? cuda->workers() : executor->workers(); }
  // This engine's cuda executor, or its rank 0's under tensor parallelism; null on the cpu backend.
  const CudaExecutor* first_cuda_executor() const {
    if (cuda) return cuda.get();
    return rank_engines.empty() ? nullptr : rank_engines[0]->cuda.get();
  }
  CompileOptions compile_options(uint32_t tokens) const;
  std::unique_ptr<BoundProgram> bind(Program program, double compile_ms);
  void* device_slot(const SlotDesc& slot);  // cuda: the device memory of a weight, vector or cache slot
  void grow_arena(size_t floats);            // the activation arena (host or device) holds at least this
  float* arena_floats();
  BoundProgram& prefill_program(uint32_t tokens, bool prompt_logits, double* compile_ms);
  // generate()'s checks of a request (its prompt, sampling, logprobs and stop tokens): InputError naming
  // what is wrong.
  void check_request(const GenerateRequest& request) const;
  // Whether `token` ends the request's generation (an eos token it stops at, or one of its stop tokens).
  bool ends_request(const GenerateRequest& request, int32_t token) const;
  // The tokens that end the request's generation (the eos tokens it stops at and its stop tokens): what
  // min_new_tokens keeps from being chosen.
  std::vector<int32_t> ending_tokens(const GenerateRequest& request) const;
  // Throws InputError unless `tokens` are in the vocabulary and fit the context after `position`.
  void check_tokens(const std::vector<int32_t>& tokens) const;
  // The first half of that: every token in the vocabulary.
  void check_vocabulary(const std::vector<int32_t>& tokens) const;
  // Runs one step of `bound` on `tokens` at the current position; returns the logits (host memory). On
  // cuda, without `want_logits` nothing is copied back and it returns null (tensor-parallel ranks of
  // one process after the first: every rank holds the same gathered logits).
  const float* run(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace,
                   bool want_logits = true);
  // Checks the tokens and points the program at the current arena; the step's inputs.
  StepInputs prepare_step(BoundProgram& bound, const std::vector<int32_t>& tokens);
  // Points the program's activation slots at the current arena (it may have grown since the last step).
  void point_at_arena(BoundProgram& bound);
  // Steps of several sequences (engine_batch.cpp): one step of `bound` on inputs that name each token's
  // sequence slot and position; `position` and `sequence` (slot 0's step-API state) are the caller's to
  // keep. Returns the logits, [rows, vocab] (on cuda without `want_logits`: nothing copied back, null).
  // With `trace`, every task's timing is appended to it.
  const float* run_sequences(BoundProgram& bound, StepInputs inputs, bool want_logits = true,
                             std::vector<TaskTiming>* trace = nullptr);
  // The batched program of `tokens` rows, each at its own position and slot, whose LM head projects the
  // last `logit_rows` (compiled on first use; sets *compile_ms).
  BoundProgram& batch_program(uint32_t tokens, uint32_t logit_rows, double* compile_ms);
  // The programs a step of sequences runs: the decode program (one token), a batched step of `tokens`
  // rows (logits for the last `logit_rows`, 0: every row), or a prefill chunk of `tokens` prompt tokens
  // (with every token's logits: prompt_prefill).
  enum class StepKind { decode, batched_decode, prefill, prompt_prefill };
  BoundProgram& program_of(StepKind kind, uint32_t tokens, double* compile_ms, uint32_t logit_rows = 0);
  // Every rank's program of that kind (compiled on first use, then every rank past the start-up barrier
  // and checked to agree); *compile_ms is rank 0's compile time.
  std::vector<BoundProgram*> rank_programs(StepKind kind, uint32_t tokens, double* compile_ms, uint32_t logit_rows = 0);
  // run_sequences on this engine or on every rank of its tensor-parallel group, on its program of `kind`.
  struct SequencesStep {
    const float* logits = nullptr;           // [rows, vocab], rank 0's (every rank gathers the same)
    const BoundProgram* program = nullptr;   // the program that ran (rank 0's)
    double compile_ms = 0;                   // compiling it, when this step was its first
    double run_ms = 0;                       // the step itself
  };
  // With `trace`, the step's timeline (rank 0's) is appended to it.
  SequencesStep step_of_sequences(StepKind kind, const StepInputs& inputs, std::vector<TaskTiming>* trace = nullptr,
                                  uint32_t logit_rows = 0);
  CudaStepResult run_cuda(BoundProgram& bound, const std::vector<int32_t>& tokens, std::vector<TaskTiming>* trace = nullptr);
  // A step whose result is only the greedy token (on cuda: reduced on the device, no logits copied), and
  // whether the logits held NaN or Inf. Not checked here: under tensor parallelism a rank that threw
  // would mark the engine broken, though every rank saw the same logits.
  struct GreedyToken {
    int32_t token = -1;
    bool nonfinite = false;
  };
  GreedyToken run_greedy(BoundProgram& bound, const std::vector<int32_t>& tokens);
  // Throws an InputError naming the position when a logit of the token at `at` is NaN or infinite: the
  // weights hold non-finite values, and no answer drawn from such logits is right.
  void check_finite_logits(const float* logits, uint32_t at) const;
  bool all_finite(const float* logits) const;  // no NaN or Inf among the vocabulary's logits
  // Sets the sequence's position (every rank's): 0 starts a new sequence; a call that throws after its
  // step ran goes back to where it began, so the sequence is as it was (the KV entries past the
  // position are overwritten by the next step). Where the sliding layers' rings no longer hold what
  // `to` needs (rings_hold) it is a logic_error: callers check first, or go back by no more than one step's
  // tokens, which a ring's slack keeps. After a failure, rewind_after_failure: a prefill that failed past
  // what a ring held before it starts the sequence over at 0 instead.
  void rewind(uint32_t to);
  void rewind_after_failure(uint32_t to);
  // Copies positions [0, end) of every layer's K and V cache from one sequence slot to another (every
  // rank's share): a sequence that begins with what another slot holds starts from it instead of
  // prefilling it (engine_batch.cpp). The slots must differ.
  void copy_cache_positions(uint32_t from_slot, uint32_t to_slot, uint32_t end);
  // The whole prompt, chunk by chunk; returns the last token's logits. Adds compile time to *compile_ms.
  // With `prompt_probabilities` (a request's prompt_logprobs, and the result they go to), each token
  // after the first gets its probability after those before it.
  struct PromptProbabilities {
    uint32_t k = 0;
    GenerateResult* result = nullptr;
  };
  const float* prefill(const std::vector<int32_t>& tokens, double* compile_ms, const PromptProbabilities* prompt_probabilities = nullptr);
  // One step of `tokens` (at most kMaxPrefillChunk) at the current position on a prefill program (every
  // rank's): the last token's logits, or with `every_row` every token's ([tokens, vocab], row r after
  // token r: a prompt's scores, or speculation's check of a draft). Adds compile time to *compile_ms.
  const float* run_chunk(const std::vector<int32_t>& tokens, bool every_row, double* compile_ms);
  // One decode step of `token` on the decode program (every rank's, under tensor parallelism).
  const float* decode_step(int32_t token, std::vector<TaskTiming>* trace);
  // Throws InputError (the position unchanged) when the step's logits hold NaN or Inf.
  int32_t decode_greedy_step(int32_t token);
  const BoundProgram& decode_program_of_rank0() const { return rank_engines.empty() ? *decode_program : *rank_engines[0]->decode_program; }
  // Runs step(rank engine, rank) on every rank at once, rank 0 on the calling thread; rethrows the first
  // failure after all have returned.
  void on_every_rank(const std::function<void(Impl&, uint32_t)>& step);
  // One rank per process: every rank has finished the step before any starts the next, so a window
  // buffer is never rewritten while a peer may still read it (threads get this from joining).
  void end_step_barrier();
  // One rank per process, after the engine is built or a new program compiled: waits (up to ten minutes)
  // until every rank is there, so one rank's load and compile time never counts against another's
  // collective timeout. Each rank publishes the placement digest of its new program (`own`) with it, and
  // checks every peer's against its own, as check_ranks_agree checks ranks in one process.
  void setup_barrier(const Program& own);
  // A rank's engine (the parent's options, context and model; its own programs, executor and cache),
  // seeing the group through `view`.
  std::unique_ptr<Impl> make_rank(uint32_t rank, const RankView& view) const;
  // One rank per process: checks what each process must check alone (the rank count) and returns the
  // key of everything a rank's programs follow from, which every peer must share.
  // `backend_workers` names the backend and its worker count.
  uint64_t process_rank_key(const Bootstrap& boot, const std::string& backend_workers) const;
  // Throws if an earlier tensor-parallel step failed (ranks may have diverged since).
  void check_not_broken() const;
  // Whether this process writes what a step makes (a trace): with ranks as processes, rank 0's alone
  // (every rank runs the same steps).
  bool writes_files() const { return !process_group || rank_engines[0]->rank == 0; }
  // Throws InputError unless rank `other_rank`'s program runs the same tasks on the same workers as rank
  // `first_rank`'s.
  void check_ranks_agree(const Program& first, uint32_t first_rank, const Program& other, uint32_t other_rank) const;
  // check_ranks_agree's refusal, naming the ranks.
  [[noreturn]] void refuse_disagreeing_ranks(uint32_t first_rank, uint32_t other_rank) const;
};

// Seeded uniform draws in [0, 1), the same sequence on every platform (sampling).
class UniformGenerator {
 public:
  explicit UniformGenerator(uint64_t seed) : state_(seed) {}
  float next() { return float(splitmix64_next(state_) >> 40) * (1.0f / 16777216.0f); }  // 24 bits: exact, below 1
  uint64_t state() const { return state_; }

 private:
  uint64_t state_;
};

// Throws InputError naming `call` while generate() or generate_batch() runs (a call from a request's
// on_token or stop_when would move a sequence under it).
void refuse_while_generating(const Engine::Impl& m, const char* call);
// Throws InputError naming `call` while sequences added by add_sequence are in (they hold the KV cache's
// slots, the step API's first among them).
void refuse_while_batching(const Engine::Impl& m, const char* call);
// Marks the engine as generating for the scope's life.
struct GeneratingScope {
  Engine::Impl& m;
  explicit GeneratingScope(Engine::Impl& engine) : m(engine) { m.generating = true; }
  ~GeneratingScope() { m.generating = false; }
};

// Milliseconds since `start` on the steady clock.
double ms_since(std::chrono::steady_clock::time_point start);

// GenerateRequest::logprobs: the k most probable tokens of `logits` and the probability of `token`, the
// one sampled from them, appended to `result` (its logprobs and token_probabilities).
void record_probabilities(GenerateResult& result, const float* logits, uint32_t vocab, uint32_t k, int32_t token);
// A prefill chunk's rows of logits ([rows, vocab], row r after the chunk's token r) for a prompt's
// logprobs: each of `tokens[begin + r + 1]` that the prompt holds gets its probability and the k most
// probable (GenerateResult::prompt_token_probabilities, prompt_logprobs). Non-finite rows are an InputError.
void record_prompt_probabilities(const Engine::Impl& m, GenerateResult& result, const float* logits, uint32_t rows,
                                 const std::vector<int32_t>& tokens, size_t begin, uint32_t k);

// A sequence's next token from its (checked) logits: the request's logit bias and penalties over what
// `counts` holds (on a copy), then its sampling with the draw `uniform01`; the token joins `counts`.
// `banned` (min_new_tokens' ending tokens while too few are generated) are not chosen, nor, when the
// request constrains its reply (GenerateRequest::allowed_tokens), the tokens it does not allow after
// `generated`; InputError when that leaves none.
int32_t choose_token(const float* logits, uint32_t vocab, const GenerateRequest& request, const std::vector<int32_t>& generated,
                     TokenCounts& counts, float uniform01, const std::vector<int32_t>& banned = {});
// Whether a request's choice needs its logits on the host: anything but a greedy argmax of the raw logits.
bool needs_logits(const GenerateRequest& request);

// Writes a Chrome trace / Perfetto JSON: one row per worker, one slice per task named by op and tile.
void write_chrome_trace(const std::string& path, const Program& program, const std::vector<TaskTiming>& timings);
// The tasks of such a trace (times in ns from its origin), each checked against `program`'s task of the
// same index by name (op, layer, tile): InputError, naming the first that differs, when the trace was
// not taken of this program.
std::vector<SimulatedTask> read_chrome_trace(const std::string& path, const Program& program);

}  // namespace tilefire
