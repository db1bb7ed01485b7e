#include "http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <utility>
#include <cerrno>
#include <cstring>

#include "tilefire/errors.h"

namespace tilefire::cli::http {
namespace {

constexpr size_t kMaxHeaderBytes = 64 * 1024;

std::string lower(std::string text) {
  for (char& c : text) c = char(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return std::string(text);
}

using Clock = std::chrono::steady_clock;

// Appends what the socket has to `buffer`, waiting in slices so that `stopping` is seen: Error 408 past the
// deadline, 503 once stopping; false at the end of the stream.
bool read_more(int fd, std::string& buffer, Clock::time_point deadline, const std::atomic<bool>& stopping) {
  char chunk[16384];
  for (;;) {
    if (stopping.load()) throw Error{503, "the server is stopping"};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw Error{408, "the request did not arrive whole within --io-timeout-ms"};
    pollfd readable{fd, POLLIN, 0};
    const int ready = ::poll(&readable, 1, int(std::min<long long>(left, 100)));
    if (ready < 0 && errno != EINTR) return false;
    if (ready <= 0) continue;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n > 0) {
      buffer.append(chunk, size_t(n));
      return true;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    return false;
  }
}

// Where the head ends (its blank line) and where the body begins, accepting bare LF line ends as well.
std::pair<size_t, size_t> head_bounds(const std::string& buffer) {
  const size_t crlf = buffer.find("\r\n\r\n"), lf = buffer.find("\n\n");
  if (crlf != std::string::npos && (lf == std::string::npos || crlf < lf)) return {crlf, crlf + 4};
  if (lf != std::string::npos) return {lf, lf + 2};
  return {std::string::npos, std::string::npos};
}

}  // namespace

Listener::Listener(const std::string& host, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1)
    throw InputError("--host expects an IPv4 address such as 127.0.0.1, got '" + host + "'");
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw InputError(std::string("cannot open a socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(fd_, 64) != 0) {
    const std::string reason = std::strerror(errno);
    ::close(fd_);
    throw InputError("--host " + host + " --port " + std::to_string(port) + ": cannot listen there: " + reason);
  }
  socklen_t length = sizeof address;
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
}

Listener::~Listener() { ::close(fd_); }

int Listener::accept_connection(int timeout_ms, int io_timeout_ms) {
  pollfd waiting{fd_, POLLIN, 0};
  if (::poll(&waiting, 1, timeout_ms) <= 0) return -1;
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    // Out of file descriptors: the connection waits in the backlog; do not spin on it meanwhile.
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) ::poll(nullptr, 0, 100);
    return -1;
  }
  timeval timeout{io_timeout_ms / 1000, (io_timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  return fd;
}

Request read_request(int fd, size_t max_body, int timeout_ms, const std::atomic<bool>& stopping) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string buffer;
  std::pair<size_t, size_t> bounds;
  while ((bounds = head_bounds(buffer)).first == std::string::npos) {
    if (buffer.size() > kMaxHeaderBytes) throw Error{431, "the request's headers pass 64 KiB"};
    if (!read_more(fd, buffer, deadline, stopping)) throw Error{400, "the request ended before its headers did"};
  }
  const auto [head_end, body_begin] = bounds;
  if (head_end > kMaxHeaderBytes) throw Error{431, "the request's headers pass 64 KiB"};
  Request request;
  std::string_view head(buffer.data(), head_end);
  const size_t line_end = head.find('\n');
  std::string_view request_line = head.substr(0, line_end);
  if (!request_line.empty() && request_line.back() == '\r') request_line.remove_suffix(1);
  const size_t first_space = request_line.find(' '), last_space = request_line.rfind(' ');
  if (first_space == std::string_view::npos || first_space == last_space ||
      request_line.substr(last_space + 1).rfind("HTTP/1.", 0) != 0)
    throw Error{400, "not an HTTP/1.x request line: '" + std::string(request_line.substr(0, 200)) + "'"};
  request.method = std::string(request_line.substr(0, first_space));
  request.target = std::string(request_line.substr(first_space + 1, last_space - first_space - 1));
  request.target = request.target.substr(0, request.target.find('?'));
  for (const char* scheme : {"http://", "https://"})  // the absolute form: the path after the authority
    if (request.target.rfind(scheme, 0) == 0) {
      const size_t path = request.target.find('/', std::strlen(scheme));
      request.target = path == std::string::npos ? "/" : request.target.substr(path);
    }
  for (size_t at = line_end == std::string_view::npos ? head.size() : line_end + 1; at < head.size();) {
    const size_t end = std::min(head.find('\n', at), head.size());
    std::string_view line = head.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) throw Error{400, "a header line without a name: '" + std::string(line.substr(0, 200)) + "'"};
    const std::string name = lower(std::string(line.substr(0, colon))), value = trimmed(line.substr(colon + 1));
    if (name == "content-length" && request.headers.count(name) && request.headers[name] != value)
      throw Error{400, "two Content-Length headers that disagree"};
    request.headers[name] = value;
    at = end + 1;
  }
  if (request.headers.count("transfer-encoding")) throw Error{411, "chunked request bodies are not taken: send a Content-Length"};
  size_t length = 0;
  if (const auto it = request.headers.find("content-length"); it != request.headers.end()) {
    const std::string& value = it->second;
    if (value.empty() || value.size() > 12 || !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw Error{400, "Content-Length is not a byte count: '" + value.substr(0, 40) + "'"};
    length = std::stoull(value);
  } else if (request.method == "POST") {
    throw Error{411, "a POST needs a Content-Length"};
  }
  if (length > max_body) throw Error{413, "the body of " + std::to_string(length) + " bytes passes the limit of " + std::to_string(max_body)};
  request.body = buffer.substr(body_begin);
  if (request.body.size() < length) {
    const auto expect = request.headers.find("expect");
    if (expect != request.headers.end() && lower(expect->second) == "100-continue") write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n");
  }
  while (request.body.size() < length)
    if (!read_more(fd, request.body, deadline, stopping)) throw Error{400, "the body ended before its Content-Length"};
  request.body.resize(length);
  return request;
}

bool peer_closed(int fd) {
  pollfd state{fd, POLLRDHUP, 0};
  return ::poll(&state, 1, 0) > 0 && (state.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool write_all(int fd, std::string_view data) {
  // The whole write within the socket's send timeout (accept_connection sets it to --io-timeout-ms). A
  // blocking send would restart the timeout after each partial send, so a client taking a byte now and
  // then would hold the write, and the queue behind it, for ever.
  timeval limit{};
  socklen_t size = sizeof limit;
  const bool bounded = ::getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, &size) == 0 && (limit.tv_sec > 0 || limit.tv_usec > 0);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(limit.tv_sec) + std::chrono::microseconds(limit.tv_usec);
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return false;  // closed or reset
    int wait_ms = -1;
    if (bounded) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;  // it stopped reading
      wait_ms = int(std::min<long long>(left, 1 << 30));
    }
    pollfd writable{fd, POLLOUT, 0};
    const int ready = ::poll(&writable, 1, wait_ms);
    if (ready < 0 && errno != EINTR) return false;
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
  }
  return "Error";
}

std::string response(int status, std::string_view content_type, std::string_view body) {
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\nContent-Type: " +
                     std::string(content_type) + "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n";
  text.append(body);
  return text;
}

std::string event_stream_head() {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
}

std::string event(std::string_view data) { return "data: " + std::string(data) + "\n\n"; }

}  // namespace tilefire::cli::http
