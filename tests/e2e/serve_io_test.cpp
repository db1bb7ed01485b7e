// The server's writes to its clients (samples/cli/http.cpp, samples/cli/stream_writer.cpp), on their own:
// a write gives up once the whole of it has taken longer than the socket's send timeout, even when the
// client takes a little now and then; a streamed reply's writer gives up a client that falls more than
// its bound behind, and otherwise writes every piece, in order.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "samples/cli/http.h"
#include "samples/cli/stream_writer.h"

namespace tilefire::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A connected pair of stream sockets; the first sends with `send_timeout_ms` and a small send buffer.
struct SocketPair {
  int sender = -1, receiver = -1;
  explicit SocketPair(int send_timeout_ms) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    sender = fds[0];
    receiver = fds[1];
    timeval timeout{send_timeout_ms / 1000, (send_timeout_ms % 1000) * 1000};
    ::setsockopt(sender, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    const int buffer = 4096;
    ::setsockopt(sender, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  }
  ~SocketPair() {
    ::close(sender);
    ::close(receiver);
  }
};

TEST(ServeWrites, AWholeWriteReachesAClientThatReads) {
  SocketPair pair(2000);
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char('a' + i % 26);
  std::string got;
  std::thread reader([&] {
    char chunk[65536];
    for (ssize_t n; got.size() < data.size() && (n = ::recv(pair.receiver, chunk, sizeof chunk, 0)) > 0;) got.append(chunk, size_t(n));
  });
  EXPECT_TRUE(http::write_all(pair.sender, data));
  reader.join();
  EXPECT_EQ(got, data);
}

// A client that takes 4 KiB every 50 ms: each send makes progress within the timeout, which a blocking
// send restarts on, so the old write went on for as long as the client liked (4 MiB at that pace: 50 s).
// The whole write now has the timeout (300 ms).
TEST(ServeWrites, AClientTakingATrickleIsGivenUpAfterTheTimeout) {
  SocketPair pair(300);
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    char chunk[4096];
    while (!done.load()) {
      if (::recv(pair.receiver, chunk, sizeof chunk, MSG_DONTWAIT) == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const auto start = Clock::now();
  EXPECT_FALSE(http::write_all(pair.sender, std::string(size_t(4) << 20, 'x')));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  done.store(true);
  trickle.join();
  EXPECT_GE(seconds, 0.25);
  EXPECT_LT(seconds, 5.0) << "the write went on past its timeout";
}

TEST(ServeWrites, AClientThatClosedIsGone) {
  SocketPair pair(2000);
  ::close(pair.receiver);
  pair.receiver = -1;
  EXPECT_FALSE(http::write_all(pair.sender, "data"));
}

// A writer whose client takes nothing until released.
struct HeldClient {
  std::mutex mutex;
  std::condition_variable released_cv;
  bool released = false;
  std::string written;
  bool write(const std::string& piece) {
    std::unique_lock<std::mutex> lock(mutex);
    released_cv.wait(lock, [&] { return released; });
    written += piece;
    return true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      released = true;
    }
    released_cv.notify_all();
  }
};

TEST(ServeStreamWriter, EveryPieceInOrderWhileTheClientKeepsUp) {
  HeldClient client;
  client.release();
  std::string expected;
  {
    StreamWriter writer([&](const std::string& piece) { return client.write(piece); }, 1000);
    for (int i = 0; i < 200; ++i) {
      const std::string piece = std::to_string(i) + ",";
      expected += piece;
      writer.add(piece);
      if (i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let it catch up
    }
    writer.finish();
    EXPECT_FALSE(writer.gone());
  }
  EXPECT_EQ(client.written, expected);
}

// Past the bound of bytes waiting (those being written included), the client is given up: the generation
// sees gone(), nothing more is queued, and what did go out is a beginning of the reply.
TEST(ServeStreamWriter, AClientFarBehindIsGivenUp) {
  HeldClient client;
  std::string sent;
  StreamWriter writer([&](const std::string& piece) { return client.write(piece); }, 100);
  for (int i = 0; i < 10 && !writer.gone(); ++i) {
    const std::string piece(30, char('a' + i));
    sent += piece;
    writer.add(piece);
  }
  EXPECT_TRUE(writer.gone()) << "120 bytes queued past a bound of 100";
  writer.add("more");  // dropped
  client.release();
  writer.finish();
  EXPECT_TRUE(writer.gone());
  EXPECT_LT(client.written.size(), sent.size());
  EXPECT_EQ(sent.compare(0, client.written.size(), client.written), 0) << client.written;
}

}  // namespace
}  // namespace tilefire::cli
