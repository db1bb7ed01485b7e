#pragma once
// Flag parsing for the tilefire command line: every flag is declared with its kind, unknown flags and bad
// values are InputErrors that name the flag and what it expects. A flag given twice takes its last value,
// so a wrapper script's defaults can be overridden by the arguments it passes on (scripts/demo).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tilefire/errors.h"

namespace tilefire::cli {

class Args {
 public:
  // `command` names the subcommand in messages; `switches` take no value, `valued` take one.
  Args(std::string command, std::vector<std::string> switches, std::vector<std::string> valued);
  void parse(int argc, char** argv, int first);

  bool has(const std::string& flag) const;
  std::optional<std::string> text(const std::string& flag) const;
  std::string text_or(const std::string& flag, const std::string& fallback) const;
  uint64_t unsigned_or(const std::string& flag, uint64_t fallback, uint64_t min = 0, uint64_t max = UINT64_MAX) const;
  double number_or(const std::string& flag, double fallback, double min, double max) const;
  // A size in bytes: a number with an optional unit B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB.
  uint64_t bytes_or(const std::string& flag, uint64_t fallback) const;
  std::vector<int32_t> token_list(const std::string& flag) const;
  // The contents of the file the flag names (nullopt without the flag): InputError "tilefire CMD: FLAG:
  // cannot read PATH" for a missing file, a folder or a failed read.
  std::optional<std::string> file_text(const std::string& flag) const;

 private:
  std::string command_;
  std::vector<std::string> switches_, valued_;
  std::map<std::string, std::string> values_;
};

}  // namespace tilefire::cli
