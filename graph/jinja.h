#pragma once
// The Jinja templates of chat models (tokenizer_config.json's "chat_template"), rendered as Hugging Face
// transformers' apply_chat_template renders them: Jinja2 in its sandbox with trim_blocks and lstrip_blocks,
// the loop-controls extension (break, continue), transformers' own tojson filter (json.dumps, no HTML
// escaping, keys in their order), and the globals raise_exception and strftime_now (docs/TOKENIZER.md).
//
// What a chat template uses is a small part of Jinja: if/for/set (and set blocks), macros, expressions with
// filters, tests, slices and method calls on strings, lists and dicts. A template that needs more (include,
// extends, blocks, a filter or method Tilefire does not have) is refused by name when it is parsed, so a
// prompt is never rendered differently from the model's training format without an error.
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tilefire::jinja {

struct Node;

// JSON text of a template's variables (messages, tools, ...). Python's json.loads keeps an integer past 64
// bits exact; Tilefire's integers have 64 bits, and nlohmann would silently make it a float. InputError
// "WHAT: ..." for such an integer, and for text that is not JSON.
nlohmann::ordered_json parse_variables_json(std::string_view text, const std::string& what);

class Template {
 public:
  // Parses `source`. InputError "ORIGIN: line N: ..." when it is not a template or uses what Tilefire does
  // not run. `origin` names the template in messages (a file and a key).
  Template(std::string_view source, std::string origin);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the variables of `context` (a JSON object; the order of keys is kept, as Python dicts keep
  // it, and tojson writes them in that order). `now` is what strftime_now formats. InputError "ORIGIN: line
  // N: ..." when rendering fails: raise_exception (its message), an undefined value used as a value, an
  // operation on values of the wrong types.
  std::string render(const nlohmann::ordered_json& context, const std::tm& now) const;
  std::string render(const nlohmann::ordered_json& context) const;  // now: the local time

  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  std::shared_ptr<const Node> root_;  // shared with the macros it defines
};

}  // namespace tilefire::jinja
