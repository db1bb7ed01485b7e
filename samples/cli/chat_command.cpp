// tilefire chat: a conversation with an instruct model, one user message per line of standard input, each
// reply streamed as it is generated. Earlier turns stay in the KV cache (GenerateRequest::reuse_prefix), so
// a turn prefills only what the template adds since the last one.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "args.h"
#include "backend_flags.h"
#include "chat_flags.h"
#include "commands.h"
#include "model_folder.h"
#include "reply_format.h"
#include "sampling_flags.h"
#include "tilefire/engine.h"
#include "tilefire/tokenizer.h"

namespace tilefire::cli {

namespace {

const char* kChatHelp = R"(usage: tilefire chat --model DIR [flags]

Each line of standard input is a user message, put with the conversation so far in the model's chat
template (chat_template.jinja, tokenizer_config.json or chat_template.json); the reply prints as it is
generated and ends at the template's end of reply. A line ending in a backslash continues on the next.
"/reset" starts the conversation over, "/exit" or the end of input ends it. Earlier turns stay in the KV
cache: each turn prefills only what is new. With one of the format flags (--json-object, --regex, --grammar, ...), every
reply keeps to that format.

  --model DIR            Hugging Face folder with tokenizer.json and a chat template (required)
  --system TEXT          a system message first
  --messages FILE        the conversation so far: a JSON list of messages, or an object with "messages"
                         and the template's other variables ("tools", "enable_thinking", ...)
  --chat-template FILE   a Jinja chat template instead of the folder's
  --max-new-tokens N     tokens per reply at most (default 1024)
  --seed S               sampling seed (default 0; each turn draws from seed + turn); the sampling flags
                         follow the others below
  --threads N            worker threads (default: all cores; shared by the ranks under --tp, at least one each)
  --tp N                 tensor parallelism: N ranks of this process (cpu: thread groups; cuda: rank r on
                         GPU (--cuda-device + r) mod the visible GPUs). Not one rank per process under
                         mpirun: standard input reaches rank 0 only (use tilefire run there)
  --tp-timeout-ms N      a collective waiting longer for a peer stops with an error naming it (default 10000)
  --max-context N        KV-cache positions: the whole conversation must fit (default min(model, 4096))
  --schedule dataflow|bsp, --policy NAME
  --stats                after each reply, its tokens, the prompt tokens prefilled and reused, time to
                         first token and decode speed, on standard error
  --json                 one JSON object per turn instead of text: turn, prompt_tokens, reused_tokens,
                         tokens, text, finish_reason, ttft_ms, decode_tok_s
)";

// One message from standard input: a line, joined with the next while it ends in a backslash. False at
// the end of input.
bool read_message(std::string& message) {
  message.clear();
  std::string line;
  bool any = false;
  while (std::getline(std::cin, line)) {
    any = true;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      continue;
    }
    message += line;
    return true;
  }
  return any;
}

void print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int chat_command(int argc, char** argv) {
  std::vector<std::string> switches{"--json", "--stats", "--help"}, valued{"--model", "--system", "--messages", "--chat-template",
      "--max-new-tokens", "--seed", "--threads", "--max-context", "--schedule", "--policy",
      "--tp", "--tp-timeout-ms"};
  for (const std::string& flag : reply_format_switches()) switches.push_back(flag);
  for (const std::string& flag : reply_format_valued()) valued.push_back(flag);
  for (const std::string& flag : sampling_valued()) valued.push_back(flag);
  for (const std::string& flag : speculation_valued()) valued.push_back(flag);
  for (const std::string& flag : backend_switches()) switches.push_back(flag);
  for (const std::string& flag : backend_valued()) valued.push_back(flag);
  Args args("chat", switches, valued);
  args.parse(argc, argv, 2);
  if (args.has("--help")) {
    std::fputs(kChatHelp, stdout);
    std::fputs(kReplyFormatHelp, stdout);
    std::fputs(kSamplingHelp, stdout);
    std::fputs(kSpeculationHelp, stdout);
    std::fputs(kBackendHelp, stdout);
    return 0;
  }
  const std::string command = "tilefire chat";
  EngineOptions options;
  options.model_dir = args.text_or("--model", "");
  if (options.model_dir.empty()) throw InputError(command + ": --model DIR is required (a folder with tokenizer.json and a chat template)");
  options.threads = uint32_t(args.unsigned_or("--threads", 0, 1, 256));
  options.schedule = parse_schedule(args.text_or("--schedule", "dataflow"));
  options.policy = args.text_or("--policy", "");
  options.max_context = uint32_t(args.unsigned_or("--max-context", 0, 1, 1u << 24));
  options.tp = uint32_t(args.unsigned_or("--tp", 1, 1, 256));
  options.tp_timeout_ms = uint32_t(args.unsigned_or("--tp-timeout-ms", 10000, 1, 3600 * 1000));
  refuse_tp_timeout_alone(args, options);
  apply_backend_flags(args, options);
  const Sampling sampling = sampling_of_flags(args, command);  // a bad value is named before anything loads
  const Speculation speculation = speculation_of_flags(args, command, options);
  const ReplyFormat reply_format = reply_format_of_flags(args, command);
  const uint32_t json_whitespace = json_whitespace_of_flags(args, reply_format, command);

  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::of_model_folder(options.model_dir);
  Conversation conversation = begin_conversation(args, options.model_dir, tokenizer.get(), command);
  const nlohmann::ordered_json first_messages = conversation.messages;
  GenerateRequest request;
  request.max_new_tokens = uint32_t(args.unsigned_or("--max-new-tokens", 1024, 1, 1u << 24));
  request.sampling = sampling;
  request.speculation = speculation;
  const uint64_t seed = args.unsigned_or("--seed", 0);
  request.stop_tokens = conversation.end_of_reply;
  request.reuse_prefix = true;
  const bool json = args.has("--json"), stats = args.has("--stats");

  // Every rank must run each turn's prompt, and a launcher gives standard input to rank 0 alone. Refused
  // before the model loads and the ranks meet, so a lone rank is refused at once too.
  if (options.tp > 1 && launched_as_one_of_several_ranks())
    throw InputError(command + ": --tp " + std::to_string(options.tp) + " with one rank per process (mpirun, or RANK and WORLD_SIZE): "
                     "standard input reaches rank 0 only, and every rank must run each message. Run chat without a "
                     "launcher, and --tp runs the ranks in this process; or use tilefire run with --chat or --messages");
  Engine engine(options);
  const ModelInfo& model = engine.model();
  if (!json)
    print("model: " + model.origin + " (" + model_shape(model) + "), " + std::to_string(engine.threads()) + (options.backend == Backend::cuda ? " CTAs" : " threads") +
          (options.tp > 1 ? ", " + std::to_string(options.tp) + " tensor-parallel ranks" : "") +
          "; a line is a message, /reset starts over, /exit ends\n");
  const bool interactive = isatty(STDIN_FILENO) && !json;
  // The vocabulary's bytes, for the constraint every reply keeps to (made once: it is the same each turn).
  std::shared_ptr<const TokenTrie> reply_tokens;
  if (reply_format) reply_tokens = std::make_shared<const TokenTrie>(vocabulary_bytes(tokenizer.get(), model.vocab));
  std::string message;
  // A turn is a reply of this conversation: /reset starts the count again, and lines that make no reply
  // (empty, dropped) take no number. A turn's sampling seed is --seed plus its number, so a conversation
  // replayed after /reset samples the same replies.
  uint64_t turn = 0;
  uint64_t messages_read = 0, messages_dropped = 0;  // a dropped message makes the exit status 2 at the end
  for (;;) {
    if (interactive) print("> ");
    if (!read_message(message) || message == "/exit") break;
    if (message == "/reset") {
      conversation.messages = first_messages;
      engine.reset();
      turn = 0;
      continue;
    }
    if (message.empty()) continue;
    ++messages_read;
    std::vector<int32_t> prompt;
    bool added = false;
    try {
      conversation.add("user", message, command + ": the message");  // nothing added when it throws
      added = true;
      prompt = tokenizer->encode(conversation.render(command), false);
      for (int32_t t : prompt)
        if (t < 0 || uint32_t(t) >= model.vocab)
          throw InputError(command + ": token " + std::to_string(t) + " of the conversation is outside the model's vocabulary");
      if (prompt.size() + 1 > model.max_context)
        throw InputError(command + ": the conversation is " + std::to_string(prompt.size()) + " tokens and the context holds " +
                         std::to_string(model.max_context) + " (--max-context): /reset to start over");
    } catch (const InputError& error) {  // this message cannot go on: say why, drop it, read the next
      if (added) conversation.messages.erase(conversation.messages.end() - 1);
      std::fprintf(stderr, "%s\n", error.what());
      ++messages_dropped;
      continue;
    }
    request.prompt = prompt;
    request.sampling.seed = seed + ++turn;
    StreamingText stream(*tokenizer, prompt);
    bool reply_shown = false;  // some of the reply's text is on standard output
    request.on_token = [&](int32_t token) {
      if (json) return;
      const std::string piece = stream.add(token);
      reply_shown = reply_shown || !piece.empty();
      print(piece);
    };
    if (reply_format) {  // a constraint holds one reply's state: a new one each turn
      request.allowed_tokens = nullptr;
      request.stop_when = nullptr;
      reply_format.constrain(request, reply_tokens, model.eos_tokens, json_whitespace);
    }
    GenerateResult result;
    try {
      result = engine.generate(request);
    } catch (const InputError& error) {  // the reply failed (its format past a bound, NaN logits): drop the message, go on
      if (reply_shown) print("\n");  // the error has a line of its own
      conversation.messages.erase(conversation.messages.end() - 1);
      std::fprintf(stderr, "%s: the reply to the message: %s\n", command.c_str(), error.what());
      ++messages_dropped;
      --turn;  // a message that makes no reply takes no number
      continue;
    }
    const std::string reply = tokenizer->continuation(prompt, result.tokens);  // special tokens (the end of reply) left out
    conversation.add("assistant", reply, command + ": the reply");
    if (json) {
      nlohmann::json line = {{"turn", turn}, {"prompt_tokens", result.prompt_tokens.size()}, {"reused_tokens", result.reused_tokens},
                             {"tokens", result.tokens}, {"text", reply}, {"finish_reason", result.finish_reason},
                             {"ttft_ms", result.ttft_ms}, {"decode_tok_s", result.decode_tok_s}};
      if (speculation.draft_tokens) {
        line["draft_tokens"] = result.draft_tokens;
        line["accepted_tokens"] = result.accepted_tokens;
      }
      print(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      print(stream.finish() + "\n");
    }
    if (stats)
      std::fprintf(stderr, "(%zu tokens, %s; prompt %zu tokens, %u reused; first token %.1f ms, %.1f tokens/s)\n", result.tokens.size(),
                   result.finish_reason.c_str(), result.prompt_tokens.size(), result.reused_tokens, result.ttft_ms, result.decode_tok_s);
    if (!result.draft_error.empty())  // the reply is whole; only its speed is not
      std::fprintf(stderr, "%s: warning: speculation stopped partway, the reply went on by decode steps: %s\n", command.c_str(),
                   result.draft_error.c_str());
    if (stats && speculation.draft_tokens)
      std::fprintf(stderr, "(speculation: %u of %u drafted tokens taken, %u steps after the first token)\n", result.accepted_tokens,
                   result.draft_tokens, result.decode_steps);
    if (result.finish_reason == "context") {
      std::fprintf(stderr, "%s: the context of %u positions is full: /reset to start over\n", command.c_str(), model.max_context);
    }
  }
  if (interactive) print("\n");
  if (messages_dropped == 0) return 0;
  std::fprintf(stderr, "%s: error: %llu of %llu messages were dropped (each with its reason above)\n", command.c_str(),
               static_cast<unsigned long long>(messages_dropped), static_cast<unsigned long long>(messages_read));
  return 2;
}

}  // namespace tilefire::cli
