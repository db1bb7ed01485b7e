#pragma once
// What a reply is held to, from `tilefire run`'s and `tilefire chat`'s flags (--json-object, --json-schema
// FILE, --regex, --choices, --grammar, --grammar-file; every chat turn's reply keeps to it) or from a
// served request's response_format / structured_outputs (serve_requests.cpp): a JSON object, a JSON text
// a schema accepts, a text a pattern matches (a regex, one of a list's texts) or a grammar derives.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "tilefire/engine.h"
#include "tilefire/json_constraint.h"  // TokenTrie
#include "tilefire/json_schema.h"
#include "tilefire/reply_grammar.h"
#include "tilefire/reply_pattern.h"

namespace tilefire::cli {

// JSON ends where its value closes, a pattern or a grammar where nothing can follow or at an ending token
// where the text is whole; a reply cut before (max tokens, a stop string) is a prefix of one.
struct ReplyFormat {
  // What gave it, in messages: "--regex", "response_format json_schema"; empty: a plain-text reply.
  std::string named;
  std::shared_ptr<const JsonSchema> schema;     // a JSON text it accepts
  std::shared_ptr<const ReplyPattern> pattern;  // a regex's or a list of texts'
  std::shared_ptr<const ReplyGrammar> grammar;  // a GBNF grammar's
  // None of the three (and named): a JSON object.

  explicit operator bool() const { return !named.empty(); }
  // Where a reply held to it ends, for a message: "value closes", "pattern lets it", "grammar lets it".
  std::string ends_where() const;
  // Makes `request`'s reply keep to it (the constrain_to_* of its kind) over `tokens`, with the model's
  // `eos_tokens`; JSON with whitespace runs of at most `json_whitespace` bytes. Call it after
  // request.stop_tokens and stop_when are set: the constraint keeps both.
  void constrain(GenerateRequest& request, std::shared_ptr<const TokenTrie> tokens, const std::vector<int32_t>& eos_tokens,
                 uint32_t json_whitespace) const;
};

// The flags of run and chat: their lines of --help, and the names Args takes.
extern const char* const kReplyFormatHelp;
std::vector<std::string> reply_format_switches();
std::vector<std::string> reply_format_valued();

// The flags' format for `command` ("tilefire run"). InputError naming the flag and what is wrong: two
// formats at once, a regex, choices, grammar or schema that does not compile, a file that cannot be read.
ReplyFormat reply_format_of_flags(const Args& args, const std::string& command);
// --json-whitespace N (default kMostJsonWhitespace); InputError when it is given without a JSON format.
uint32_t json_whitespace_of_flags(const Args& args, const ReplyFormat& format, const std::string& command);

}  // namespace tilefire::cli
