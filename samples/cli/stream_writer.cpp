// A streamed reply's writer thread (stream_writer.h).
#include "stream_writer.h"

#include <utility>

namespace tilefire::cli {

StreamWriter::StreamWriter(std::function<bool(const std::string&)> write, size_t max_waiting_bytes)
    : write_(std::move(write)), max_waiting_bytes_(max_waiting_bytes), thread_([this] { loop(); }) {}

StreamWriter::~StreamWriter() { finish(); }

void StreamWriter::add(std::string piece) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone()) return;  // nobody reads it: do not hold it
    pending_bytes_ += piece.size();
    if (pending_bytes_ > max_waiting_bytes_) {  // the client is far behind the reply: give it up
      gone_.store(true, std::memory_order_release);
      pending_.clear();
      pending_bytes_ = 0;
      return;
    }
    pending_.push_back(std::move(piece));
  }
  wake_.notify_one();
}

void StreamWriter::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finishing_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void StreamWriter::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return finishing_ || !pending_.empty(); });
    if (pending_.empty()) return;  // finishing, and all written
    std::deque<std::string> taken;
    taken.swap(pending_);
    size_t taken_bytes = 0;  // still counted in pending_bytes_ until written: the bound covers them too
    for (const std::string& piece : taken) taken_bytes += piece.size();
    lock.unlock();  // the writes may wait for the client: add() must not wait with them
    bool written = !gone();
    for (const std::string& piece : taken) {
      if (!written) break;
      try {
        written = write_(piece);
      } catch (...) {  // out of memory for the event: the reply cannot go on, the server can
        written = false;
      }
    }
    lock.lock();
    if (!written) {
      gone_.store(true, std::memory_order_release);
      pending_.clear();
      pending_bytes_ = 0;
    } else if (!gone()) {  // (add() may have given the client up meanwhile, clearing the count)
      pending_bytes_ -= taken_bytes;
    }
  }
}

}  // namespace tilefire::cli
