#include "args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace tilefire::cli {

namespace {

// 0 and 1e-06 rather than std::to_string's 0.000000 and 0.000001.
std::string number_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

}  // namespace

Args::Args(std::string command, std::vector<std::string> switches, std::vector<std::string> valued)
    : command_(std::move(command)), switches_(std::move(switches)), valued_(std::move(valued)) {}

void Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    // -h is --help, as at the top level, for every command that has --help.
    if (arg == "-h" && std::find(switches_.begin(), switches_.end(), "--help") != switches_.end()) arg = "--help";
    std::string value;
    bool inline_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    if (std::find(switches_.begin(), switches_.end(), arg) != switches_.end()) {
      if (inline_value) throw InputError("tilefire " + command_ + ": flag " + arg + " takes no value");
      values_[arg] = "";
    } else if (std::find(valued_.begin(), valued_.end(), arg) != valued_.end()) {
      if (!inline_value) {
        if (i + 1 >= argc) throw InputError("tilefire " + command_ + ": flag " + arg + " needs a value");
        value = argv[++i];
        // `--model --max-new-tokens 2` is a forgotten value, not a model folder named --max-new-tokens (a
        // value that looks like a flag can still be given as --flag=VALUE).
        const bool is_flag = std::find(switches_.begin(), switches_.end(), value) != switches_.end() ||
                             std::find(valued_.begin(), valued_.end(), value) != valued_.end();
        if (is_flag)
          throw InputError("tilefire " + command_ + ": flag " + arg + " needs a value, but the flag " + value +
                           " follows it (write " + arg + "=" + value + " for that value)");
      }
      // An empty value would read as the flag's default (an empty --model is the built-in sample), so
      // the user would get something other than what was asked for.
      if (value.empty()) throw InputError("tilefire " + command_ + ": flag " + arg + " needs a value (got an empty one)");
      values_[arg] = value;
    } else {
      throw InputError("tilefire " + command_ + ": unknown " + std::string(arg.rfind("-", 0) == 0 ? "flag '" : "argument '") +
                       arg + "' (see tilefire " + command_ + " --help)");
    }
  }
}

bool Args::has(const std::string& flag) const { return values_.count(flag) != 0; }

std::optional<std::string> Args::text(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::text_or(const std::string& flag, const std::string& fallback) const {
  return text(flag).value_or(fallback);
}

uint64_t Args::unsigned_or(const std::string& flag, uint64_t fallback, uint64_t min, uint64_t max) const {
  auto v = text(flag);
  if (!v) return fallback;
  const std::string& s = *v;
  errno = 0;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(s.c_str(), &end, 10);
  // Digits only: strtoull would skip leading white space and take a sign (" -1" as 2^64 - 1).
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])) || *end != '\0' || errno == ERANGE || parsed < min || parsed > max)
    throw InputError("tilefire " + command_ + ": " + flag + " expects an integer in [" + std::to_string(min) + ", " +
                     (max == UINT64_MAX ? std::string("...") : std::to_string(max)) + "], got '" + s + "'");
  return parsed;
}

uint64_t Args::bytes_or(const std::string& flag, uint64_t fallback) const {
  auto v = text(flag);
  if (!v) return fallback;
  const std::string& s = *v;
  char* end = nullptr;
  errno = 0;
  const double number = std::strtod(s.c_str(), &end);
  const std::string unit = end ? std::string(end) : std::string();
  // A decimal number then a unit: no bare number (bytes or GiB?), no hex or exponent that strtod takes,
  // and at least 1 MiB (a memory size below that is a typo).
  const size_t digits = s.size() - unit.size();
  const bool decimal = digits > 0 && std::isdigit(static_cast<unsigned char>(s[0])) &&
                       s.find_first_not_of("0123456789.") >= digits;
  static const std::pair<const char*, double> units[] = {{"B", 1.0},         {"KiB", 1024.0}, {"MiB", 1048576.0},
                                                         {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
                                                         {"KB", 1e3},       {"MB", 1e6},     {"GB", 1e9},
                                                         {"TB", 1e12}};
  for (const auto& [name, scale] : units)
    if (unit == name && decimal && errno != ERANGE && std::isfinite(number) && number * scale >= 1048576.0 &&
        number * scale < 1.8e19)
      return uint64_t(number * scale);
  throw InputError("tilefire " + command_ + ": " + flag + " expects a size of 1MiB or more with its unit, such as 80GiB, 141GB or 512MiB, got '" + s + "'");
}

double Args::number_or(const std::string& flag, double fallback, double min, double max) const {
  auto v = text(flag);
  if (!v) return fallback;
  const std::string& s = *v;
  char* end = nullptr;
  errno = 0;
  double parsed = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(parsed) || parsed < min || parsed > max)
    throw InputError("tilefire " + command_ + ": " + flag + " expects a number in [" + number_text(min) + ", " +
                     number_text(max) + "], got '" + s + "'");
  return parsed;
}

std::optional<std::string> Args::file_text(const std::string& flag) const {
  const std::optional<std::string> path = text(flag);
  if (!path) return std::nullopt;
  std::ifstream in(*path, std::ios::binary);
  std::error_code ignored;
  if (!in || std::filesystem::is_directory(*path, ignored)) throw InputError("tilefire " + command_ + ": " + flag + ": cannot read " + *path);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError("tilefire " + command_ + ": " + flag + ": cannot read " + *path);
  return contents;
}

std::vector<int32_t> Args::token_list(const std::string& flag) const {
  std::vector<int32_t> tokens;
  auto v = text(flag);
  if (!v) return tokens;
  size_t pos = 0;
  const std::string& s = *v;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    // Blanks around an id are fine (a pasted Python list: 1, 2, 3); within it, digits only (no sign).
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
    char* end = nullptr;
    errno = 0;
    long parsed = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || !std::isdigit(static_cast<unsigned char>(item[0])) || *end != '\0' || errno == ERANGE || parsed < 0 || parsed > INT32_MAX)
      throw InputError("tilefire " + command_ + ": " + flag + " expects comma-separated token ids like 1,2,3, got '" + s + "'");
    tokens.push_back(int32_t(parsed));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return tokens;
}

}  // namespace tilefire::cli
