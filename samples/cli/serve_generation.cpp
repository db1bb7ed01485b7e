#include "serve_generation.h"

#include <algorithm>
#include <ctime>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "http.h"
#include "serve_chat_reply.h"
#include "serve_logprobs.h"
#include "serve_requests.h"
#include "stop_text.h"
#include "stream_writer.h"
#include "tilefire/errors.h"

namespace tilefire::cli {
namespace {

using nlohmann::json;

// How much of `bytes` ends in whole UTF-8 characters: an incomplete one at the end waits for its next
// bytes (the text of a model without a tokenizer streams a byte per token).
size_t whole_characters(const std::string& bytes) {
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const unsigned char byte = static_cast<unsigned char>(bytes[bytes.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back for its lead
    const size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? bytes.size() - back : bytes.size();
  }
  return bytes.size();
}

// A streamed reply: `event` makes a piece of its text into what goes to the client, on the generating
// thread as the piece comes (so it can carry the logprobs of the tokens that made it); `write` sends that
// (false: the client has gone) on the reply's StreamWriter thread, so a client that stops reading never
// holds up the engine (nor, with --sequences, the other clients' tokens).
struct StreamedReply {
  std::function<std::string(const std::string& piece)> event;  // "": nothing to send for it yet
  std::function<bool(const std::string& event)> write;
};
void add_event(StreamWriter& writer, std::string event) {
  if (!event.empty()) writer.add(std::move(event));
}

// One generation on the engine, its text streamed through `streamed` (a client gone, or one that closed
// its side, `fd`, ends the generation); `write` has run for the last time when this returns. Without
// `streamed`, returns the whole text, cut at a stop string. Also says whether the server's stopping cut
// the generation short.
struct Generated {
  GenerateResult result{};
  std::string text{};
  bool cut_short = false;
  bool stream_broken = false;  // a streamed reply's writer gave the client up: pieces of it never went out
  // Its client left (closed its side, or its stream's writes gave up): the generation may have been cut
  // anywhere, before its prompt was scored too, and nothing reads its reply.
  bool client_left = false;
  // With --reasoning-parser: what each token added to the reply's text (markers written, before stop
  // strings cut it; what a stream held to the end goes with the last), for the usage's count of thinking.
  std::vector<std::string> token_texts{};
};
Generated generate(Served& served, int fd, GenerateRequest request, const std::vector<std::string>& stops,
                   const StreamedReply* streamed, const ReplyFormat& reply_format, const ThinkingTokens* thinking,
                   const std::map<int32_t, std::string>* markers) {
  // In flight from here (its wait for the engine included) until it has run, or has thrown.
  struct InFlight {
    ServeMetrics& metrics;
    bool ended = false;
    explicit InFlight(ServeMetrics& m) : metrics(m) { metrics.generation_started(); }
    void end(const GenerateResult& result) {
      metrics.generation_ended(result);
      ended = true;
    }
    ~InFlight() {
      if (!ended) metrics.generation_failed();
    }
  } in_flight(served.metrics);
  std::optional<StopText> stop_text;
  if (!stops.empty()) stop_text.emplace(stops);
  std::optional<StreamingText> stream;
  std::string held_bytes;  // without a tokenizer: bytes of a character not yet whole
  bool client_gone = false;
  std::optional<StreamWriter> writer;  // before the lock: a reply still being written does not hold the engine
  if (streamed) writer.emplace(streamed->write);
  std::unique_lock<std::mutex> lock(served.mutex, std::defer_lock);
  if (!served.batcher) {  // requests take turns
    lock.lock();
    if (stopping.load()) throw http::Error{503, stopping_reason(served)};  // a request that waited its turn
  }
  request.reuse_prefix = true;  // each keeps the cache's match of its prompt (with the batcher: a free slot's)
  request.speculation = served.speculation;  // with the batcher: by prompt lookup, checked in the batched steps
  // With the batcher, the callbacks below run on its thread while this one waits in run().
  if (served.tokenizer) stream.emplace(*served.tokenizer, request.prompt);
  // An ending token's text is left out (skip_special_tokens false writes the other special tokens), as
  // vLLM leaves out the token that ends a reply: an ending token always ends it (with ignore_eos, eos is
  // none, and its text is written).
  const std::vector<int32_t> ending = request.ending_tokens(served.engine->model().eos_tokens);
  auto text_of = [&](int32_t token) {
    if (served.tokenizer) {
      std::string piece = stream->add(token);
      if (markers) {
        const auto marker = markers->find(token);
        const bool ends = std::find(ending.begin(), ending.end(), token) != ending.end();
        if (marker != markers->end() && !ends) piece += marker->second;  // a special token, which the text leaves out
      }
      return piece;
    }
    held_bytes += bytes_text({token});
    const size_t whole = whole_characters(held_bytes);
    std::string text = held_bytes.substr(0, whole);
    held_bytes.erase(0, whole);
    return text;
  };
  // vLLM's min_tokens: a stop string counts where it ends in the text of token min_tokens or later (a
  // character whose bytes the tokens before it began counts as the token that completes it).
  auto shown = [&](const std::string& piece, bool protected_piece = false) {
    return stop_text ? stop_text->add(piece, protected_piece) : piece;
  };
  uint32_t tokens_out = 0;
  // Not streamed, with stop strings or special markers: the reply as its pieces give it (a whole decoding
  // would leave the markers out).
  const bool by_pieces = stop_text || (markers && !markers->empty());
  std::string shown_text;
  std::vector<std::string> token_texts;
  const bool counts_thinking = served.reasoning_parser != ReasoningParser::none;
  request.on_token = [&](int32_t token) {
    std::string text = text_of(token);
    if (counts_thinking) token_texts.push_back(text);
    const std::string piece = shown(std::move(text), ++tokens_out < request.min_new_tokens);
    if (writer && !piece.empty()) add_event(*writer, streamed->event(piece));
    if (!writer && by_pieces) shown_text += piece;
  };
  // Whether the client has left: its stream's writes gave up, or its side of the connection closed.
  auto client_left = [&] {
    client_gone = client_gone || (writer && writer->gone()) || http::peer_closed(fd);
    return client_gone;
  };
  request.stop_when = [&](const std::vector<int32_t>&) { return client_left() || stopping.load() || (stop_text && stop_text->stopped()); };
  // The request's allowed_token_ids (set by its parser), kept beside a format's constraint: a token must be
  // allowed by both.
  std::function<void(const std::vector<int32_t>&, std::vector<uint8_t>&)> only = std::move(request.allowed_tokens);
  const bool restricted = static_cast<bool>(only);
  request.allowed_tokens = nullptr;
  // After stop_when, which the constraint keeps, and the stop tokens (which a pattern allows where its text matches).
  if (reply_format) {
    auto constrain = [&](GenerateRequest& held) {
      reply_format.constrain(held, served.json_tokens, served.engine->model().eos_tokens, served.json_whitespace);
    };
    if (thinking) {
      hold_after_thinking(request, *thinking, request.ending_tokens(served.engine->model().eos_tokens), constrain);
    } else {
      constrain(request);
    }
  }
  if (only && !request.allowed_tokens) {
    request.allowed_tokens = std::move(only);
  } else if (only) {
    request.allowed_tokens = [format = std::move(request.allowed_tokens), only = std::move(only)](const std::vector<int32_t>& generated,
                                                                                                 std::vector<uint8_t>& allowed) {
      format(generated, allowed);
      std::vector<uint8_t> listed(allowed.size(), 0);
      only(generated, listed);
      for (size_t t = 0; t < allowed.size(); ++t) allowed[t] = allowed[t] && listed[t];
    };
  }
  // max_tokens 0 with nothing to score runs nothing (generate() returns at once; a batch would refuse it),
  // and neither does a request whose client left while it waited for its turn ("stopped").
  auto nothing_run = [&](const char* finish_reason) {
    GenerateResult none;
    none.prompt_tokens = request.prompt;
    none.finish_reason = finish_reason;
    return none;
  };
  const bool runs = request.max_new_tokens > 0 || request.prompt_logprobs > 0;
  // A choice the list leaves empty is named by the request's field (the engine names its own callback).
  auto run = [&] {
    try {
      // The batcher asks while the request waits for a sequence and while its prompt is prefilled. (Not
      // whether the server stops: a request waiting then is refused with 503, and one being prefilled
      // ends at its first token, as every generation in flight.)
      if (served.batcher) return served.batcher->run(request, client_left);
      return client_left() ? nothing_run("stopped") : served.engine->generate(request);
    } catch (const InputError& e) {
      const std::string what = e.what(), asked = "GenerateRequest::allowed_tokens, asked for generated token ";
      const size_t at = what.find(asked);
      if (!restricted || at == std::string::npos || what.find("allowed no token") == std::string::npos) throw;
      const std::string token = what.substr(at + asked.size(), what.find(',', at + asked.size()) - at - asked.size());
      throw InputError("'allowed_token_ids' leaves no token to choose for generated token " + token +
                       (reply_format ? " beside " + reply_format.named : std::string()) +
                       (what.find("min_new_tokens") != std::string::npos ? " while min_tokens holds back the ending tokens" : ""));
    }
  };
  Generated generated{.result = !runs ? nothing_run("length") : run()};
  if (lock.owns_lock()) lock.unlock();  // the next request's turn while this reply's last pieces are written
  const GenerateResult& result = generated.result;
  generated.client_left = client_gone;
  in_flight.end(result);
  generated.cut_short = result.finish_reason == "stopped" && stopping.load() && !(stop_text && stop_text->stopped());
  // What the stream held to the end: unfinished characters, and an ending token's text where it did not end the reply.
  // (Decoding the reply whole once more: only where a stream, pieces or a count read it.)
  const std::string unsaid = !(writer || by_pieces || counts_thinking) ? ""
                             : served.tokenizer ? stream->finish()
                                                : held_bytes;
  if (counts_thinking && !token_texts.empty()) token_texts.back() += unsaid;
  generated.token_texts = std::move(token_texts);
  if (writer) {
    std::string rest = shown(unsaid);
    if (stop_text) rest += stop_text->finish();
    if (!rest.empty() && !client_gone) add_event(*writer, streamed->event(rest));
    writer->finish();
    generated.stream_broken = writer->gone();
  } else if (by_pieces) {  // what the stop strings let through, markers written, as a stream would have given it
    generated.text = shown_text + shown(unsaid) + (stop_text ? stop_text->finish() : "");
  } else {  // the whole reply at once
    generated.text = served.tokenizer ? served.tokenizer->continuation(result.prompt_tokens, result.tokens) : bytes_text(result.tokens);
  }
  return generated;
}

// OpenAI's finish reasons: "stop" for a stop token or string, "length" for max_tokens, a full context, or
// a reply the server's stopping cut short.
const char* openai_finish_reason(const Generated& generated) {
  const std::string& reason = generated.result.finish_reason;
  return !generated.cut_short && (reason == "eos" || reason == "stopped") ? "stop" : "length";
}

// The text a token adds after its context, as a reply's logprobs name it: decoded after the context's last
// few tokens (a SentencePiece tokenizer drops a text's first space), special tokens written out; the
// tokens' bytes for a model without a tokenizer.
std::string token_text(const Served& served, const std::vector<int32_t>& context, int32_t token) {
  if (!served.tokenizer) return bytes_text({token});
  constexpr size_t kWindow = 8;
  std::vector<int32_t> window(context.end() - std::min(context.size(), kWindow), context.end());
  const std::string before = served.tokenizer->decode(window);
  window.push_back(token);
  const std::string after = served.tokenizer->decode(window);
  if (after.compare(0, before.size(), before) == 0) return after.substr(before.size());
  return served.tokenizer->decode({token});  // the token completed a character the window had cut
}

// Runs `run(i)` for each of `n` choices: together on a thread each when `together` (--sequences: they
// decode in one batch), else one after another on this thread (requests in turn would queue for the
// engine anyway). Rethrows the first failure once every choice has ended.
std::vector<Generated> run_choices(uint32_t n, bool together, const std::function<Generated(uint32_t)>& run) {
  std::vector<Generated> generated(n);
  if (n == 1 || !together) {
    for (uint32_t i = 0; i < n; ++i) generated[i] = run(i);
    return generated;
  }
  std::vector<std::exception_ptr> failures(n);
  std::vector<std::thread> threads;
  try {
    for (uint32_t i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        try {
          generated[i] = run(i);
        } catch (...) {
          failures[i] = std::current_exception();
        }
      });
  } catch (...) {  // a thread that could not start: the others end before the failure leaves
    for (std::thread& thread : threads) thread.join();
    throw;
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
  return generated;
}

// The usage of a reply's choices, `per_prompt` of each prompt in turn: each prompt once, every choice's
// tokens. OpenAI's prompt_tokens_details.cached_tokens: of those prompt tokens, the ones not prefilled
// (the KV cache held them, or they were copied from another sequence's slot: reused_tokens), the fewest
// of a prompt's choices (the others copy what the first prefilled, whichever came first). With
// `reasoning_tokens` (each choice's thinking tokens: a chat's with --reasoning-parser), OpenAI's
// completion_tokens_details, their sum.
json usage(const std::vector<Generated>& choices, uint32_t per_prompt, const std::vector<size_t>* reasoning_tokens = nullptr) {
  size_t prompt = 0, completion = 0, cached = 0;
  for (size_t c = 0; c < choices.size(); ++c) {
    completion += choices[c].result.tokens.size();
    if (c % per_prompt != 0) continue;
    prompt += choices[c].result.prompt_tokens.size();
    uint32_t fewest = choices[c].result.reused_tokens;
    for (size_t j = c + 1; j < c + per_prompt && j < choices.size(); ++j) fewest = std::min(fewest, choices[j].result.reused_tokens);
    cached += fewest;
  }
  json counts = {{"prompt_tokens", prompt},
                 {"completion_tokens", completion},
                 {"total_tokens", prompt + completion},
                 {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  if (reasoning_tokens) {
    size_t reasoning = 0;
    for (size_t count : *reasoning_tokens) reasoning += count;
    counts["completion_tokens_details"] = {{"reasoning_tokens", reasoning}};
  }
  return counts;
}

std::string summary_of(const std::vector<Generated>& choices, uint32_t per_prompt) {
  std::string summary =
      choices.size() == 1 ? std::to_string(choices[0].result.tokens.size()) + " tokens, " + choices[0].result.finish_reason
                          : std::to_string(choices.size()) + " choices, " + usage(choices, per_prompt).at("completion_tokens").dump() + " tokens";
  for (const Generated& g : choices)  // the reply is whole; the log says why it took longer
    if (!g.result.draft_error.empty()) return summary + "; speculation stopped partway: " + g.result.draft_error;
  return summary;
}

}  // namespace

void serve_generation(Served& served, int fd, json request_body, bool chat, int& status, std::string& summary,
                      const std::function<json(const json&)>& reshape, ResponsesStream* responses_stream) {
  const ParsedRequest parsed = chat ? parse_chat_request(request_body, served.tokenizer.get(), served.chat_template.get(),
                                                         served.end_of_reply, served.engine->model(), served.tool_call_parser)
                                    : parse_completion_request(request_body, served.tokenizer.get(), served.engine->model());
  request_body = json();  // what the reply needs is parsed; the body (some 30 times its text) is not kept through the generation
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + (parsed.request_id.empty() ? std::to_string(++served.requests) : parsed.request_id);
  const long long created = static_cast<long long>(std::time(nullptr));
  const char* object = chat ? "chat.completion" : "text_completion";
  const uint32_t per_prompt = parsed.choices;
  const uint32_t n = uint32_t(parsed.prompts.size()) * per_prompt;  // choice c: prompt c / per_prompt
  // A choice: a chat's whole message, or a stream chunk's delta; a completion's text.
  auto choice = [&](uint32_t index, const json& content, const json& finish_reason, bool chunk) {
    json c = {{"index", index}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
    if (chat) c[chunk ? "delta" : "message"] = content;
    else c["text"] = content;
    return c;
  };
  // A chat choice's text becomes its message through a reader of its own: the thinking split off, the
  // content read for calls. A reply a format holds is held after the thinking where the model's tags are
  // tokens (serve_thinking_first.h), else from its first token, with no thinking.
  const ThinkingTokens* thinking = chat && parsed.reply_format && served.thinking ? &*served.thinking : nullptr;
  const ReasoningParser reasoning = parsed.reply_format && !thinking ? ReasoningParser::none : served.reasoning_parser;
  // A reply the parser reads for calls keeps its special markers (vLLM's mistral parser keeps special tokens).
  // skip_special_tokens false writes every special token (the call markers among them).
  const std::map<int32_t, std::string>* markers = !parsed.skip_special_tokens ? &served.special_texts
                                                  : chat && parsed.tool_calling.choice == ToolCalling::Choice::automatic ? &served.call_markers
                                                                                                                          : nullptr;
  std::vector<ChatReplyReader> readers;
  readers.reserve(n);
  for (uint32_t i = 0; chat && i < n; ++i) readers.emplace_back(parsed.tool_calling, reasoning);
  // vLLM's include_reasoning false: the thinking is split off and left out (its tokens still counted).
  auto without_thinking = [&](json message) {
    if (!parsed.include_reasoning) message.erase("reasoning_content");
    return message;
  };
  // A chat's usage counts its thinking tokens where the server splits thinking off (none in a reply a format
  // holds from its first token).
  auto usage_of = [&](const std::vector<Generated>& generated) {
    if (!chat || served.reasoning_parser == ReasoningParser::none) return usage(generated, per_prompt);
    std::vector<size_t> reasoning_tokens;
    for (const Generated& g : generated)
      reasoning_tokens.push_back(reasoning_token_count(reasoning, g.token_texts));
    return usage(generated, per_prompt, &reasoning_tokens);
  };
  // Choice c is of prompt c / per_prompt and draws from the request's seed + c % per_prompt: each prompt's
  // samples, each repeatable with a seed.
  auto request_of = [&](uint32_t c) {
    GenerateRequest r = parsed.request;
    r.prompt = parsed.prompts[c / per_prompt];
    r.sampling.seed += c % per_prompt;
    return r;
  };

  const TokenText text_of = [&](const std::vector<int32_t>& context, int32_t token) { return token_text(served, context, token); };
  // An echoed prompt as the model read it: its tokens' texts, which its logprobs entries and their
  // text_offset name (a tokenizer's start token written out).
  std::vector<std::string> echoed(parsed.prompts.size());  // by prompt
  for (size_t p = 0; parsed.echo && p < parsed.prompts.size(); ++p) {
    std::vector<int32_t> before;  // the prompt's tokens before the one read
    for (int32_t token : parsed.prompts[p]) {
      echoed[p] += text_of(before, token);
      before.push_back(token);
    }
  }
  if (!parsed.stream) {
    const std::vector<Generated> generated =
        run_choices(n, served.batcher != nullptr, [&](uint32_t i) {
          return generate(served, fd, request_of(i), parsed.stops, nullptr, parsed.reply_format, thinking, markers);
        });
    json choices = json::array();
    for (uint32_t i = 0; i < n; ++i) {
      std::string finish_reason = openai_finish_reason(generated[i]);
      const json message = chat ? without_thinking(readers[i].message(generated[i].text, finish_reason)) : json(echoed[i / per_prompt] + generated[i].text);
      json reply_choice = choice(i, message, finish_reason, false);
      if (parsed.logprobs) {
        ReplyLogprobs logprobs(chat, parsed.top_logprobs, parsed.prompts[i / per_prompt], text_of);
        if (parsed.echo && !generated[i].client_left) logprobs.add_prompt(generated[i].result);
        logprobs.add_all(generated[i].result);
        reply_choice["logprobs"] = logprobs.take();
      }
      choices.push_back(std::move(reply_choice));
    }
    const json body = {{"id", id}, {"object", object}, {"created", created}, {"model", served.name},
                       {"choices", choices}, {"usage", usage_of(generated)}};
    status = 200;
    summary = summary_of(generated, per_prompt);
    http::write_all(fd, json_response(200, reshape ? reshape(body) : body));
    return;
  }
  // Events: a chunk per piece of text of a choice (with the logprobs of its tokens generated since its
  // chunk before, when asked), then each choice's chunk with its finish reason (and the logprobs of tokens
  // whose text a stop string held back), the last with the usage, then [DONE].
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  std::vector<std::optional<ReplyLogprobs>> logprobs(n);
  std::vector<GenerateRequest> generations;
  for (uint32_t i = 0; i < n; ++i) {
    generations.push_back(request_of(i));
    generations[i].prompt_logprobs = 0;  // an echoed prompt's scores come first, from a run of their own below
    if (!parsed.logprobs) continue;
    logprobs[i].emplace(chat, parsed.top_logprobs, parsed.prompts[i / per_prompt], text_of);
    generations[i].on_probabilities = [&logprobs, i](const TokenProbability& chosen, const std::vector<TokenProbability>& most_probable) {
      logprobs[i]->add(chosen, most_probable);
    };
  }
  auto chunk = [&](uint32_t i, const json& content, const json& finish_reason) {
    json body{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", served.name},
              {"choices", {choice(i, content, finish_reason, true)}}};
    if (parsed.include_usage) body["usage"] = nullptr;  // the usage comes in a chunk of its own
    return body;
  };
  // Only where choice i's generation is (or has ended): the writers' threads never touch `logprobs`.
  auto with_logprobs = [&](uint32_t i, json body) {
    if (logprobs[i] && logprobs[i]->has_pending()) body["choices"][0]["logprobs"] = logprobs[i]->take();
    return body;
  };
  auto event = [&](const json& body) {
    return responses_stream ? responses_stream->events(body) : http::event(body.dump(-1, ' ', false, json::error_handler_t::replace));
  };
  auto send = [&](const json& body) { return http::write_all(fd, event(body)); };
  // The head goes with the first piece of text: a request refused before it (a prompt the engine refuses, a
  // server stopping) is answered with its own status, not a stream. The choices' writer threads share the
  // socket: one event at a time, under `writing`.
  std::mutex writing;
  bool head_sent = false, open = true;
  std::vector<std::string> heads;  // each chat choice's first chunk, made before any piece of it (a Responses stream numbers its events)
  for (uint32_t i = 0; chat && i < n; ++i) heads.push_back(event(chunk(i, readers[i].head(), nullptr)));
  auto send_head = [&] {
    if (head_sent) return;
    head_sent = true;
    status = 200;
    open = http::write_all(fd, http::event_stream_head());
    for (size_t i = 0; open && i < heads.size(); ++i) open = http::write_all(fd, heads[i]);
  };
  try {
    std::vector<StreamedReply> streamed;
    for (uint32_t i = 0; i < n; ++i)
      streamed.push_back(StreamedReply{
          [&, i](const std::string& piece) {
            const json delta = chat ? without_thinking(readers[i].delta(piece)) : json(piece);
            if (chat ? delta.empty() : piece.empty()) return std::string();  // held back: its logprobs go with a later chunk
            return event(with_logprobs(i, chunk(i, delta, nullptr)));
          },
          [&](const std::string& piece_event) {
            std::lock_guard<std::mutex> lock(writing);
            send_head();
            return open = open && http::write_all(fd, piece_event);
          }});
    // With echo, a choice's first chunk is its prompt's text, with the prompt's scores when logprobs are
    // asked for: those come from a run that scores the prompt and generates nothing (its cache then holds
    // the prompt, which the generation reuses), so they lead the choice's entries as they lead a whole reply's.
    auto echo_first = [&](uint32_t i) {
      if (logprobs[i]) {
        GenerateRequest scoring = request_of(i);
        scoring.max_new_tokens = 0;
        const Generated scored = generate(served, fd, scoring, {}, nullptr, ReplyFormat{}, nullptr, nullptr);
        if (!scored.client_left) logprobs[i]->add_prompt(scored.result);
      }
      streamed[i].write(streamed[i].event(echoed[i / per_prompt]));
    };
    const std::vector<Generated> generated = run_choices(n, served.batcher != nullptr, [&](uint32_t i) {
      if (parsed.echo) echo_first(i);
      return generate(served, fd, generations[i], parsed.stops, &streamed[i], parsed.reply_format, thinking, markers);
    });
    send_head();  // every writer has finished: no lock is needed from here
    for (const Generated& g : generated) open = open && !g.stream_broken;  // a reply with a gap must not end as if whole
    for (uint32_t i = 0; open && i < n; ++i) {
      std::string finish_reason = openai_finish_reason(generated[i]);
      if (responses_stream) responses_stream->ending(finish_reason);  // before the held deltas it closes items with
      if (chat)  // what the reader held back: thinking and text that began no call, then the calls whole
        for (const json& delta : readers[i].finish(finish_reason))
          if (const json shown = without_thinking(delta); !shown.empty()) open = open && send(chunk(i, shown, nullptr));
      if (!open) break;
      json last = with_logprobs(i, chunk(i, chat ? json::object() : json(""), finish_reason));
      if (i + 1 == n && !parsed.include_usage) last["usage"] = usage_of(generated);
      open = send(last);
    }
    if (open && parsed.include_usage)  // OpenAI's stream_options.include_usage: the usage alone, no choices
      open = send(json{{"id", id}, {"object", chunk_object}, {"created", created}, {"model", served.name},
                       {"choices", json::array()}, {"usage", usage_of(generated)}});
    if (open) open = http::write_all(fd, responses_stream ? responses_stream->finish() : http::event("[DONE]"));
    summary = summary_of(generated, per_prompt) + ", streamed" + (open ? "" : ", client gone");
  } catch (const http::Error& e) {  // a later choice refused its turn (the server stopping) after the head
    if (!head_sent) throw;
    status = e.status;
    send(error_body(status, e.message));
    summary = "streamed, then failed: " + e.message;
  } catch (const std::exception& e) {
    if (!head_sent) throw;  // answered as any refusal
    const bool refused = dynamic_cast<const InputError*>(&e) != nullptr;  // else a device, transport or internal fault
    status = refused ? 400 : 500;
    send(error_body(status, e.what()));  // the head is out: the error goes as an event
    summary = std::string("streamed, then failed: ") + e.what();
    if (is_engine_fault(e)) engine_failed(served, e);
  }
}

}  // namespace tilefire::cli
