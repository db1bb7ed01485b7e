#pragma once
// A streamed reply's pieces, written to its client by a thread of the reply's own. The thread that
// generates them (with --sequences, the batch's thread, which decodes every client's sequence) only queues
// them, so a client that stops reading holds up its own reply and nobody else's: its writes time out
// (--io-timeout-ms) on the writer's thread, and the generation sees gone() and ends. A client that reads,
// but slower than the reply is generated, is dropped once the pieces waiting for it pass a bound, so many
// slow clients cannot make the server hold their replies in memory.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tilefire::cli {

class StreamWriter {
 public:
  // `write` sends one piece to the client; false: the client has gone, and later pieces are dropped.
  // It runs on the writer's thread only, so what it touches needs no lock until finish() has returned.
  // More than `max_waiting_bytes` of pieces waiting to be written: the client is taken as gone.
  static constexpr size_t kMaxWaitingBytes = size_t(16) << 20;
  explicit StreamWriter(std::function<bool(const std::string&)> write, size_t max_waiting_bytes = kMaxWaitingBytes);
  ~StreamWriter();  // finish()
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Queues a piece; never waits for the client.
  void add(std::string piece);
  // Whether a write has failed (the client closed, reset, or stopped reading for the io timeout), or the
  // pieces waiting for the client passed the bound.
  bool gone() const { return gone_.load(std::memory_order_acquire); }
  // Waits until every queued piece is written, or the client has gone; then the writer's thread has ended.
  void finish();

 private:
  void loop();

  std::function<bool(const std::string&)> write_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> pending_;
  size_t pending_bytes_ = 0;
  const size_t max_waiting_bytes_;
  bool finishing_ = false;
  std::atomic<bool> gone_{false};
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace tilefire::cli
