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
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    throw InputError(origin + ": not valid JSON: " + error.what());
  }
}

}  // namespace tilefire
