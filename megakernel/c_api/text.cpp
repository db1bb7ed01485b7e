// The C API's text (tilefire/tilefire.h): the tokenizer, streamed text and chat templates behind plain C
// types.
#include <string>
#include <string_view>
#include <vector>

#include "megakernel/c_api/c_api.h"

using namespace tilefire;
using tilefire::c_api::guarded;
using tilefire::c_api::required;

namespace {

// A text argument of `length` bytes: NULL is fine with length 0 only.
std::string_view text_argument(const char* text, size_t length, const char* call) {
  if (!text && length) throw InputError(std::string(call) + ": text is NULL with a length of " + std::to_string(length));
  return text ? std::string_view(text, length) : std::string_view();
}

// Output arguments are checked before any work, so that a NULL one refuses the call without side effects.
void require_text_outputs(char** text, size_t* length, const char* call) {
  required(text, call, "text");
  required(length, call, "length");
}

}  // namespace

extern "C" {

tilefire_status tilefire_tokenizer_of_model_folder(const char* folder, tilefire_tokenizer** tokenizer) {
  return guarded([&] {
    const char* call = "tilefire_tokenizer_of_model_folder";
    required(tokenizer, call, "tokenizer");
    const std::string where = c_api::required_string(folder, call, "folder");
    c_api::require_folder(where, call, "folder");
    std::unique_ptr<Tokenizer> loaded = Tokenizer::of_model_folder(where);
    *tokenizer = loaded ? new tilefire_tokenizer(std::move(*loaded)) : nullptr;
  });
}

tilefire_status tilefire_tokenizer_open(const char* tokenizer_json, tilefire_tokenizer** tokenizer) {
  return guarded([&] {
    const char* call = "tilefire_tokenizer_open";
    required(tokenizer, call, "tokenizer");
    Tokenizer loaded(c_api::required_string(tokenizer_json, call, "tokenizer_json"));
    *tokenizer = new tilefire_tokenizer(std::move(loaded));
  });
}

void tilefire_tokenizer_free(tilefire_tokenizer* tokenizer) { delete tokenizer; }

tilefire_status tilefire_tokenizer_encode(const tilefire_tokenizer* tokenizer, const char* text, size_t length,
                                          int add_special_tokens, int32_t** tokens, size_t* count) {
  return guarded([&] {
    const char* call = "tilefire_tokenizer_encode";
    const Tokenizer& t = required(tokenizer, call, "tokenizer").tokenizer;
    required(tokens, call, "tokens");
    required(count, call, "count");
    c_api::hand_out_tokens(t.encode(text_argument(text, length, call), add_special_tokens != 0), tokens, count);
  });
}

tilefire_status tilefire_tokenizer_decode(const tilefire_tokenizer* tokenizer, const int32_t* tokens, size_t count,
                                          int skip_special_tokens, char** text, size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_tokenizer_decode";
    const Tokenizer& t = required(tokenizer, call, "tokenizer").tokenizer;
    require_text_outputs(text, length, call);
    const std::string decoded = t.decode(c_api::token_vector(tokens, count, call, "tokens"), skip_special_tokens != 0);
    c_api::hand_out_text(decoded, text, length);
  });
}

tilefire_status tilefire_tokenizer_continuation(const tilefire_tokenizer* tokenizer, const int32_t* prompt,
                                                size_t prompt_count, const int32_t* generated, size_t generated_count,
                                                char** text, size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_tokenizer_continuation";
    const Tokenizer& t = required(tokenizer, call, "tokenizer").tokenizer;
    require_text_outputs(text, length, call);
    const std::string added = t.continuation(c_api::token_vector(prompt, prompt_count, call, "prompt"),
                                             c_api::token_vector(generated, generated_count, call, "generated"));
    c_api::hand_out_text(added, text, length);
  });
}

int32_t tilefire_tokenizer_vocab_size(const tilefire_tokenizer* tokenizer) {
  return tokenizer ? tokenizer->tokenizer.vocab_size() : 0;
}

tilefire_status tilefire_text_stream_create(const tilefire_tokenizer* tokenizer, const int32_t* prompt,
                                            size_t prompt_count, tilefire_text_stream** stream) {
  return guarded([&] {
    const char* call = "tilefire_text_stream_create";
    const Tokenizer& t = required(tokenizer, call, "tokenizer").tokenizer;
    required(stream, call, "stream");
    *stream = new tilefire_text_stream{StreamingText(t, c_api::token_vector(prompt, prompt_count, call, "prompt")), false, {}};
  });
}

tilefire_status tilefire_text_stream_add(tilefire_text_stream* stream, int32_t token, char** text, size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_text_stream_add";
    tilefire_text_stream& s = required(stream, call, "stream");
    require_text_outputs(text, length, call);
    if (s.finished) throw InputError(std::string(call) + ": the stream has ended (tilefire_text_stream_finish)");
    // A refused token (a negative id) leaves the stream as it was. Text the stream gave but the caller did
    // not get (no memory to hand it out) comes with the next call.
    s.undelivered += s.stream.add(token);
    c_api::hand_out_text(s.undelivered, text, length);
    s.undelivered.clear();
  });
}

tilefire_status tilefire_text_stream_finish(tilefire_text_stream* stream, char** text, size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_text_stream_finish";
    tilefire_text_stream& s = required(stream, call, "stream");
    require_text_outputs(text, length, call);
    if (s.finished) throw InputError(std::string(call) + ": the stream has ended already");
    c_api::hand_out_text(s.undelivered + s.stream.finish(), text, length);
    s.finished = true;
  });
}

void tilefire_text_stream_free(tilefire_text_stream* stream) { delete stream; }

tilefire_status tilefire_chat_template_of_model_folder(const char* folder, tilefire_chat_template** chat) {
  return guarded([&] {
    const char* call = "tilefire_chat_template_of_model_folder";
    required(chat, call, "chat");
    const std::string where = c_api::required_string(folder, call, "folder");
    c_api::require_folder(where, call, "folder");
    std::unique_ptr<ChatTemplate> loaded = ChatTemplate::of_model_folder(where);
    *chat = loaded ? new tilefire_chat_template{std::move(loaded)} : nullptr;
  });
}

tilefire_status tilefire_chat_template_open(const char* jinja_path, const char* model_folder,
                                            tilefire_chat_template** chat) {
  return guarded([&] {
    const char* call = "tilefire_chat_template_open";
    required(chat, call, "chat");
    const std::string folder = c_api::string_or_empty(model_folder);
    if (!folder.empty()) c_api::require_folder(folder, call, "model_folder");
    std::unique_ptr<ChatTemplate> loaded = ChatTemplate::of_file(c_api::required_string(jinja_path, call, "jinja_path"), folder);
    *chat = new tilefire_chat_template{std::move(loaded)};
  });
}

void tilefire_chat_template_free(tilefire_chat_template* chat) { delete chat; }

tilefire_status tilefire_chat_render(const tilefire_chat_template* chat, const tilefire_chat_message* messages,
                                     size_t message_count, int add_generation_prompt, char** text, size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_chat_render";
    const ChatTemplate& t = *required(chat, call, "chat").chat;
    require_text_outputs(text, length, call);
    if (!messages && message_count)
      throw InputError(std::string(call) + ": messages is NULL with a count of " + std::to_string(message_count));
    std::vector<ChatMessage> conversation;
    for (size_t i = 0; i < message_count; ++i) {
      const std::string which = "messages[" + std::to_string(i) + "]";
      if (!messages[i].role) throw InputError(std::string(call) + ": " + which + ".role is NULL");
      if (!messages[i].content) throw InputError(std::string(call) + ": " + which + ".content is NULL");
      conversation.push_back({messages[i].role, messages[i].content});
    }
    c_api::hand_out_text(t.render(conversation, add_generation_prompt != 0), text, length);
  });
}

tilefire_status tilefire_chat_render_json(const tilefire_chat_template* chat, const char* messages_json,
                                          const char* variables_json, int add_generation_prompt, char** text,
                                          size_t* length) {
  return guarded([&] {
    const char* call = "tilefire_chat_render_json";
    const ChatTemplate& t = *required(chat, call, "chat").chat;
    require_text_outputs(text, length, call);
    const std::string rendered = t.render_json(c_api::required_string(messages_json, call, "messages_json"), add_generation_prompt != 0,
                                               variables_json ? std::string_view(variables_json) : std::string_view("{}"));
    c_api::hand_out_text(rendered, text, length);
  });
}

tilefire_status tilefire_chat_end_of_reply_tokens(const tilefire_chat_template* chat,
                                                  const tilefire_tokenizer* tokenizer, int32_t** tokens,
                                                  size_t* count) {
  return guarded([&] {
    const char* call = "tilefire_chat_end_of_reply_tokens";
    const ChatTemplate& t = *required(chat, call, "chat").chat;
    const Tokenizer& tok = required(tokenizer, call, "tokenizer").tokenizer;
    required(tokens, call, "tokens");
    required(count, call, "count");
    c_api::hand_out_tokens(t.end_of_reply_tokens(tok), tokens, count);
  });
}

}  // extern "C"
