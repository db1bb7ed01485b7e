#pragma once
// tilefire serve --sequences N: continuous batching. One thread owns the engine; requests from the
// connection threads join the batch as sequences free (Engine::add_sequence), every step decodes one token
// of each, and a request's thread waits for its result. The request's callbacks run on the batch's thread
// while its own thread waits, so what they touch needs no lock of its own.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "tilefire/engine.h"

namespace tilefire::cli {

class Batcher {
 public:
  // `sequences`: the engine's EngineOptions::sequences. `refuse_new` is asked before a waiting request
  // joins: an exception it returns refuses the request (the server is stopping) and is thrown to it.
  Batcher(Engine& engine, uint32_t sequences, std::function<std::exception_ptr()> refuse_new);
  ~Batcher();  // after every run() has returned
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Runs `request` in the batch and returns its result; throws what adding it or a step threw.
  // `abandoned` (on the batch's thread: its client left) is asked every kCheckAbandonedEvery while the
  // request waits or is in, and as it joins: an abandoned request ends "stopped" there, a waiting one
  // not run at all, one still prefilling its prompt cut short. (Its stop_when ends it too, but is asked
  // only as each token is taken: a long prompt's prefill, or a wait for a free sequence, would run or
  // hold on for a client that has gone.)
  GenerateResult run(const GenerateRequest& request, std::function<bool()> abandoned = nullptr);
  // The most sequences one step has decoded so far.
  uint32_t widest_step() const;

 private:
  static constexpr std::chrono::milliseconds kCheckAbandonedEvery{20};  // each check is a poll of the socket

  struct Job {
    const GenerateRequest* request = nullptr;
    std::function<bool()> abandoned;
    uint64_t id = 0;  // its sequence in the engine
    GenerateResult result;
    std::exception_ptr error;
    bool done = false;
  };
  void loop();
  void finish(Job& job);
  // The request gets `error` (a copy of its own: serve_batcher.cpp says why) and is done.
  void fail(Job& job, const std::exception_ptr& error);
  // Every live request gets `error`, its sequence taken out.
  void fail_all(std::vector<Job*>& live, const std::exception_ptr& error);
  // Takes out the live requests whose `abandoned` says so, each ending "stopped" with what it has, and
  // drops the waiting ones whose `abandoned` says so (not run: "stopped", no token).
  void take_out_abandoned(std::vector<Job*>& live);
  // A request dropped before it joined: its prompt, "stopped", nothing run.
  void finish_unrun(Job& job);

  Engine& engine_;
  const uint32_t sequences_;
  std::function<std::exception_ptr()> refuse_new_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the batch's thread: a request arrived, or quit
  std::condition_variable done_;  // the requests' threads: a job is done
  std::deque<Job*> waiting_;
  bool quit_ = false;
  uint32_t widest_ = 0;
  std::thread thread_;  // last: started once everything above exists
};

}  // namespace tilefire::cli
