#pragma once
// The small part of HTTP/1.1 that `tilefire serve` speaks: one request per connection (Content-Length
// bodies, no chunked uploads), answered with Content-Length or as a server-sent event stream, then the
// connection closes. A request must arrive whole within a deadline, and writes time out, so a stalled or
// trickling client cannot hold a worker for long.
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tilefire::cli::http {

struct Request {
  std::string method, target;                  // "POST", "/v1/completions" (the query string removed)
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// A request the server cannot take, with the status that says so (400, 404, 405, 408, 411, 413, 431, ...).
struct Error {
  int status;
  std::string message;
  std::string param = "", code = "";  // OpenAI's error fields, when it names them (e.g. "model", "model_not_found")
};

// A listening TCP socket on host:port (port 0: any free one). InputError naming the flag when the host is
// not an IPv4 address or the port cannot be had.
class Listener {
 public:
  Listener(const std::string& host, uint16_t port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  uint16_t port() const { return port_; }
  // A connection, or -1 when none came within timeout_ms. Its writes time out after io_timeout_ms.
  int accept_connection(int timeout_ms, int io_timeout_ms);

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// Reads one request, whole within timeout_ms (408 past it) or until `stopping` (503): throws Error for a
// malformed one, one whose headers pass 64 KiB or whose body passes max_body bytes, and one cut short.
// Answers "Expect: 100-continue" before reading the body.
Request read_request(int fd, size_t max_body, int timeout_ms, const std::atomic<bool>& stopping);
// Writes all of `data` within the socket's send timeout (the whole of it, not each send); false when the
// client has gone (closed, reset, or did not take it all in that time).
bool write_all(int fd, std::string_view data);
// Whether the client has closed its side (or the connection broke), without reading anything.
bool peer_closed(int fd);
// A whole response with its Content-Length.
std::string response(int status, std::string_view content_type, std::string_view body);
// The head of a server-sent event stream, and one event carrying `data`.
std::string event_stream_head();
std::string event(std::string_view data);
const char* reason_phrase(int status);

}  // namespace tilefire::cli::http
