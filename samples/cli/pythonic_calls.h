#pragma once
// Tool calls written as Python, the "pythonic" format that Llama 3.2 and Llama 4 are taught:
//   [get_weather(city='Paris', days=2), get_time()]
// a list of calls, each a function name and keyword arguments whose values are Python literals: strings
// (quoted either way, triple-quoted, raw or u-prefixed, with Python's escapes, adjacent ones joined),
// ints (decimal, or 0x, 0o, 0b within 64 bits; underscores between digits) and floats, True, False,
// None, and lists, tuples and dicts of them (a dict's keys strings); comments between them. Read without
// running Python, as ast.literal_eval reads each value (tests/e2e/pythonic_oracle.py compares them);
// anything else (a positional argument, a name, an expression, a repeated keyword, a bytes literal, an
// infinite float, a lone surrogate, a \N{name} escape) is no call. Line ends are Python's: "\r\n" and "\r"
// read as "\n". Differences on purpose, where Python's reading has no call:
// - a call's name is read as a tool's name, which may hold '-', begin with a digit, or be a Python keyword;
// - an argument's name may be a keyword (a tool's parameter may be named `from`);
// - a value JSON cannot hold makes no call even where a later copy of its dict key replaces it (Python's
//   dict would keep only the later value);
// and where Python reads one: a sign before a parenthesized number (-(1)), and names and whitespace
// outside ASCII are not read.
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tilefire::cli {

// The calls of `text`, which must be the list and nothing else but whitespace around it, as
// [{"name": N, "arguments": {...}}, ...] (JSON: tuples become lists, None null); none when the text is
// not such a list, is an empty one, or nests its values deeper than `most_nesting`.
std::optional<nlohmann::json> pythonic_calls(std::string_view text, int most_nesting);

}  // namespace tilefire::cli
