// read_json_file (graph/json_file.h).
#include "graph/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/model_spec.h"  // is_special_file
#include "tilefire/errors.h"

namespace tilefire {

std::string read_json_file_text(const std::filesystem::path& path, const std::string& origin) {
  std::error_code ignored;
  if (is_special_file(path) || std::filesystem::is_directory(path, ignored)) throw InputError(origin + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(origin + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& origin, bool refuse_duplicate_keys) {
  const std::string document = read_json_file_text(path, origin);
  return parse_json_text(document.data(), document.data() + document.size(), origin, refuse_duplicate_keys);
}

void throw_invalid_json(const nlohmann::json::exception& error, const std::string& origin) {
  // what() is "[json.exception.<kind>.<id>] <message>": the message alone says where and why (a
  // syntax error's line and column, or "number overflow parsing '1e400'").
  std::string message = error.what();
  const size_t bracket = message.find("] ");
  if (message.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) message.erase(0, bracket + 2);
  throw InputError(origin + ": not valid JSON: " + message);
}

nlohmann::json parse_json_text(const char* begin, const char* end, const std::string& origin, bool refuse_duplicate_keys) {
  std::vector<std::set<std::string>> keys_of_open_objects;  // innermost last
  std::string duplicate;
  const nlohmann::json::parser_callback_t check_keys = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::object_start) keys_of_open_objects.emplace_back();
    if (event == nlohmann::json::parse_event_t::object_end && !keys_of_open_objects.empty()) keys_of_open_objects.pop_back();
    if (event == nlohmann::json::parse_event_t::key && !keys_of_open_objects.empty() &&
        !keys_of_open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  try {
    nlohmann::json document = refuse_duplicate_keys ? nlohmann::json::parse(begin, end, check_keys) : nlohmann::json::parse(begin, end);
    if (!duplicate.empty()) throw InputError(origin + ": the key '" + duplicate + "' is given twice in one object");
    return document;
  } catch (const nlohmann::json::exception& error) {
    throw_invalid_json(error, origin);
  }
}

}  // namespace tilefire
