#pragma once
// Jinja2 as Hugging Face transformers sets it up (tests/graph/chat_template_oracle.py), the oracle of the
// chat-template tests: every case rendered in one Python process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/test_models.h"  // TempDir, read_file_text, write_file_text

namespace tilefire::testing {

// The `now` strftime_now formats, the same for both: 2026-07-04 09:05:03, a Saturday (day 185 of the
// year), so that every field of the date is a different number.
inline constexpr int kOracleNow[] = {2026, 7, 4, 9, 5, 3};

inline std::tm oracle_now() {
  std::tm now{};
  now.tm_year = kOracleNow[0] - 1900;
  now.tm_mon = kOracleNow[1] - 1;
  now.tm_mday = kOracleNow[2];
  now.tm_hour = kOracleNow[3];
  now.tm_min = kOracleNow[4];
  now.tm_sec = kOracleNow[5];
  now.tm_wday = 6;
  now.tm_yday = 184;
  return now;
}

// A Python with Jinja2 3.1 or later (as transformers requires): the one on PATH, else Debian's
// /usr/bin/python3, where scripts/fetch-tokenizers installs python3-jinja2 (a python3 on PATH from
// elsewhere does not see Debian's packages). "" when neither has it.
inline std::string jinja_python() {
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(python) +
                              " -c 'import sys, jinja2; sys.exit(tuple(map(int, jinja2.__version__.split(\".\")[:2])) < (3, 1))' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return "";
}

// True when the oracle can run; otherwise false, after a failure when TILEFIRE_REQUIRE_TOKENIZER_FILES=1
// (scripts/test, scripts/test-sanitizers) says it must.
inline bool have_jinja_oracle() {
  if (!jinja_python().empty()) return true;
  const char* required = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
  if (required && std::string(required) == "1") ADD_FAILURE() << "python3 with jinja2 3.1 or later is missing: run scripts/fetch-tokenizers";
  return false;
}

#define REQUIRE_JINJA_ORACLE()                                                                        \
  do {                                                                                                \
    if (!::tilefire::testing::have_jinja_oracle()) {                                                  \
      if (!HasFailure()) GTEST_SKIP() << "no python3 with jinja2 3.1 or later: run scripts/fetch-tokenizers"; \
      return;                                                                                         \
    }                                                                                                 \
  } while (0)

struct OracleCase {
  std::string source;
  nlohmann::ordered_json context;
};

// Jinja2's results, one per case: {"output": text} or {"error": "Class: message"}.
inline nlohmann::ordered_json run_jinja_oracle(const std::vector<OracleCase>& cases) {
  const TempDir dir("jinja-oracle");
  const std::filesystem::path cases_path = dir.path() / "cases.json", out_path = dir.path() / "oracle.json";
  nlohmann::ordered_json document = nlohmann::ordered_json::array();
  for (const OracleCase& c : cases) document.push_back({{"template", c.source}, {"context", c.context}, {"now", kOracleNow}});
  write_file_text(cases_path, document.dump());
  const std::string command = jinja_python() + " '" + (std::filesystem::path(TILEFIRE_SOURCE_DIR) / "tests/graph/chat_template_oracle.py").string() +
                              "' '" + cases_path.string() + "' '" + out_path.string() + "'";
  const int status = std::system(command.c_str());
  if (status != 0) throw std::runtime_error("the oracle failed (status " + std::to_string(status) + "): " + command);
  nlohmann::ordered_json results = nlohmann::ordered_json::parse(read_file_text(out_path));
  if (!results.is_array() || results.size() != cases.size()) throw std::runtime_error("the oracle gave no result per case: " + command);
  return results;
}

}  // namespace tilefire::testing
