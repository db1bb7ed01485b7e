// What a reply is held to, and run's and chat's flags that give it.
#include "reply_format.h"

#include <algorithm>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace tilefire::cli {

const char* const kReplyFormatHelp = R"(  --json-object          the reply is a JSON object (serve's response_format json_object): only tokens that
                         keep it a prefix of one are chosen, and it ends where the object closes; not for a
                         folder whose tokenizer Tilefire does not read
  --json-schema FILE     the reply is a JSON text the JSON Schema in FILE accepts (serve's response_format
                         json_schema; the subset read is in docs/ARCHITECTURE.md), ending where it closes
  --json-whitespace N    with --json-object or --json-schema: whitespace runs of at most N bytes, 0 to 32
                         (default 32; 0: compact JSON)
  --regex REGEX          the reply is a text REGEX matches whole (serve's structured_outputs regex; the
                         ECMAScript subset a JSON Schema pattern takes, docs/ARCHITECTURE.md): it may end
                         (eos, a stop token) only where the text matches, and ends where nothing can follow
  --choices LIST         the reply is one of the texts of LIST, a JSON list ('["yes", "no"]'), each as written
  --grammar GBNF         the reply is a text the GBNF grammar derives from its rule root (llama.cpp's format;
                         serve's structured_outputs grammar; docs/ARCHITECTURE.md): it may end only where the
                         text is whole, and ends where nothing can follow
  --grammar-file FILE    the same, the grammar read from FILE
)";

namespace {

const char* const kFormatFlags[] = {"--json-object", "--json-schema", "--regex", "--choices", "--grammar", "--grammar-file"};

// --regex REGEX or --choices LIST as a compiled pattern (null without either); a bad one is an InputError
// naming its flag and what is wrong.
std::shared_ptr<const ReplyPattern> reply_pattern_of_flags(const Args& args, const std::string& command) {
  try {
    if (const auto regex = args.text("--regex")) return ReplyPattern::compile(*regex);
  } catch (const InputError& error) {
    throw InputError(command + ": --regex: " + error.what());
  }
  const auto listed = args.text("--choices");
  if (!listed) return nullptr;
  const nlohmann::json choices = nlohmann::json::parse(*listed, nullptr, false);
  if (!choices.is_array() || !std::all_of(choices.begin(), choices.end(), [](const nlohmann::json& c) { return c.is_string(); }))
    throw InputError(command + ": --choices takes a JSON list of texts, as '[\"yes\", \"no\"]', got " + listed->substr(0, 80));
  try {
    return ReplyPattern::of_choices(choices.get<std::vector<std::string>>());
  } catch (const InputError& error) {
    throw InputError(command + ": --choices: " + error.what());
  }
}

// --grammar GBNF or --grammar-file FILE as a compiled grammar (null without either), errors naming the flag.
std::shared_ptr<const ReplyGrammar> reply_grammar_of_flags(const Args& args, const std::string& command) {
  const char* flag = args.has("--grammar") ? "--grammar" : "--grammar-file";
  const std::optional<std::string> text = args.has("--grammar") ? args.text("--grammar") : args.file_text("--grammar-file");
  if (!text) return nullptr;
  try {
    return ReplyGrammar::compile(*text);
  } catch (const InputError& error) {
    throw InputError(command + ": " + flag + (args.has("--grammar-file") ? " " + *args.text("--grammar-file") : std::string()) + ": " +
                     error.what());
  }
}

}  // namespace

std::vector<std::string> reply_format_switches() { return {"--json-object"}; }

std::vector<std::string> reply_format_valued() {
  return {"--json-schema", "--json-whitespace", "--regex", "--choices", "--grammar", "--grammar-file"};
}

std::string ReplyFormat::ends_where() const {
  return pattern ? "pattern lets it" : grammar ? "grammar lets it" : "value closes";
}

void ReplyFormat::constrain(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, const std::vector<int32_t>& eos_tokens,
                            uint32_t json_whitespace) const {
  if (!*this) throw std::logic_error("ReplyFormat::constrain without a format");  // callers ask only with one
  if (pattern) constrain_to_pattern(request, std::move(tokens), pattern, eos_tokens);
  else if (grammar) constrain_to_grammar(request, std::move(tokens), grammar, eos_tokens);
  else if (schema) constrain_to_json_schema(request, std::move(tokens), schema, json_whitespace);
  else constrain_to_json(request, std::move(tokens), JsonTop::object, json_whitespace);
}

ReplyFormat reply_format_of_flags(const Args& args, const std::string& command) {
  ReplyFormat format;
  for (const char* flag : kFormatFlags) {
    if (!args.has(flag)) continue;
    if (!format.named.empty())
      throw InputError(command + ": " + format.named + " and " + flag + " both hold the reply to something: give one "
                       "of --json-object, --json-schema, --regex, --choices, --grammar and --grammar-file");
    format.named = flag;
  }
  format.pattern = reply_pattern_of_flags(args, command);
  format.grammar = reply_grammar_of_flags(args, command);
  if (const auto schema_text = args.file_text("--json-schema")) {
    try {
      format.schema = JsonSchema::compile(*schema_text);
    } catch (const InputError& error) {
      throw InputError(command + ": --json-schema " + *args.text("--json-schema") + ": " + error.what());
    }
  }
  return format;
}

uint32_t json_whitespace_of_flags(const Args& args, const ReplyFormat& format, const std::string& command) {
  if (args.has("--json-whitespace") && (!format || format.pattern || format.grammar))
    throw InputError(command + ": --json-whitespace goes with --json-object or --json-schema");
  return uint32_t(args.unsigned_or("--json-whitespace", kMostJsonWhitespace, 0, kMostJsonWhitespace));
}

}  // namespace tilefire::cli
