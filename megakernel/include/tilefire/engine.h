#pragma once
// Tilefire's C++ API: load a model, compile it into task programs, and generate on the CPU megakernel
// (worker threads) or the CUDA megakernel (one persistent kernel).
//
//   tilefire::EngineOptions options;          // built-in sample model, all cores
//   options.model_dir = "path/to/hf-folder";  // or a Hugging Face checkpoint folder
//   tilefire::Engine engine(options);
//   tilefire::GenerateRequest request;
//   request.prompt = tilefire::byte_tokens("Hello");
//   tilefire::GenerateResult result = engine.generate(request);
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire {

enum class Schedule : uint8_t { dataflow, bsp };
// "dataflow" or "bsp" (the --schedule flag); anything else is an InputError naming the flag.
Schedule parse_schedule(std::string_view text);
enum class Backend : uint8_t { cpu, cuda };
// Events per producer tile, per head-wide band of what a consumer reads, or per op (docs/ARCHITECTURE.md).
enum class Granularity : uint8_t { tile, head, op };
// "tile", "head" or "op" (the --granularity flag); anything else is an InputError naming the flag.
Granularity parse_granularity(std::string_view text);
const char* granularity_name(Granularity granularity);

// A smaller model of the same vocabulary that drafts for speculative decoding (Speculation::source
// draft_model): the engine runs it beside the model, on the same backend and threads, one sequence.
struct DraftModel {
  std::string model_dir;  // a Hugging Face checkpoint folder; empty, with an empty preset: no draft model
  std::string preset;     // or a preset with random weights (`tiny` is the built-in sample)
  std::string preset_dtype = "f32";
  uint64_t preset_seed = 0;
  bool given() const { return !model_dir.empty() || !preset.empty(); }
};

struct EngineOptions {
  std::string model_dir;     // a Hugging Face checkpoint folder; empty: a preset, built in memory
  std::string preset;        // with no model_dir: a preset with random weights; empty: the sample (`tiny`)
  std::string preset_dtype = "f32";  // f32, bf16 or f16 weights for a preset
  uint64_t preset_seed = 0;
  Backend backend = Backend::cpu;
  uint32_t threads = 0;      // cpu: worker threads (all ranks together: threads / tp per rank, at least
                             // one each, so 3 threads for 2 ranks run 2); 0: one per core
  uint32_t tp = 1;           // tensor-parallel ranks: of this process (cpu: thread groups; cuda: executors on the
                             // GPUs), or one rank per process when RANK/WORLD_SIZE/TILEFIRE_RENDEZVOUS or
                             // mpirun's variables say which (cuda: over NCCL)
  uint32_t tp_timeout_ms = 10000;  // a collective waiting longer for a peer stops with a TransportError
  Schedule schedule = Schedule::dataflow;
  std::string policy;  // placement policy: a name placement_policies() lists; empty: the first, balanced
  Granularity granularity = Granularity::tile;
  uint32_t max_context = 0;  // KV cache positions; 0: min(model's max_position_embeddings, 4096)
  // Sequences the KV cache holds at once (max_context positions each, a sliding layer's ring fewer), decoded together by
  // generate_batch (at most 256, 128 on cuda; under tensor parallelism each rank holds its KV heads of
  // every slot).
  // The cache's memory grows with it.
  uint32_t sequences = 1;
  // Continuous batching (add_sequence): 0, add_sequence prefills a prompt whole before it returns, and the
  // sequences already in wait for it; N > 0, add_sequence only takes a slot, and each step_sequences
  // prefills at most N chunks of prefill_chunk prompt tokens (the sequences in the order they were
  // added) after its decode step, so a long prompt delays the others' next token by N chunks at most.
  uint32_t prefill_chunks_per_step = 0;
  // With prefill_chunks_per_step: a step's first chunk runs in the decode step's program, its rows before
  // the decoding sequences' (one pass over the weights for both, as Sarathi-Serve's chunked prefill). A
  // step that takes a chunk holds at most 128 rows: the chunk is cut to what the decode rows leave (127
  // beside one sequence with the default chunk of 128), but never below half of itself (with more
  // sequences decoding it runs apart, whole), and it goes before the drafts of sequences that speculate;
  // the tensor-parallel window grows by a row per sequence. On the cpu every row is computed as a step of
  // its own would compute it, so replies are bitwise those of chunks run as programs of their own after
  // the decode step (false: what benchmarks compare against). A prompt scored with prompt_logprobs (every
  // row's logits) runs in programs of its own either way, and so do all chunks on the cpu with kv_splits
  // above 1 (a batched program's attention would split where a prefill's does not).
  bool prefill_in_decode_step = true;
  // Prompt tokens one prefill step runs (1 to 128): every prompt is prefilled in chunks of this many.
  // Smaller chunks hold the sequences decoding beside a joining prompt up for less per step; larger
  // ones stream the weights fewer times per prompt (docs/BENCHMARKS.md measures both). 128 at most: a
  // step's activations and the cuda backend's posted tokens are bounded by it. On the cpu a sliding-window
  // layer's KV cache keeps its window plus this many positions (a ring; docs/ARCHITECTURE.md).
  uint32_t prefill_chunk = 128;
  // Split-KV attention at decode: each KV head's visible positions in this many chunks (a tile each, then
  // a merge tile per head); 0: automatic: on cuda, split when the heads alone leave SMs idle; on cpu,
  // never (so the logits stay bitwise the same across thread counts); 1: never.
  uint32_t kv_splits = 0;
  uint32_t stress_delay_us = 0;  // testing (cpu): a random delay of up to this before every task (at most 1 s)
  uint64_t stress_seed = 0;
  // The cuda backend (docs/CUDA.md): weights are bf16 on the device (other checkpoints are converted).
  int cuda_device = 0;
  uint32_t cuda_ctas = 0;             // CTAs of the persistent grid; 0: one per SM
  bool cuda_resident = false;         // the kernel stays alive across steps (a doorbell, no launch per step)
  bool cuda_stage_weights = true;     // Hopper: stream weights through shared memory ahead of each task
  uint32_t cuda_watchdog_ms = 10000;  // a device wait longer than this stops the step with an error
  // The host's bound on waiting for one step: past it the step fails and the GPU stays held until the
  // kernel ends (docs/CUDA.md, "The host's deadline"). 0: 4 x cuda_watchdog_ms (or tp_timeout_ms with
  // tensor parallelism, if longer), at least 60 s.
  uint32_t cuda_step_deadline_ms = 0;
  // Speculative decoding's draft model (none by default). Not with cuda_resident (the resident kernel
  // holds every SM: each turn of the draft model would stop it), nor with ranks as processes.
  DraftModel draft;
};

struct Sampling {
  float temperature = 0.0f;  // 0: greedy
  uint32_t top_k = 0;        // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  float min_p = 0.0f;        // 0: off; else only tokens at least min_p times as probable as the most probable
  // Applied to the logits before the choice (greedy too), in this order; logprobs stay the model's own.
  std::vector<std::pair<int32_t, float>> logit_bias = {};  // (token, added to its logit), as OpenAI's -100 to 100
  float repetition_penalty = 1.0f;  // a token of the prompt or the reply so far: logit / p when positive,
                                    // logit * p when not (Hugging Face's; 1: off, above 1 discourages)
  float presence_penalty = 0.0f;    // -2 to 2: subtracted from every token the reply holds (OpenAI's)
  float frequency_penalty = 0.0f;   // -2 to 2: subtracted per time the reply holds the token (OpenAI's)
};

// Speculative decoding (Engine::generate; in a batch, by prompt lookup): a draft of the next draft_tokens
// is proposed, and one step of draft_tokens + 1 tokens checks it (in a batch, the step's rows of that
// sequence, beside the others'). At each of that step's positions the token is chosen from the
// position's logits as a decode step would choose it (the same sampling, the same seeded draw), and the
// draft is followed while it agrees: the reply is the one plain decoding gives (within the rounding of a
// step of several tokens), in fewer steps where the drafts are right. The drafts come from
// - prompt lookup: when the sequence's last n tokens (n from max_ngram down to min_ngram) occurred earlier
//   in it (the prompt or the reply so far), the tokens that followed their latest occurrence, read on into
//   the draft itself past the sequence's end (a repeating pattern continues). It costs nothing, and pays
//   where the text repeats what came before (code being edited, a quoted document, a summary). Without a
//   match the step is an ordinary decode step.
// - a draft model (EngineOptions::draft): its greedy continuation of the sequence, at the cost of its own
//   steps (a prefill of what it has not seen, then draft_tokens - 1 decode steps). It pays where the draft
//   model is much cheaper than the model and agrees with it often (a small model of the same family).
enum class DraftSource : uint8_t { prompt_lookup, draft_model };
struct Speculation {
  uint32_t draft_tokens = 0;  // 0: off; 1 to 31, and at most EngineOptions::prefill_chunk - 1
  // Prompt lookup's n-grams: the longest, 1 to 16, and the shortest, 1 to max_ngram. The shortest is not 1
  // by default: a one-token match in real text is mostly chance, and a check whose draft is wrong costs
  // more than a decode step where the check is compute-bound (a CPU).
  uint32_t max_ngram = 3;
  uint32_t min_ngram = 2;
  DraftSource source = DraftSource::prompt_lookup;  // draft_model needs EngineOptions::draft
};

struct TokenProbability {
  int32_t token = 0;
  float probability = 0.0f;  // under softmax(logits), temperature 1 (the model's own distribution)
  float logprob = 0.0f;      // its natural log, finite where the probability underflows to 0
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  uint32_t max_new_tokens = 16;
  // Until this many tokens are generated, the tokens that would end the generation (the eos tokens it
  // stops at, stop_tokens) are not chosen: their logits are taken as -inf (logprobs stay the model's own).
  uint32_t min_new_tokens = 0;
  Sampling sampling;
  uint32_t logprobs = 0;        // K most probable tokens at every generated position
  // K > 0: every prompt token after the first gets its probability after the tokens before it, and the K
  // most probable there (GenerateResult::prompt_token_probabilities, prompt_logprobs): a text's
  // likelihood, as evaluation harnesses ask for it. The prompt is then prefilled whole (reuse_prefix
  // keeps nothing), and max_new_tokens may be 0 (the prompt is scored, nothing generated).
  uint32_t prompt_logprobs = 0;
  bool stop_at_eos = true;      // stop when the model's eos token is generated
  std::vector<int32_t> stop_tokens;  // stop at these too (a chat template's end of turn); finish_reason "eos"
  // Keep what the KV cache already holds of the prompt's beginning (Engine::sequence(): a conversation's
  // earlier turns, a shared system prompt) and prefill only the rest; otherwise the sequence starts anew.
  bool reuse_prefix = false;
  std::string trace_path;       // when set, a Chrome/Perfetto trace of one decode step is written here (the
                                // sequence ends where it would without it). In a batch (generate_batch,
                                // add_sequence): the timeline of its second decode step (or of its first,
                                // when its token count or the context makes that its last), which every
                                // sequence of that step shares; GenerateResult::trace_written says whether
                                // one was written (not when an eos or a stop ends it first)
  // Called with each generated token as soon as it is chosen, in order (GenerateResult::tokens), outside
  // the timed part of each step: to show text as it comes. Ranks as processes call it on every rank. It
  // must not call into the engine (generate, prefill, decode, rewind, reset, set_schedule: InputError);
  // an exception it throws leaves generate() and reaches the caller.
  std::function<void(int32_t token)> on_token;
  // With logprobs > 0: called just before on_token with that token's probabilities as the result will
  // hold them (its token_probabilities and logprobs entries), to stream them with its text. The same rules
  // as on_token.
  std::function<void(const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable)> on_probabilities;
  // Asked after each generated token (after on_token) with every token generated so far: true ends the
  // generation there, finish_reason "stopped" (a stop string the caller found in the text, a client that
  // went away). The same rules as on_token: no calls into the engine from it.
  std::function<bool(const std::vector<int32_t>& generated)> stop_when;
  // Constrained decoding (a reply that must be JSON: tilefire/json_constraint.h): called before each token
  // is chosen, with every token generated so far, and `allowed` holding one 0 per token of the vocabulary;
  // it sets allowed[t] to 1 for each token t that may come next. The token is chosen among those alone
  // (the others' logits taken as -inf after logit_bias and the penalties, greedy too; logprobs stay the
  // model's own). A call that leaves no token to choose (none allowed, or only the ending tokens that
  // min_new_tokens bans), or resizes `allowed`, fails the generation with an InputError; in a step of
  // step_sequences, that sequence alone: it is finished, and the step throws SequenceError with its id
  // (an exception of another type from the callback leaves the step as it is, the sequence finished
  // too). The same rules as on_token: no calls into the engine from it; ranks as processes call it on
  // every rank, so it must answer alike on each.
  std::function<void(const std::vector<int32_t>& generated, std::vector<uint8_t>& allowed)> allowed_tokens;
  // Speculative decoding: in generate(); in generate_batch and add_sequence by prompt lookup (a draft
  // model drafts for generate() alone). Not with trace_path, which records a decode step.
  Speculation speculation;

  // The tokens that end this request's reply: stop_tokens, then the model's `eos_tokens` if stop_at_eos.
  std::vector<int32_t> ending_tokens(const std::vector<int32_t>& eos_tokens) const {
    std::vector<int32_t> ending = stop_tokens;
    if (stop_at_eos) ending.insert(ending.end(), eos_tokens.begin(), eos_tokens.end());
    return ending;
  }
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated
  std::vector<std::vector<TokenProbability>> logprobs;  // [generated][K] (GenerateRequest::logprobs)
  std::vector<TokenProbability> token_probabilities;    // [generated] each generated token's own, with logprobs
  std::vector<std::vector<TokenProbability>> prompt_logprobs;  // [prompt - 1][K] (GenerateRequest::prompt_logprobs)
  std::vector<TokenProbability> prompt_token_probabilities;    // [prompt - 1] prompt tokens 1.. each after those before
  double ttft_ms = 0;       // prefill + first token (compile time excluded: see compile_ms)
  double tpot_ms = 0;       // mean time per token after the first (a decode step's, or a check of a draft's over the tokens it gave)
  double decode_tok_s = 0;  // 1000 / tpot_ms
  uint32_t decode_steps = 0;       // steps after the first token, checks of a draft among them
  uint32_t draft_tokens = 0;       // speculation: proposed tokens the model's choice was compared with (not
                                   // those past where the reply ended)
  uint32_t accepted_tokens = 0;    // speculation: proposed tokens the model's own choice agreed with
  // Speculation by a draft model that stopped partway: the draft model's error (its logits not finite),
  // after which the reply went on by decode steps (it never depends on the drafts); empty otherwise.
  std::string draft_error;
  double compile_ms = 0;    // compiling the programs this request used
  uint32_t tasks_per_step = 0;   // of the decode program
  uint32_t events_per_step = 0;
  // "eos" (a stop token), "stopped" (GenerateRequest::stop_when), "length" (max_new_tokens), or "context"
  // (the KV cache is full), the first that holds in that order.
  std::string finish_reason;
  uint32_t reused_tokens = 0;  // prompt tokens not prefilled: the cache held them, or copied them from another
                               // sequence's slot (GenerateRequest::reuse_prefix)
  bool trace_written = false;  // a decode step's trace went to GenerateRequest::trace_path
};

struct ModelInfo {
  std::string origin;  // folder, or "built-in sample (tiny)"
  std::string architecture;
  std::string dtype;
  uint32_t vocab = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  uint32_t max_context = 0;  // KV cache positions this engine holds
  // Sliding-window attention: a token in one of `sliding_layers` layers sees the last `sliding_window`
  // positions, itself included (0 and 0: every layer sees all positions before it).
  uint32_t sliding_window = 0, sliding_layers = 0;
  std::vector<int32_t> eos_tokens;  // config.json's eos_token_id, then generation_config.json's others
  uint64_t decode_weight_bytes = 0;  // weight bytes one decode step reads
};

// One call at a time: an Engine is not thread-safe.
class Engine {
 public:
  explicit Engine(const EngineOptions& options);  // throws InputError for a bad model or option
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& model() const;
  uint32_t threads() const;  // workers: threads on the cpu (all ranks), CTAs on the cuda backend
  uint32_t tensor_parallel_ranks() const;
  // This process's rank: 0 unless ranks run as processes (then each process is one of them).
  uint32_t tensor_parallel_rank() const;
  bool ranks_are_processes() const;
  // "cpu" or the CUDA device's name.
  std::string device_name() const;
  // Kernel launches the cuda backend made so far (one per step, none per step when resident); 0 on the cpu.
  uint64_t kernel_launches() const;

  // Prefill the prompt, then decode up to max_new_tokens. Starts a new sequence (with reuse_prefix, keeps
  // the cached beginning of the prompt). A request refused by its checks (InputError) leaves the
  // sequence as it was, and so does max_new_tokens 0 (unless prompt_logprobs asks for the prompt to be
  // scored: then the sequence is the prompt); NaN or Inf logits found while it runs stop it with an
  // InputError that leaves the sequence where the failing step began.
  GenerateResult generate(const GenerateRequest& request);

  // Several requests at once (up to EngineOptions::sequences): each prompt is prefilled in its own slot of
  // the KV cache, then every decode step runs one token of each unfinished sequence through one program,
  // so the weights stream once per step for all of them. Each result is what generate() gives for its
  // request alone: on the cpu bit for bit (the kernels' sums do not depend on how many rows a step
  // holds), on the cuda backend within rounding (past 4 sequences the matrices take the tensor-core
  // path); each request finishes on its own. Under tensor parallelism every rank steps the same
  // sequences (with ranks as processes, every process must make the same calls), and each result is
  // generate()'s with the same degree. ttft_ms counts from the call (the prompts
  // before it were prefilled first); tpot_ms is the mean of the batched steps it took part in. Refused
  // (InputError, nothing run): anything generate() refuses, naming the request. reuse_prefix works as add_sequence's. The step API
  // then continues the sequence left in the first slot (a request with max_new_tokens 0 takes none, unless
  // it scores its prompt);
  // when a step fails, the step API's sequence is empty.
  std::vector<GenerateResult> generate_batch(const std::vector<GenerateRequest>& requests);

  // Continuous batching, what a server does: sequences join and leave between steps.
  // add_sequence starts a request in a free slot of the KV cache: prefills its prompt and picks its first
  // token (calling its on_token and stop_when; a request that ends there is finished at once; an exception
  // they throw takes the sequence out again and reaches the caller) and returns the sequence's id. InputError when all EngineOptions::sequences slots are taken, and for what
  // generate_batch refuses (max_new_tokens 0 included, unless prompt_logprobs asks for the prompt to be
  // scored: the sequence then ends once its prompt is in). step_sequences runs one decode step of every
  // unfinished sequence together and returns how many are unfinished after it. With
  // EngineOptions::prefill_chunks_per_step, add_sequence only takes the slot: the steps prefill the prompt
  // after their decode, a few chunks each, and the step that ends it picks the first token (so a failure
  // or a callback's exception there comes from step_sequences, after the step's decode). remove_sequence takes a
  // sequence out, finished or not (an unfinished one ends "stopped"), freeing its slot, and returns its
  // result: what generate() gives for its request alone, whenever it joined (ttft_ms counts from its
  // add_sequence). A removed sequence stays in its slot's cache: a later request with reuse_prefix goes to
  // the free slot whose cache begins its prompt with the most tokens and prefills only the rest
  // (reused_tokens). When another slot holds more of its prompt (a sequence still in: several choices of
  // one prompt, chats that share a system prompt), those positions of the cache are copied into the free
  // slot with the fewest cached tokens instead of prefilled, at add_sequence or, with
  // prefill_chunks_per_step, before each of its prefill chunks (the sequences before it may have
  // prefilled them meanwhile); its tokens are then bitwise those it would get reusing that slot once
  // free. While any sequence is in, the step API and generate() are refused (they use the first slot);
  // a sequence removed from the first slot is the step API's sequence after. A step whose decode fails
  // (NaN logits) finishes nothing and leaves every sequence where it was; a failed prefill chunk leaves
  // its sequence before the chunk. Either throws SequenceError (errors.h) with the id of the
  // sequence it came from: remove that one (it would fail again) and step the others on. An exception
  // from a callback in a step reaches the caller: the sequences up to its own have their new tokens, the
  // rest take theirs (the same ones) at the next step.
  uint64_t add_sequence(const GenerateRequest& request);
  uint32_t step_sequences();
  bool sequence_finished(uint64_t id) const;  // InputError for an id not in
  GenerateResult remove_sequence(uint64_t id);
  uint32_t sequences_in() const;  // added and not yet removed

  // The step-level API. reset() starts a new sequence; prefill() runs tokens at the next positions (in
  // chunks of up to 128 per step) and decode() one token; both return the last token's logits [vocab]
  // and keep the KV cache. Tokens outside the vocabulary or past the context are an InputError, and so
  // are logits that are NaN or infinite (the weights hold such values), on every call. A call that throws
  // InputError leaves position() where it was (but for a prefill that ran past what a sliding-window
  // layer's ring holds before it failed: the sequence then starts over, position() 0).
  void reset();
  // Keeps the first `position` tokens of the sequence (InputError past position()): the next step
  // continues from there, as if the tokens after it had never been fed. A model with sliding-window
  // layers keeps (on the cpu) only a ring of each one's last positions (its window, plus a prefill chunk),
  // so a position whose window the rings have moved past is an InputError too. can_rewind says whether
  // rewind(position) would be taken (false while generating or batching, which rewind refuses too).
  void rewind(uint32_t position);
  bool can_rewind(uint32_t position) const;
  std::vector<float> prefill(const std::vector<int32_t>& tokens);
  std::vector<float> decode(int32_t token);
  // decode() for greedy generation: returns the most probable next token. On the cuda backend the argmax
  // is reduced on the device and no logits are copied back. NaN or Inf logits are an InputError.
  int32_t decode_greedy(int32_t token);
  uint32_t position() const;  // tokens in the KV cache
  // Those tokens, in order (generate() leaves its prompt and every generated token but the last).
  const std::vector<int32_t>& sequence() const;

  // Decode steps run with the given schedule from now on (same program, same tiles).
  void set_schedule(Schedule schedule);
  // KV-cache bytes a decode step reads when `visible` positions are before it, itself included (K and V of
  // every layer over those positions; a sliding layer's over its window when that is shorter).
  uint64_t decode_kv_bytes(uint32_t visible) const;
  uint32_t decode_tasks() const;
  uint32_t decode_events() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Writes a deterministic random-weight Hugging Face folder (config.json + safetensors) of a preset.
// max_shard_bytes > 0 splits the weights into shards with model.safetensors.index.json.
void write_random_model(const std::string& preset, const std::string& folder, const std::string& dtype,
                        uint64_t seed, uint64_t max_shard_bytes = 0);
std::vector<std::string> preset_names();
// Whether a launcher started this process as one of several ranks (mpirun's variables, or RANK,
// WORLD_SIZE and TILEFIRE_RENDEZVOUS): an Engine with tp > 1 made here holds this process's rank only
// (ranks_are_processes()). Known before any model is loaded; InputError names a malformed variable.
bool launched_as_one_of_several_ranks();
// Placement policies as --policy names them, the default first; and a line describing each.
std::vector<std::pair<std::string, std::string>> placement_policies();

// This machine's memory read bandwidth in GB/s: `threads` threads each summing its share of a buffer of
// `bytes` (far larger than the caches), best of several passes. InputError unless threads is 1 to 256
// and bytes 1 MiB to 64 GiB.
double measure_read_bandwidth_gbs(uint32_t threads, uint64_t bytes);
// A GPU's device-to-device copy bandwidth in GB/s (bytes read + written), best of several copies of
// `bytes`: the ceiling the cuda backend's decode bandwidth is compared with. InputError without a GPU.
double measure_device_copy_bandwidth_gbs(int device, uint64_t bytes);
// Milliseconds to compile the decode program of a preset's shape for `threads` workers (no weights; 0
// counts as 1, more than 256 is an InputError).
double measure_compile_ms(const std::string& preset, uint32_t threads);

// Bytes as tokens (for models without a tokenizer): each byte of `text` is one token id.
std::vector<int32_t> byte_tokens(std::string_view text);
// The inverse: tokens below 256 as bytes, others as <id>.
std::string bytes_text(const std::vector<int32_t>& tokens);

}  // namespace tilefire
