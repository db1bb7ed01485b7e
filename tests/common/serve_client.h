#pragma once
// A client of `tilefire serve` for the end-to-end tests: raw HTTP exchanges on 127.0.0.1, server-sent
// events, the server itself started on a free port in the background (its log kept in a file), and the
// texts of a reply's choices, whole or streamed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/cli_runner.h"
#include "tests/common/test_models.h"

extern char** environ;

namespace tilefire::testing {

struct HttpReply {
  int status = 0;
  std::string head, body;
};

// A connection to 127.0.0.1:port whose reads give up after 60 s; -1 (and a failure) when none is had.
inline int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    ADD_FAILURE() << "cannot connect to port " << port;
    return -1;
  }
  timeval timeout{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

inline void send_text(int fd, const std::string& text) { ::send(fd, text.data(), text.size(), MSG_NOSIGNAL); }

// Sends `raw` to 127.0.0.1:port and reads the reply until the server closes the connection.
inline HttpReply http_exchange(uint16_t port, const std::string& raw) {
  HttpReply reply;
  const int fd = connect_to(port);
  if (fd < 0) return reply;
  send_text(fd, raw);
  std::string all;
  char chunk[65536];
  for (ssize_t n; (n = ::recv(fd, chunk, sizeof chunk, 0)) > 0;) all.append(chunk, size_t(n));
  ::close(fd);
  const size_t head_end = all.find("\r\n\r\n");
  if (head_end == std::string::npos) return reply;
  reply.head = all.substr(0, head_end);
  reply.body = all.substr(head_end + 4);
  reply.status = std::atoi(reply.head.c_str() + reply.head.find(' ') + 1);
  return reply;
}

inline HttpReply post(uint16_t port, const std::string& path, const std::string& body) {
  return http_exchange(port, "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body);
}

// The JSON reply to `body` posted to `path`, which must answer `expected_status` (a failure otherwise, and
// an empty object).
inline nlohmann::json post_json(uint16_t port, const std::string& path, const nlohmann::json& body, int expected_status = 200) {
  const HttpReply reply = post(port, path, body.dump());
  EXPECT_EQ(reply.status, expected_status) << path << " " << body.dump() << "\n" << reply.body;
  return reply.status == expected_status ? nlohmann::json::parse(reply.body) : nlohmann::json::object();
}

// The data of each server-sent event.
inline std::vector<std::string> events(const std::string& body) {
  std::vector<std::string> data;
  for (size_t at = 0, end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2)
    if (body.compare(at, 6, "data: ") == 0) data.push_back(body.substr(at + 6, end - at - 6));
  return data;
}

// `tilefire serve --port 0 args...` in the background (in `cwd`, when given); the port comes from its
// first line.
class Server {
 public:
  explicit Server(const std::vector<std::string>& args, const std::filesystem::path& cwd = {})
      : log_(std::filesystem::temp_directory_path() / ("tilefire-serve-" + std::to_string(::getpid()) + "-" + std::to_string(count_++) + ".log")) {
    std::vector<std::string> argv_strings = {TILEFIRE_CLI_PATH, "serve", "--port", "0"};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    int out[2];
    EXPECT_EQ(::pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    std::string line;
    pollfd readable{out[0], POLLIN, 0};
    char c;
    while (line.find('\n') == std::string::npos && ::poll(&readable, 1, 60000) > 0 && ::read(out[0], &c, 1) == 1) line.push_back(c);
    ::close(out[0]);
    const size_t colon = line.rfind(':');
    port_ = colon == std::string::npos ? 0 : uint16_t(std::atoi(line.c_str() + colon + 1));
    EXPECT_NE(port_, 0) << "the server's first line: '" << line << "'\nits log: " << read_file_text(log_);
  }
  ~Server() {
    stop();
    std::error_code ignored;
    std::filesystem::remove(log_, ignored);
  }
  uint16_t port() const { return port_; }
  std::string log() const { return read_file_text(log_); }
  // Its exit status once it has stopped by itself, within `ms`; -2 if it is still running then.
  int wait_exit(int ms) {
    if (pid_ <= 0) return status_;
    int raw = 0;
    for (int waited = 0; waited < ms; waited += 10) {
      if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
        pid_ = 0;
        return status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -2;
  }
  // SIGTERM, then its exit status (-1: it had to be killed after 30 s).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    int raw = 0;
    for (int waited = 0; waited < 3000; ++waited) {
      if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
        pid_ = 0;
        return status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &raw, 0);
    pid_ = 0;
    return status_ = -1;
  }

 private:
  static inline int count_ = 0;  // servers started by this process, for their log files' names
  std::filesystem::path log_;
  pid_t pid_ = 0;
  uint16_t port_ = 0;
  int status_ = -1;
};

// A tiny model with the tiny byte-level tokenizer and a chat template (as cli_chat_test's).
inline std::filesystem::path text_model(const TempDir& dir) {
  const std::filesystem::path model = gen_tiny_model(dir, "tiny-serve");
  write_file_text(model / "tokenizer.json", tiny_byte_level_tokenizer().dump());
  write_file_text(model / "tokenizer_config.json",
                  nlohmann::json({{"bos_token", "<|start|>"},
                        {"eos_token", "<|end|>"},
                        {"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}<|end|>{% endfor %}"
                                          "{% if add_generation_prompt %}assistant:{% endif %}"}})
                      .dump());
  return model;
}

// The text model with tokens added to its tokenizer, ids 263 on (past the tiny tokenizer's, within the
// vocabulary of 512): a token that is a whole reply (a call, a thinking), made the greedy reply by a bias.
struct AddedToken {
  std::string content;
  bool special = false;
};
inline std::filesystem::path text_model_with_tokens(const TempDir& dir, const std::vector<AddedToken>& added) {
  const std::filesystem::path model = text_model(dir);
  nlohmann::json tokenizer = tiny_byte_level_tokenizer();
  for (size_t i = 0; i < added.size(); ++i)
    tokenizer["added_tokens"].push_back({{"id", 263 + i}, {"content", added[i].content}, {"special", added[i].special}});
  write_file_text(model / "tokenizer.json", tokenizer.dump());
  return model;
}

// `tilefire serve` of the text model (a byte-level tokenizer.json and a chat template: text_model)
// on one thread, with `extra` flags; the model's folder lives as long as the server.
struct TextModelServer {
  TempDir dir;
  std::filesystem::path model;
  Server server;
  static std::vector<std::string> args(const std::filesystem::path& model, const std::vector<std::string>& extra) {
    std::vector<std::string> all = {"--model", model.string(), "--threads", "1"};
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }
  TextModelServer(const std::string& name, const std::vector<std::string>& extra)
      : dir(name), model(text_model(dir)), server(args(model, extra)) {}
};

// The text of choice `index` of a reply, whole (a chat's message or a completion's text) or streamed (its
// chunks' pieces joined), with its finish reason.
struct ChoiceText {
  std::string text;
  std::string finish_reason;
};
inline std::vector<ChoiceText> choice_texts(const HttpReply& reply, bool chat, bool streamed, size_t choices) {
  std::vector<ChoiceText> texts(choices);
  const auto take = [&](const nlohmann::json& choice, bool chunk) {
    const size_t index = choice.at("index").get<size_t>();
    EXPECT_LT(index, choices);
    if (index >= choices) return;
    const nlohmann::json& content = chat ? choice.at(chunk ? "delta" : "message") : choice.at("text");
    if (!chat) texts[index].text += content.get<std::string>();
    else if (content.contains("content") && content.at("content").is_string()) texts[index].text += content.at("content").get<std::string>();
    if (choice.at("finish_reason").is_string()) texts[index].finish_reason = choice.at("finish_reason").get<std::string>();
  };
  if (!streamed) {
    const nlohmann::json body = nlohmann::json::parse(reply.body);  // held: a range-for over a temporary's member would dangle
    for (const nlohmann::json& choice : body.at("choices")) take(choice, false);
    return texts;
  }
  for (const std::string& data : events(reply.body))
    if (data != "[DONE]") {
      const nlohmann::json chunk = nlohmann::json::parse(data);
      for (const nlohmann::json& choice : chunk.at("choices")) take(choice, true);
    }
  return texts;
}

// Six sampled choices of `body` at `path`, whole; the same streamed must be the same texts.
inline std::vector<ChoiceText> sampled_choices(uint16_t port, const std::string& path, nlohmann::json body, uint32_t max_tokens, int seed) {
  const bool chat = path == "/v1/chat/completions";
  body["n"] = 6;
  body["max_tokens"] = max_tokens;
  body["temperature"] = 0.8;
  body["seed"] = seed;
  const HttpReply whole = post(port, path, body.dump());
  EXPECT_EQ(whole.status, 200) << whole.body;
  body["stream"] = true;
  const HttpReply streamed = post(port, path, body.dump());
  EXPECT_EQ(streamed.status, 200) << streamed.body;
  if (whole.status != 200 || streamed.status != 200) return {};
  const std::vector<ChoiceText> texts = choice_texts(whole, chat, false, 6), pieces = choice_texts(streamed, chat, true, 6);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(pieces[i].text, texts[i].text) << "choice " << i << ": streamed";
    EXPECT_EQ(pieces[i].finish_reason, texts[i].finish_reason) << "choice " << i << ": streamed";
  }
  return texts;
}

}  // namespace tilefire::testing
