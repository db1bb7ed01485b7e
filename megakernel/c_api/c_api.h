#pragma once
// What the C API's sources share: the handles behind its opaque types, the guard that turns every C++
// exception into a status and a message, and the hand-out of memory the caller frees with tilefire_free.
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "tilefire/chat.h"
#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"
#include "tilefire/json_schema.h"
#include "tilefire/reply_grammar.h"
#include "tilefire/reply_pattern.h"
#include "tilefire/tilefire.h"
#include "tilefire/tokenizer.h"

struct tilefire_engine {
  tilefire::Engine engine;
  std::string device_name;  // Engine::device_name() returns a copy; tilefire_engine_device_name hands out this
  // The sequence the last tilefire_engine_step_sequences failed on (SequenceError), for
  // tilefire_engine_failed_sequence.
  bool sequence_failed = false;
  uint64_t failed_sequence = 0;
  explicit tilefire_engine(const tilefire::EngineOptions& options) : engine(options), device_name(engine.device_name()) {}
};
struct tilefire_tokenizer {
  explicit tilefire_tokenizer(tilefire::Tokenizer loaded) : tokenizer(std::move(loaded)) {}
  tilefire::Tokenizer tokenizer;
  // Its tokens' bytes in a trie, for requests with json_object, by the vocabulary of the engine it serves
  // (built on first use: 40 ms for Llama 3's): shared by the requests, which the engines may run at once.
  std::mutex json_mutex;
  std::map<uint32_t, std::shared_ptr<const tilefire::TokenTrie>> json_tries;
};
struct tilefire_text_stream {
  tilefire::StreamingText stream;
  bool finished = false;    // tilefire_text_stream_finish ends the stream
  std::string undelivered;  // text add() gave that could not be handed out (no memory): given with the next call
};
struct tilefire_chat_template {
  std::unique_ptr<tilefire::ChatTemplate> chat;
};

namespace tilefire::c_api {

// The message tilefire_last_error() gives: this thread's last call that returned a status.
void set_last_error(std::string message);

// Runs `body` (which throws on bad input) and returns its status: TILEFIRE_OK, or the error its exception
// stands for with the message kept for tilefire_last_error(). No exception leaves it.
template <class Body>
tilefire_status guarded(Body&& body) noexcept {
  tilefire_status status = TILEFIRE_ERROR_INTERNAL;
  std::string message;
  try {
    body();
    set_last_error("");
    return TILEFIRE_OK;
  } catch (const InputError& e) {
    status = TILEFIRE_ERROR_INPUT, message = e.what();
  } catch (const DeviceError& e) {
    status = TILEFIRE_ERROR_DEVICE, message = e.what();
  } catch (const TransportError& e) {
    status = TILEFIRE_ERROR_TRANSPORT, message = e.what();
  } catch (const std::bad_alloc&) {
    status = TILEFIRE_ERROR_OUT_OF_MEMORY, message = "out of memory";
  } catch (const std::exception& e) {
    status = TILEFIRE_ERROR_INTERNAL, message = std::string("internal error: ") + e.what();
  } catch (...) {
    status = TILEFIRE_ERROR_INTERNAL, message = "internal error: an exception that is not a std::exception";
  }
  try {
    set_last_error(std::move(message));
  } catch (...) {  // no memory for the message: the status still says what happened
  }
  return status;
}

// An argument the call cannot go without: InputError "CALL: NAME is NULL".
template <class T>
T& required(T* pointer, const char* call, const char* name) {
  if (!pointer) throw InputError(std::string(call) + ": " + name + " is NULL");
  return *pointer;
}

// A C string argument the call cannot go without.
inline const char* required_string(const char* text, const char* call, const char* name) {
  if (!text) throw InputError(std::string(call) + ": " + name + " is NULL");
  return text;
}

// A C array argument as a vector: NULL is fine with count 0 only.
std::vector<int32_t> token_vector(const int32_t* tokens, size_t count, const char* call, const char* name);
// A C string argument, NULL read as "".
inline std::string string_or_empty(const char* text) { return text ? std::string(text) : std::string(); }

// An output struct's struct_size, which the caller sets: InputError unless it is this library's.
void check_output_size(uint32_t given, size_t expected, const char* call, const char* name);
// A folder argument that must exist (NULL and "" are checked by the caller): InputError naming it.
void require_folder(const std::string& folder, const char* call, const char* name);

// A C request as the C++ one (`name` the argument it came in, for messages): its arrays copied, its
// callbacks kept (with their user_data) for as long as the C++ request lives; a reply held to JSON, a
// schema, a regex, choices or a grammar matched by the tokens of `model`'s vocabulary, a pattern's or a
// grammar's ended by its eos.
GenerateRequest generate_request(const tilefire_generate_request& c, const char* call, const char* name, const ModelInfo& model);
// A result for the caller: its arrays handed out (tilefire_generate_result_free).
tilefire_generate_result hand_out_result(const GenerateResult& generated, uint32_t logprobs_per_token, uint32_t struct_size);

// Memory for the caller (tilefire_free): malloc'd, so that the caller may also free() it.
template <class T>
T* hand_out_array(const T* values, size_t count) {
  if (count == 0) return nullptr;
  T* memory = static_cast<T*>(std::malloc(count * sizeof(T)));
  if (!memory) throw std::bad_alloc();
  std::memcpy(memory, values, count * sizeof(T));
  return memory;
}
// Text for the caller: NUL-terminated, and its length beside it. The outputs are written last, so a failed
// call leaves them as they were.
void hand_out_text(const std::string& text, char** out, size_t* length);
void hand_out_tokens(const std::vector<int32_t>& tokens, int32_t** out, size_t* count);

}  // namespace tilefire::c_api
