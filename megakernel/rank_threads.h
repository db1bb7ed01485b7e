#pragma once
// The threads that drive ranks 1 .. N-1 of an in-process tensor-parallel engine (rank 0 runs on the
// caller's thread). Started once with the engine and parked between steps, so a step does not pay a
// thread start and join per rank.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tilefire {

class RankThreads {
 public:
  explicit RankThreads(uint32_t ranks);  // threads for ranks 1 .. ranks - 1
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  // Runs job(r) for every rank r >= 1 on its thread and job(0) on the caller's; returns when all have
  // returned. `job` must not throw (the engine's wrapper keeps each rank's exception).
  void run(const std::function<void(uint32_t)>& job);

 private:
  void drive(uint32_t rank);

  std::mutex mutex_;
  std::condition_variable posted_, finished_;
  const std::function<void(uint32_t)>* job_ = nullptr;  // the posted step's job
  uint64_t generation_ = 0;  // steps posted so far
  uint32_t running_ = 0;     // rank threads still in the posted step
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tilefire
