// Continuous batching for tilefire serve (serve_batcher.h).
#include "serve_batcher.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "http.h"

namespace tilefire::cli {

Batcher::Batcher(Engine& engine, uint32_t sequences, std::function<std::exception_ptr()> refuse_new)
    : engine_(engine), sequences_(sequences), refuse_new_(std::move(refuse_new)), thread_([this] { loop(); }) {}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint32_t Batcher::widest_step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return widest_;
}

GenerateResult Batcher::run(const GenerateRequest& request, std::function<bool()> abandoned) {
  Job job;
  job.request = &request;
  job.abandoned = std::move(abandoned);
  std::unique_lock<std::mutex> lock(mutex_);
  waiting_.push_back(&job);
  wake_.notify_all();
  done_.wait(lock, [&] { return job.done; });
  if (job.error) std::rethrow_exception(job.error);
  return std::move(job.result);
}

void Batcher::finish(Job& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  job.done = true;
  done_.notify_all();
}

namespace {

// A copy of `error` of its own, of the same type among those the server tells apart and with its message.
// An exception object that two threads hold is destroyed by whichever lets go of it last, through a
// reference count inside libstdc++ that ThreadSanitizer does not see, so it reports the destructor
// racing with the other thread's what() (it did, in two runs of fourteen of cli_serve_test). Each
// request's thread gets an object no other thread holds.
std::exception_ptr own_copy(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const http::Error& e) {
    return std::make_exception_ptr(http::Error(e));
  } catch (const SequenceError& e) {
    return std::make_exception_ptr(SequenceError(e.sequence, e.what()));
  } catch (const InputError& e) {
    return std::make_exception_ptr(InputError(e.what()));
  } catch (const DeviceError& e) {
    return std::make_exception_ptr(DeviceError(e.what()));
  } catch (const TransportError& e) {
    return std::make_exception_ptr(TransportError(e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(e.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error("an exception that is not a std::exception"));
  }
}

}  // namespace

void Batcher::fail(Job& job, const std::exception_ptr& error) {
  job.error = own_copy(error);
  finish(job);
}

void Batcher::fail_all(std::vector<Job*>& live, const std::exception_ptr& error) {
  for (Job* job : live) {
    engine_.remove_sequence(job->id);
    fail(*job, error);
  }
  live.clear();
}

void Batcher::finish_unrun(Job& job) {
  job.result.prompt_tokens = job.request->prompt;
  job.result.finish_reason = "stopped";
  finish(job);
}

void Batcher::take_out_abandoned(std::vector<Job*>& live) {
  std::vector<Job*> dropped;
  {
    // Their threads wait in run() (a job leaves waiting_ only here and in loop(), both on this thread),
    // so asking under the lock reads nothing another thread writes; each ask is a poll of a socket.
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->abandoned && (*it)->abandoned()) {
        dropped.push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Job* job : dropped) finish_unrun(*job);
  for (size_t k = 0; k < live.size();) {
    Job& job = *live[k];
    if (!job.abandoned || !job.abandoned()) {
      ++k;
      continue;
    }
    job.result = engine_.remove_sequence(job.id);  // unfinished: "stopped"
    live.erase(live.begin() + ptrdiff_t(k));
    finish(job);
  }
}

void Batcher::loop() {
  std::vector<Job*> live;
  auto checked_abandoned_at = std::chrono::steady_clock::now();
  auto take_out_finished = [&] {
    for (size_t k = 0; k < live.size();) {
      Job& job = *live[k];
      if (!engine_.sequence_finished(job.id)) {
        ++k;
        continue;
      }
      job.result = engine_.remove_sequence(job.id);
      live.erase(live.begin() + ptrdiff_t(k));
      finish(job);
    }
  };
  for (;;) {
    std::vector<Job*> joining;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || !waiting_.empty() || !live.empty(); });
      if (quit_ && waiting_.empty() && live.empty()) return;
      // Each waiting request joins while a sequence is free, in the order they came.
      while (!waiting_.empty() && live.size() + joining.size() < sequences_) {
        joining.push_back(waiting_.front());
        waiting_.pop_front();
      }
    }
    for (Job* job : joining) {
      if (std::exception_ptr refusal = refuse_new_()) {
        fail(*job, refusal);
        continue;
      }
      if (job->abandoned && job->abandoned()) {  // its client left while it waited: nothing is run for it
        finish_unrun(*job);
        continue;
      }
      try {
        // Prefills it and takes its first token, or (--prefill-chunks) leaves that to the steps.
        job->id = engine_.add_sequence(*job->request);
        live.push_back(job);
      } catch (...) {
        fail(*job, std::current_exception());
      }
    }
    take_out_finished();  // those that ended at their first token
    if (const auto now = std::chrono::steady_clock::now(); now - checked_abandoned_at >= kCheckAbandonedEvery) {
      checked_abandoned_at = now;
      take_out_abandoned(live);
    }
    if (live.empty()) continue;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      widest_ = std::max(widest_, uint32_t(live.size()));
    }
    try {
      engine_.step_sequences();
    } catch (const SequenceError& e) {
      // One sequence's fault (its logits are not finite, or its JSON constraint left nothing to choose): it
      // would fail again, so its request gets the error; the others go on. Its step's decode either moved
      // no sequence or gave the sequences before it their tokens: those that ended there are taken out below.
      const auto failed = std::find_if(live.begin(), live.end(), [&](const Job* job) { return job->id == e.sequence; });
      if (failed != live.end()) {
        Job& job = **failed;
        live.erase(failed);
        engine_.remove_sequence(job.id);
        fail(job, std::current_exception());
      } else {
        fail_all(live, std::current_exception());  // not one of ours: nothing to take out alone
      }
    } catch (...) {
      // A step that failed for all (a device or transport fault) would fail again: every request gets it.
      fail_all(live, std::current_exception());
    }
    take_out_finished();
  }
}

}  // namespace tilefire::cli
