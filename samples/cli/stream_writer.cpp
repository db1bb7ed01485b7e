// A streamed reply's writer thread (stream_writer.h).
#include "stream_writer.h"

#include <utility>

namespace tilefire::cli {

StreamWriter::StreamWriter(std::function<bool(const std::string&)> write) : write_(std::move(write)), thread_([this] { loop(); }) {}

StreamWriter::~StreamWriter() { finish(); }

void StreamWriter::add(std::string piece) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gone()) return;  // nobody reads it: do not hold it
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
    }
  }
}

}  // namespace tilefire::cli
