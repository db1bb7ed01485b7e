// read_json_file (graph/json_file.h).
#include "graph/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "graph/model_spec.h"  // is_special_file
#include "tilefire/errors.h"

namespace tilefire {

nlohmann::json read_json_file(const std::filesystem::path& path, const std::string& origin) {
  std::error_code ignored;
  if (is_special_file(path) || std::filesystem::is_directory(path, ignored)) throw InputError(origin + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(origin + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string document = text.str();
  return parse_json_text(document.data(), document.data() + document.size(), origin);
}

nlohmann::json parse_json_text(const char* begin, const char* end, const std::string& origin) {
  try {
    return nlohmann::json::parse(begin, end);
  } catch (const nlohmann::json::exception& error) {
    // what() is "[json.exception.<kind>.<id>] <message>": the message alone says where and why (a
    // syntax error's line and column, or "number overflow parsing '1e400'").
    std::string message = error.what();
    const size_t bracket = message.find("] ");
    if (message.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) message.erase(0, bracket + 2);
    throw InputError(origin + ": not valid JSON: " + message);
  }
}

}  // namespace tilefire
