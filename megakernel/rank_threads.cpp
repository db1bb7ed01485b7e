// The rank threads of an in-process tensor-parallel engine (rank_threads.h).
#include "megakernel/rank_threads.h"

namespace tilefire {

RankThreads::RankThreads(uint32_t ranks) {
  threads_.reserve(ranks > 0 ? ranks - 1 : 0);
  try {
    for (uint32_t r = 1; r < ranks; ++r) threads_.emplace_back([this, r] { drive(r); });
  } catch (...) {  // a thread could not start: stop the started ones
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    posted_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  posted_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(uint32_t)>& job) {
  {
    std::lock_guard lock(mutex_);
    job_ = &job;
    ++generation_;
    running_ = uint32_t(threads_.size());
  }
  posted_.notify_all();
  job(0);
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
}

void RankThreads::drive(uint32_t rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(uint32_t)>* job = nullptr;
    {
      std::unique_lock lock(mutex_);
      posted_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(rank);
    bool last = false;
    {
      std::lock_guard lock(mutex_);
      last = --running_ == 0;
    }
    if (last) finished_.notify_one();
  }
}

}  // namespace tilefire
