/* Tilefire's C API: the engine, the tokenizer and chat templates behind plain C types, for programs in C
 * and for other languages' foreign-function interfaces. Link libtilefire.so (CMake target tilefire_c).
 *
 *   tilefire_engine_options options;
 *   tilefire_engine_options_init(&options);         // the defaults of tilefire::EngineOptions
 *   options.model_dir = "path/to/hf-folder";         // NULL: the built-in sample
 *   tilefire_engine* engine = NULL;
 *   if (tilefire_engine_create(&options, &engine) != TILEFIRE_OK) {
 *     fprintf(stderr, "%s\n", tilefire_last_error());
 *     return 2;
 *   }
 *   tilefire_generate_request request;
 *   tilefire_generate_request_init(&request);
 *   request.prompt = prompt_ids;
 *   request.prompt_count = prompt_count;
 *   tilefire_generate_result result = {sizeof result};
 *   if (tilefire_generate(engine, &request, &result) == TILEFIRE_OK) {
 *     ... result.tokens[0 .. result.token_count) ...
 *     tilefire_generate_result_free(&result);
 *   }
 *   tilefire_engine_free(engine);
 *
 * The rules every call keeps:
 * - A call that can fail returns a tilefire_status. On failure tilefire_last_error() gives its message
 *   (the same one the C++ API throws: it names the file, tensor, option or argument and what was
 *   expected), and the call's outputs are left as they were. No C++ exception leaves the library.
 * - Memory the library hands out (token arrays, text) is freed with tilefire_free; handles with their own
 *   tilefire_*_free, which take NULL. Text is UTF-8, handed out NUL-terminated with its length beside it.
 *   An empty array is handed out as NULL with a count of 0.
 * - An engine is used by one thread at a time (it runs one step at a time); different
 *   engines, tokenizers and templates may be used from different threads, and one tokenizer by several
 *   at once (its calls read it only). tilefire_last_error() is kept per thread.
 * - Every struct passed to the library begins with struct_size: the options' is set by their _init
 *   function, an output struct's by the caller (sizeof). A program built against another version of this
 *   header is refused, never misread or written past.
 * - Enum values travel as int32_t in structs and arguments (an FFI passes plain ints); a value outside its
 *   list is refused by name.
 */
#ifndef TILEFIRE_TILEFIRE_H
#define TILEFIRE_TILEFIRE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this interface: raised when a struct or a call changes. */
#define TILEFIRE_API_VERSION 13
uint32_t tilefire_api_version(void);

typedef enum tilefire_status {
  TILEFIRE_OK = 0,
  TILEFIRE_ERROR_INPUT = 1,      /* bad input: a model file, config, option or argument (a NULL one too) */
  TILEFIRE_ERROR_DEVICE = 2,     /* the GPU stopped a step (the watchdog, a trap): the engine refuses further steps */
  TILEFIRE_ERROR_TRANSPORT = 3,  /* a tensor-parallel peer died or never arrived */
  TILEFIRE_ERROR_OUT_OF_MEMORY = 4,
  TILEFIRE_ERROR_INTERNAL = 5    /* a fault of Tilefire's own: please report it with the message */
} tilefire_status;

/* The message of the last call on this thread that returned a status: "" after a success. Valid until the
 * thread's next call into the library. */
const char* tilefire_last_error(void);
/* "ok", "input error", "device error", ...: what a status is. */
const char* tilefire_status_name(int32_t status);
/* Frees memory the library handed out (token arrays, text); NULL is fine. */
void tilefire_free(void* memory);

/* ---- The engine ---------------------------------------------------------------------------------- */

typedef struct tilefire_engine tilefire_engine;

typedef enum tilefire_backend { TILEFIRE_BACKEND_CPU = 0, TILEFIRE_BACKEND_CUDA = 1 } tilefire_backend;
/* Where speculative decoding's drafts come from (tilefire::DraftSource). */
typedef enum tilefire_draft_source {
  TILEFIRE_DRAFT_PROMPT_LOOKUP = 0,
  TILEFIRE_DRAFT_MODEL = 1  /* the engine's draft model (tilefire_engine_options.draft_*) */
} tilefire_draft_source;
typedef enum tilefire_schedule { TILEFIRE_SCHEDULE_DATAFLOW = 0, TILEFIRE_SCHEDULE_BSP = 1 } tilefire_schedule;
typedef enum tilefire_granularity {
  TILEFIRE_GRANULARITY_TILE = 0,
  TILEFIRE_GRANULARITY_HEAD = 1,
  TILEFIRE_GRANULARITY_OP = 2
} tilefire_granularity;

/* tilefire::EngineOptions (tilefire/engine.h says what each one does). Strings may be NULL (the default);
 * the library copies what it needs. */
typedef struct tilefire_engine_options {
  uint32_t struct_size;       /* set by tilefire_engine_options_init */
  const char* model_dir;      /* a Hugging Face checkpoint folder; NULL or "": a preset, built in memory */
  const char* preset;         /* with no model_dir: a preset with random weights; NULL or "": the sample */
  const char* preset_dtype;   /* f32 (NULL), bf16 or f16 */
  uint64_t preset_seed;
  int32_t backend;            /* a tilefire_backend */
  uint32_t threads;           /* cpu: worker threads of all ranks; 0: one per core */
  uint32_t tp;                /* tensor-parallel ranks (1) */
  uint32_t tp_timeout_ms;     /* a collective waiting longer for a peer fails the step (10000) */
  int32_t schedule;           /* a tilefire_schedule */
  const char* policy;         /* placement policy: NULL is balanced */
  int32_t granularity;        /* a tilefire_granularity */
  uint32_t max_context;       /* KV-cache positions; 0: the model's, at most 4096 */
  uint32_t kv_splits;         /* split-KV decode attention; 0: automatic */
  int32_t cuda_device;
  uint32_t cuda_ctas;         /* 0: one per SM */
  int cuda_resident;          /* nonzero: the kernel stays alive across steps */
  int cuda_stage_weights;     /* nonzero (the default): stream weights through shared memory */
  uint32_t cuda_watchdog_ms;  /* 10000 */
  uint32_t sequences;         /* KV-cache slots: sequences decoded together by the batch calls (1) */
  uint32_t prefill_chunks_per_step;  /* 0: add_sequence prefills the prompt whole; N: the steps do, N chunks
                                        each */
  uint32_t prefill_chunk;     /* prompt tokens per prefill step, 1 to 128 (128) */
  /* Since API version 7: speculative decoding's draft model (tilefire::DraftModel), a smaller model of the
     same vocabulary; none when both are NULL or "" */
  const char* draft_model_dir;
  const char* draft_preset;
  const char* draft_preset_dtype;  /* f32 (NULL), bf16 or f16 */
  uint64_t draft_preset_seed;
  /* Since API version 8: nonzero (the default): with prefill_chunks_per_step, a step's first prompt chunk
     runs in the decode step's program, beside the decoding sequences' tokens; 0: every chunk as a program
     of its own after the decode step (tilefire::EngineOptions::prefill_in_decode_step) */
  int prefill_in_decode_step;
  /* Since API version 13: the host's bound on waiting for one step on the GPU; past it the step fails and
     the GPU stays held until its kernel ends (tilefire::EngineOptions::cuda_step_deadline_ms). 0 (the
     default): 4 x cuda_watchdog_ms (or tp_timeout_ms, if longer), at least 60000; at most 2^32 - 1. 64 bits wide so that the struct's
     size tells this version's from the last */
  uint64_t cuda_step_deadline_ms;
} tilefire_engine_options;

void tilefire_engine_options_init(tilefire_engine_options* options);

/* Loads the model, validates it and compiles the decode program. *engine is set only on success. */
tilefire_status tilefire_engine_create(const tilefire_engine_options* options, tilefire_engine** engine);
void tilefire_engine_free(tilefire_engine* engine);

/* The model an engine runs. Its strings and eos_tokens belong to the engine and live as long as it. */
typedef struct tilefire_model_info {
  uint32_t struct_size;  /* the caller's sizeof(tilefire_model_info) */
  const char* origin;  /* the folder, or "built-in sample (tiny)" */
  const char* architecture;
  const char* dtype;
  uint32_t vocab, hidden, layers, heads, kv_heads, head_dim, ffn;
  uint32_t max_context;  /* KV-cache positions this engine holds */
  const int32_t* eos_tokens;
  size_t eos_token_count;
  uint64_t decode_weight_bytes;  /* weight bytes one decode step reads */
} tilefire_model_info;

tilefire_status tilefire_engine_model_info(const tilefire_engine* engine, tilefire_model_info* info);
/* Workers (threads on the cpu, CTAs on the cuda backend), tensor-parallel ranks, this process's rank. */
uint32_t tilefire_engine_threads(const tilefire_engine* engine);
uint32_t tilefire_engine_tp_ranks(const tilefire_engine* engine);
uint32_t tilefire_engine_tp_rank(const tilefire_engine* engine);
/* "cpu" or the GPU's name; owned by the engine. */
const char* tilefire_engine_device_name(const tilefire_engine* engine);
/* Tasks and events of the decode program. */
uint32_t tilefire_engine_decode_tasks(const tilefire_engine* engine);
uint32_t tilefire_engine_decode_events(const tilefire_engine* engine);

/* Called with each generated token as soon as it is chosen. Return 0 to go on; anything else ends the
 * generation after this token, with finish_reason "stopped" (a stop string found in the text, a client
 * that went away). It must not step the engine or move its sequence (generate, prefill, decode, rewind,
 * reset, set_schedule fail with TILEFIRE_ERROR_INPUT there; what only reads, as position, may be called),
 * and must not unwind through the library (longjmp, a C++ exception). */
typedef int (*tilefire_token_callback)(void* user_data, int32_t token);

typedef struct tilefire_token_probability {
  int32_t token;
  float probability;  /* under softmax(logits), temperature 1 */
  float logprob;      /* its natural log, finite where the probability underflows to 0 */
} tilefire_token_probability;

/* With logprobs > 0: called with each generated token's probabilities just before on_token, as the
 * result will hold them (its token_probabilities and logprobs entries: `count` most probable, most
 * probable first), to stream them with the token's text. The arrays live for the call only. The same
 * rules as tilefire_token_callback. */
typedef void (*tilefire_probability_callback)(void* user_data, const tilefire_token_probability* chosen,
                                              const tilefire_token_probability* most_probable, uint32_t count);

/* Constrained decoding (tilefire::GenerateRequest::allowed_tokens): called before each token is chosen
 * with the tokens generated so far; it sets allowed[t] to 1 for each token t that may come next (allowed
 * holds `vocab` entries, all 0), and the token is chosen among those (greedy or sampled; logprobs stay the
 * model's own). None left to choose fails the call with TILEFIRE_ERROR_INPUT (in
 * tilefire_engine_step_sequences, that sequence alone: it is finished, and tilefire_engine_failed_sequence
 * names it). The arrays live for the call only; it must not call into the engine. */
typedef void (*tilefire_allowed_tokens_callback)(void* user_data, const int32_t* generated, size_t generated_count,
                                                 uint8_t* allowed, size_t vocab);

/* A token and the number added to its logit before the choice (tilefire::Sampling::logit_bias). */
typedef struct tilefire_logit_bias {
  int32_t token;
  float bias;  /* -100 to 100 */
} tilefire_logit_bias;

/* tilefire::GenerateRequest. The arrays and strings are read during tilefire_generate only. */
typedef struct tilefire_generate_request {
  uint32_t struct_size;  /* set by tilefire_generate_request_init */
  const int32_t* prompt;
  size_t prompt_count;
  uint32_t max_new_tokens;  /* 16 */
  float temperature;        /* 0: greedy (the default) */
  uint32_t top_k;           /* 0: off */
  float top_p;              /* 1: off */
  uint64_t seed;
  uint32_t logprobs;        /* K most probable tokens at every generated position */
  int stop_at_eos;          /* nonzero (the default): stop at the model's eos tokens */
  const int32_t* stop_tokens;  /* stop at these too (a chat template's end of turn) */
  size_t stop_token_count;
  int reuse_prefix;         /* keep what the KV cache holds of the prompt's beginning */
  const char* trace_path;   /* NULL: no trace; else a Chrome/Perfetto trace of one decode step */
  tilefire_token_callback on_token;  /* NULL: none */
  void* user_data;          /* given to on_token and on_probabilities */
  /* Since API version 6 (tilefire::Sampling's): */
  float min_p;              /* 0: off; else only tokens at least min_p times as probable as the most probable */
  const tilefire_logit_bias* logit_bias;  /* added to those tokens' logits before the choice (greedy too) */
  size_t logit_bias_count;
  float repetition_penalty; /* 1: off; a token of the prompt or reply: logit / p when positive, * p when not */
  float presence_penalty;   /* 0: off; -2 to 2, subtracted from every token the reply holds */
  float frequency_penalty;  /* 0: off; -2 to 2, subtracted per time the reply holds the token */
  uint32_t prompt_logprobs; /* K > 0: score the prompt (each token after the first, after those before it;
                               the K most probable there); max_new_tokens may then be 0 */
  tilefire_probability_callback on_probabilities;  /* NULL: none; given user_data too */
  uint32_t min_new_tokens;  /* the eos and stop tokens are not chosen before this many are generated */
  /* Since API version 7: speculative decoding (tilefire::Speculation), drafts by prompt lookup or by the
     engine's draft model (tilefire_generate alone; a batch drafts by prompt lookup, each draft checked in
     the batched steps): plain decoding's reply (up to a near tie: a check step's logits round apart from a
     decode step's) in fewer steps where the drafts are right */
  uint32_t speculate_draft_tokens;  /* 0 (the default): off; 1 to 31 tokens proposed per step, and below the
                                       engine's prefill_chunk (a draft is checked in one prefill step) */
  uint32_t speculate_max_ngram;     /* 3: the longest run of last tokens looked up, 1 to 16 */
  uint32_t speculate_min_ngram;     /* 2: the shortest, 1 to speculate_max_ngram */
  int32_t speculate_source;         /* a tilefire_draft_source (prompt lookup by default) */
  /* Since API version 9: constrained decoding */
  tilefire_allowed_tokens_callback allowed_tokens;  /* NULL: none; given user_data too */
  int json_object;  /* nonzero: the reply is a JSON object (tilefire::constrain_to_json, serve's
                       response_format json_object): only tokens that keep it a prefix of one are chosen,
                       and it ends where the object closes (finish reason "stopped"); not with allowed_tokens */
  const struct tilefire_tokenizer* json_tokenizer;  /* with json_object, json_schema, regex or choices: the model's tokenizer,
                       by whose tokens' bytes the reply is matched; NULL: a model without one (its text its
                       byte tokens, ids 0 to 255) */
  /* Since API version 10: */
  const char* json_schema;  /* NULL: none; else a JSON Schema's text (tilefire::constrain_to_json_schema, serve's
                               response_format json_schema; the subset read is in docs/ARCHITECTURE.md): the
                               reply is a JSON text it accepts, ending where it closes (finish reason
                               "stopped"); not with json_object or allowed_tokens. Read during the call; a
                               schema outside the subset is refused naming its keyword */
  uint32_t json_whitespace;  /* with json_object or json_schema: the longest whitespace run the reply may hold,
                                0 to 32 (the default, 32; 0: compact JSON) */
  /* Since API version 11: a reply held to a regular expression or to choices (tilefire::constrain_to_pattern,
     serve's structured_outputs regex and choice), matched by json_tokenizer's tokens' bytes as a JSON reply
     is: the eos and stop tokens may come only where the text so far matches, and the reply ends by itself
     where nothing may follow (finish reason "stopped"). One of json_object, json_schema, regex, choices. */
  const char* regex;  /* NULL: none; else the reply is a text this matches whole (the subset of JavaScript's
                         regular expressions a JSON Schema pattern takes, docs/ARCHITECTURE.md); read during
                         the call, one outside the subset refused naming what it holds */
  const char* const* choices;  /* [choice_count]: the reply is one of these texts (UTF-8, each as written) */
  size_t choice_count;
  /* Since API version 12: a reply held to a GBNF grammar (tilefire::constrain_to_grammar, serve's
     structured_outputs grammar), matched as a regex is; one of json_object, json_schema, regex, choices,
     grammar. */
  const char* grammar;  /* NULL: none; else the reply is a text this GBNF grammar derives from its rule root
                           (llama.cpp's format, docs/ARCHITECTURE.md); read during the call, one that is
                           wrong (a syntax error, a rule not defined, left recursion) refused naming where */
} tilefire_generate_request;

void tilefire_generate_request_init(tilefire_generate_request* request);


/* tilefire::GenerateResult. Its arrays belong to it: tilefire_generate_result_free. */
typedef struct tilefire_generate_result {
  uint32_t struct_size;  /* the caller's sizeof(tilefire_generate_result) */
  int32_t* tokens;  /* [token_count] generated */
  size_t token_count;
  tilefire_token_probability* logprobs;  /* [token_count][logprobs_per_token], most probable first */
  uint32_t logprobs_per_token;
  tilefire_token_probability* token_probabilities;  /* [token_count] each generated token's own; NULL when
                                                       logprobs_per_token is 0 */
  const char* finish_reason;  /* "eos", "stopped", "length" or "context" (static strings) */
  uint32_t reused_tokens;     /* prompt tokens not prefilled: the KV cache held them, or they were copied
                                 from another sequence's slot (reuse_prefix) */
  double ttft_ms, tpot_ms, decode_tok_s, compile_ms;
  uint32_t tasks_per_step, events_per_step;
  int trace_written;
  /* Since API version 6: the prompt's scores (request.prompt_logprobs), of prompt tokens 1 .. */
  size_t prompt_scored;  /* the prompt's count - 1 when asked, else 0 */
  tilefire_token_probability* prompt_logprobs;  /* [prompt_scored][prompt_logprobs_per_token], most probable first */
  uint32_t prompt_logprobs_per_token;
  tilefire_token_probability* prompt_token_probabilities;  /* [prompt_scored] each prompt token's own */
  /* Since API version 7: */
  uint32_t decode_steps;     /* steps after the first token (checks of a draft among them) */
  uint32_t draft_tokens;     /* speculation: proposed tokens compared with the model's choice */
  uint32_t accepted_tokens;  /* speculation: proposed tokens the model's own choice agreed with */
  char* draft_error;         /* NULL, or why the draft model stopped drafting partway (its logits not finite):
                                the reply went on by decode steps, whole */
} tilefire_generate_result;

/* Prefills the prompt, then decodes up to max_new_tokens (tilefire::Engine::generate). On failure
 * *result is untouched and the sequence is where the C++ API leaves it (engine.h). */
tilefire_status tilefire_generate(tilefire_engine* engine, const tilefire_generate_request* request,
                                  tilefire_generate_result* result);
/* Frees the result's arrays and zeroes it but its struct_size (ready for the next call); NULL is fine, and
 * so is a result of another version's size (no call filled it), which is left alone. */
void tilefire_generate_result_free(tilefire_generate_result* result);

/* Batched decoding (tilefire::Engine::generate_batch and continuous batching; options.sequences slots, cpu
 * one rank): every decode step runs one token of each unfinished sequence, so the weights stream
 * once for all of them; each result is what tilefire_generate gives for its request alone.
 * tilefire_generate_batch runs `count` requests (at most options.sequences) to their ends; results[i]
 * (struct_size set by the caller) is requests[i]'s. On failure every result is untouched. */
tilefire_status tilefire_generate_batch(tilefire_engine* engine, const tilefire_generate_request* requests, size_t count,
                                        tilefire_generate_result* results);
/* Continuous batching: add a request as a sequence (its prompt prefilled, its first token taken: its
 * on_token called; the request's arrays and json_tokenizer are read during this call only (the tokenizer
 * may be freed after it), its callbacks and user_data are used until the sequence is removed), step every unfinished sequence at once, ask whether one has
 * finished, and remove one (finished or not: an unfinished one ends "stopped") for its result. While any
 * sequence is in, tilefire_generate and the step-level calls below fail with TILEFIRE_ERROR_INPUT. */
tilefire_status tilefire_engine_add_sequence(tilefire_engine* engine, const tilefire_generate_request* request,
                                             uint64_t* sequence);
tilefire_status tilefire_engine_step_sequences(tilefire_engine* engine, uint32_t* unfinished);
/* After tilefire_engine_step_sequences failed with TILEFIRE_ERROR_INPUT: *failed is 1 and *sequence the
 * sequence it came from when one sequence's logits were not finite (its own input's fault: remove it and
 * step the others on; left in, it fails again) or its constraint left nothing to choose (it is finished:
 * remove it), else *failed is 0 (and after a step that succeeded). */
tilefire_status tilefire_engine_failed_sequence(const tilefire_engine* engine, int* failed, uint64_t* sequence);
tilefire_status tilefire_engine_sequence_finished(const tilefire_engine* engine, uint64_t sequence, int* finished);
tilefire_status tilefire_engine_remove_sequence(tilefire_engine* engine, uint64_t sequence, tilefire_generate_result* result);

/* The step-level API (tilefire::Engine). Logits are [vocab] floats written to `logits`, which holds
 * `capacity` floats (less than the vocabulary is TILEFIRE_ERROR_INPUT); NULL skips them. */
tilefire_status tilefire_engine_reset(tilefire_engine* engine);
tilefire_status tilefire_engine_rewind(tilefire_engine* engine, uint32_t position);
/* Since API version 12: *can_rewind is 1 when tilefire_engine_rewind(engine, position) would be taken, else
 * 0: a position past the sequence, one whose window a sliding-window layer's KV ring no longer holds (the
 * cpu backend keeps such a layer's window plus a prefill chunk of positions), or while a generation or
 * a batched sequence runs. */
tilefire_status tilefire_engine_can_rewind(const tilefire_engine* engine, uint32_t position, int* can_rewind);
tilefire_status tilefire_engine_prefill(tilefire_engine* engine, const int32_t* tokens, size_t count, float* logits,
                                        size_t capacity);
tilefire_status tilefire_engine_decode(tilefire_engine* engine, int32_t token, float* logits, size_t capacity);
/* The most probable next token (on the cuda backend reduced on the device, no logits copied back). */
tilefire_status tilefire_engine_decode_greedy(tilefire_engine* engine, int32_t token, int32_t* next_token);
/* Tokens in the KV cache, and which: *tokens stays valid until the next call that moves the sequence. */
uint32_t tilefire_engine_position(const tilefire_engine* engine);
tilefire_status tilefire_engine_sequence(const tilefire_engine* engine, const int32_t** tokens, size_t* count);
tilefire_status tilefire_engine_set_schedule(tilefire_engine* engine, int32_t schedule /* a tilefire_schedule */);

/* ---- Text ---------------------------------------------------------------------------------------- */

typedef struct tilefire_tokenizer tilefire_tokenizer;

/* The tokenizer.json of a model folder; *tokenizer is NULL (and the status TILEFIRE_OK) when the folder has
 * none. A folder that does not exist is TILEFIRE_ERROR_INPUT. */
tilefire_status tilefire_tokenizer_of_model_folder(const char* folder, tilefire_tokenizer** tokenizer);
/* A tokenizer.json file. */
tilefire_status tilefire_tokenizer_open(const char* tokenizer_json, tilefire_tokenizer** tokenizer);
void tilefire_tokenizer_free(tilefire_tokenizer* tokenizer);
/* The ids of `length` bytes of UTF-8 text: *tokens (tilefire_free) and *count. add_special_tokens adds what
 * the file's post-processor adds around a text (<|begin_of_text|>, <s>). */
tilefire_status tilefire_tokenizer_encode(const tilefire_tokenizer* tokenizer, const char* text, size_t length,
                                          int add_special_tokens, int32_t** tokens, size_t* count);
/* The text of ids: *text (tilefire_free), NUL-terminated, and its *length. */
tilefire_status tilefire_tokenizer_decode(const tilefire_tokenizer* tokenizer, const int32_t* tokens, size_t count,
                                          int skip_special_tokens, char** text, size_t* length);
/* The text `generated` adds after `prompt` (decoded together: a leading space is kept). */
tilefire_status tilefire_tokenizer_continuation(const tilefire_tokenizer* tokenizer, const int32_t* prompt,
                                                size_t prompt_count, const int32_t* generated, size_t generated_count,
                                                char** text, size_t* length);
int32_t tilefire_tokenizer_vocab_size(const tilefire_tokenizer* tokenizer);

/* The text of tokens as they are generated (tilefire::StreamingText): each add gives what a token adds
 * (possibly nothing, while a character's bytes are incomplete), finish the rest. The tokenizer must outlive
 * the stream. */
typedef struct tilefire_text_stream tilefire_text_stream;
tilefire_status tilefire_text_stream_create(const tilefire_tokenizer* tokenizer, const int32_t* prompt,
                                            size_t prompt_count, tilefire_text_stream** stream);
tilefire_status tilefire_text_stream_add(tilefire_text_stream* stream, int32_t token, char** text, size_t* length);
/* finish ends the stream: an add after it is refused. */
tilefire_status tilefire_text_stream_finish(tilefire_text_stream* stream, char** text, size_t* length);
void tilefire_text_stream_free(tilefire_text_stream* stream);

/* A chat model's template, rendered as transformers' apply_chat_template renders it. */
typedef struct tilefire_chat_template tilefire_chat_template;
typedef struct tilefire_chat_message {
  const char* role;  /* "system", "user", "assistant", "tool" */
  const char* content;
} tilefire_chat_message;

/* The chat template of a model folder; *chat is NULL (and the status TILEFIRE_OK) when it has none. A folder
 * that does not exist is TILEFIRE_ERROR_INPUT. */
tilefire_status tilefire_chat_template_of_model_folder(const char* folder, tilefire_chat_template** chat);
/* A .jinja file, with the special tokens of model_folder (NULL or "": none; one that does not exist:
 * TILEFIRE_ERROR_INPUT). */
tilefire_status tilefire_chat_template_open(const char* jinja_path, const char* model_folder,
                                            tilefire_chat_template** chat);
void tilefire_chat_template_free(tilefire_chat_template* chat);
/* The prompt text of a conversation, ending with the assistant's header when add_generation_prompt. */
tilefire_status tilefire_chat_render(const tilefire_chat_template* chat, const tilefire_chat_message* messages,
                                     size_t message_count, int add_generation_prompt, char** text, size_t* length);
/* The same with the messages as JSON (as transformers takes them) and the template's other variables as a
 * JSON object (NULL: none). */
tilefire_status tilefire_chat_render_json(const tilefire_chat_template* chat, const char* messages_json,
                                          const char* variables_json, int add_generation_prompt, char** text,
                                          size_t* length);
/* The ids that end the assistant's reply (for tilefire_generate_request.stop_tokens): *tokens
 * (tilefire_free). */
tilefire_status tilefire_chat_end_of_reply_tokens(const tilefire_chat_template* chat,
                                                  const tilefire_tokenizer* tokenizer, int32_t** tokens,
                                                  size_t* count);

#ifdef __cplusplus
}
#endif

#endif /* TILEFIRE_TILEFIRE_H */
