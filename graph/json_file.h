#pragma once
// A JSON document read from a file the user gave (a checkpoint's index, a device description, a trace).
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace tilefire {

// `text` as JSON. Throws InputError "<origin>: not valid JSON: <where and why>" for a syntax error or a
// number no double holds (1e400), without the JSON library's own exception names. With
// `refuse_duplicate_keys`, a key given twice in one object is an InputError naming it (the JSON library,
// like Python's, would keep the last silently: for a safetensors header, which of two entries is meant?).
nlohmann::json parse_json_text(const char* begin, const char* end, const std::string& origin, bool refuse_duplicate_keys = false);

// The document in `path`. Throws InputError, its message starting with `origin` (the path, or the flag
// and the path), when the path is a FIFO, a device or a folder (opening one could block), cannot be
// opened, or does not hold valid JSON.
nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& origin, bool refuse_duplicate_keys = false);

// The text of `path` with read_json_file's checks (a regular file, one that opens), for a reader that
// parses it itself (graph/tokenizer_json.cpp).
std::string read_json_file_text(const std::filesystem::path& path, const std::string& origin);

// Throws InputError "<origin>: not valid JSON: <the JSON library's message, without its exception name>".
[[noreturn]] void throw_invalid_json(const nlohmann::json::exception& error, const std::string& origin);

}  // namespace tilefire
