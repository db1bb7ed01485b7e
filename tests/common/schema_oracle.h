#pragma once
// Ajv with ajv-formats (tests/megakernel/json_schema_oracle.mjs, fetched by scripts/fetch-tokenizers), the oracle of the
// schema-constrained replies' tests: every document of every case validated in one Node.js process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/test_models.h"  // TempDir, read_file_text, write_file_text

namespace tilefire::testing {

inline std::filesystem::path ajv_package() {
  return std::filesystem::path(TILEFIRE_SOURCE_DIR) / ".deps" / "tokenizers" / "node_modules" / "ajv";
}

// True when the oracle can run; otherwise false, after a failure when TILEFIRE_REQUIRE_TOKENIZER_FILES=1
// (scripts/test, scripts/test-sanitizers) says it must.
inline bool have_schema_oracle() {
  if (std::filesystem::exists(ajv_package() / "dist" / "2020.js") && std::filesystem::exists(ajv_package() / ".." / "ajv-formats" / "dist" / "index.js") &&
      std::system("node --version >/dev/null 2>&1") == 0)
    return true;
  const char* required = std::getenv("TILEFIRE_REQUIRE_TOKENIZER_FILES");
  if (required && std::string(required) == "1") ADD_FAILURE() << ajv_package() << ", ajv-formats or node is missing: run scripts/fetch-tokenizers";
  return false;
}

#define REQUIRE_SCHEMA_ORACLE()                                                                    \
  do {                                                                                             \
    if (!::tilefire::testing::have_schema_oracle()) {                                              \
      if (!::testing::Test::HasFailure()) GTEST_SKIP() << "no Ajv or no node: run scripts/fetch-tokenizers"; \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

struct SchemaCase {
  nlohmann::json schema;
  std::vector<std::string> documents;
};

// Ajv's verdicts, per case, per document: true (valid), false (JSON but not valid), nullopt (not JSON).
inline std::vector<std::vector<std::optional<bool>>> validate_with_ajv(const std::vector<SchemaCase>& cases) {
  const TempDir dir("schema-oracle");
  const std::filesystem::path cases_path = dir.path() / "cases.json", out_path = dir.path() / "verdicts.json";
  nlohmann::json document = nlohmann::json::array();
  for (const SchemaCase& c : cases) document.push_back({{"schema", c.schema}, {"documents", c.documents}});
  write_file_text(cases_path, document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  const std::string command = "node '" + (std::filesystem::path(TILEFIRE_SOURCE_DIR) / "tests/megakernel/json_schema_oracle.mjs").string() +
                              "' '" + ajv_package().string() + "' '" + cases_path.string() + "' '" + out_path.string() + "'";
  const int status = std::system(command.c_str());
  if (status != 0) throw std::runtime_error("the schema oracle failed (status " + std::to_string(status) + "): " + command);
  const nlohmann::json verdicts = nlohmann::json::parse(read_file_text(out_path));
  if (!verdicts.is_array() || verdicts.size() != cases.size()) throw std::runtime_error("the schema oracle gave no verdict per case");
  std::vector<std::vector<std::optional<bool>>> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!verdicts[i].is_array() || verdicts[i].size() != cases[i].documents.size())
      throw std::runtime_error("the schema oracle gave no verdict per document of case " + std::to_string(i));
    out.emplace_back();
    for (const auto& verdict : verdicts[i]) out.back().push_back(verdict.is_null() ? std::nullopt : std::optional<bool>(verdict.get<bool>()));
  }
  return out;
}

}  // namespace tilefire::testing
