#pragma once
// Runs the real `tilefire` binary the way a user does: through /bin/sh, with stdout and stderr captured
// separately and a `timeout` in front so a hang fails the test instead of hanging the suite.
// Header-only: TILEFIRE_CLI_PATH is a compile definition of the test executables, not of the common library.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/tokenizer.h"  // byte_level_char
#include "tests/common/test_models.h"  // read_file_text, write_file_text, TempDir

#ifndef TILEFIRE_CLI_PATH
#error "tests using cli_runner.h need the TILEFIRE_CLI_PATH compile definition"
#endif

namespace tilefire::testing {

struct RunResult {
  int status = -1;      // exit status as the shell reports it (124: timed out, 128+N: killed by signal N)
  std::string out;      // stdout
  std::string err;      // stderr
  std::string command;  // the command line, for failure messages
};

inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Runs `program args...` with stdin from `stdin_path` (/dev/null by default); a run longer than timeout_s
// is killed (status 124). With `cwd`, it runs there (relative paths it writes land there, not in the test's
// directory).
inline RunResult run_program(const std::string& program, const std::vector<std::string>& args, int timeout_s = 60,
                             const std::string& cwd = "", const std::string& stdin_path = "/dev/null") {
  static std::atomic<int> counter{0};
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("tilefire-cli-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                               .string();
  const std::string out_path = base + ".out", err_path = base + ".err";

  RunResult result;
  result.command = std::filesystem::path(program).filename().string();
  std::string line = (cwd.empty() ? "" : "cd " + shell_quote(cwd) + " && ") + "timeout -k 5 " + std::to_string(timeout_s);
  line.push_back(' ');
  line.append(shell_quote(program));
  for (const std::string& arg : args) {
    line.push_back(' ');
    line.append(shell_quote(arg));
    const bool plain = !arg.empty() && arg.find_first_of(" '\"") == std::string::npos;
    result.command.push_back(' ');
    result.command.append(plain ? arg : shell_quote(arg));
  }
  line += " <" + shell_quote(stdin_path) + " >" + shell_quote(out_path) + " 2>" + shell_quote(err_path);
  const int raw = std::system(line.c_str());
  if (raw != -1 && WIFEXITED(raw)) {
    result.status = WEXITSTATUS(raw);
  } else if (raw != -1 && WIFSIGNALED(raw)) {
    result.status = 128 + WTERMSIG(raw);
  }
  result.out = read_file_text(out_path);
  result.err = read_file_text(err_path);
  std::error_code ignored;
  std::filesystem::remove(out_path, ignored);
  std::filesystem::remove(err_path, ignored);
  return result;
}

// `tilefire args...`, as run_program runs a program.
inline RunResult run_cli(const std::vector<std::string>& args, int timeout_s = 60, const std::string& cwd = "",
                         const std::string& stdin_path = "/dev/null") {
  return run_program(TILEFIRE_CLI_PATH, args, timeout_s, cwd, stdin_path);
}

// The command, status and output of a run, for failure messages.
inline std::string describe(const RunResult& r) {
  return "command: " + r.command + "\nstatus: " + std::to_string(r.status) + "\nstderr: " + r.err +
         "\nstdout (first 500): " + r.out.substr(0, 500);
}

// `tilefire run args... --json`: requires status 0 and returns the single JSON object it prints.
inline nlohmann::json run_json(std::vector<std::string> args) {
  args.insert(args.begin(), "run");
  args.push_back("--json");
  RunResult r = run_cli(args);
  EXPECT_EQ(r.status, 0) << describe(r);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(r.out);  // the whole of stdout: exactly one JSON value, nothing else
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON value: " << e.what() << "\n" << describe(r);
    return nlohmann::json::object();
  }
  EXPECT_TRUE(parsed.is_object()) << describe(r);
  return parsed;
}

// `tilefire run` with `leading` and then each case's flags must be refused (status 2) with its message on stderr.
inline void expect_run_refusals(const std::vector<std::string>& leading,
                                const std::vector<std::pair<std::vector<std::string>, std::string>>& cases) {
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), leading.begin(), leading.end());
    args.insert(args.end(), flags.begin(), flags.end());
    const RunResult result = run_cli(args);
    EXPECT_EQ(result.status, 2) << describe(result);
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  }
}

// The generated tokens of a `run --json` object (one without them throws: two such would compare equal).
inline std::vector<int32_t> tokens_of(const nlohmann::json& result) { return result.at("tokens").get<std::vector<int32_t>>(); }

// `tilefire gen-model --preset tiny --out DIR/name extra...`, required to succeed; returns the folder.
inline std::filesystem::path gen_tiny_model(const TempDir& dir, const std::string& name, const std::vector<std::string>& extra = {}) {
  const std::filesystem::path out = dir.path() / name;
  std::vector<std::string> args = {"gen-model", "--preset", "tiny", "--out", out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = run_cli(args);
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("wrote"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out / "config.json"));
  return out;
}

// A byte-level BPE tokenizer.json that fits the tiny preset's vocabulary of 512: the 256 bytes, merges that
// spell "hello" and " hello", a start token the template adds, and an end token.
inline nlohmann::json tiny_byte_level_tokenizer() {
  using nlohmann::json;
  json vocab = json::object();
  for (int byte = 0; byte < 256; ++byte) {
    std::string spelled;
    const char32_t c = byte_level_char(uint8_t(byte));
    if (c < 0x80) spelled = std::string(1, char(c));
    else spelled = {char(0xC0 | (c >> 6)), char(0x80 | (c & 0x3F))};  // below U+0800: two bytes
    vocab[spelled] = byte;
  }
  const std::vector<std::pair<std::string, std::string>> merges = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\u0120", "hello"}};
  json merge_list = json::array();
  int next = 256;
  for (const auto& [left, right] : merges) {
    vocab[left + right] = next++;  // 256 .. 260
    merge_list.push_back(left + " " + right);
  }
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}}},
          {"added_tokens", {{{"id", 261}, {"content", "<|end|>"}, {"special", true}}, {{"id", 262}, {"content", "<|start|>"}, {"special", true}}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", {{"type", "TemplateProcessing"},
                              {"single", {{{"SpecialToken", {{"id", "<|start|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                              {"special_tokens", {{"<|start|>", {{"id", "<|start|>"}, {"ids", {262}}}}}}}},
          {"decoder", {{"type", "ByteLevel"}}}};
}

}  // namespace tilefire::testing
