#pragma once
// What `tilefire serve` has done, for GET /metrics in Prometheus's text format (version 0.0.4): requests by
// path and status, prompt and generated tokens (and speculation's drafted and accepted tokens), generations
// by finish reason, generations in flight, and histograms of the time to the first token, the time per output token (as GenerateResult measures them)
// and a generation request's whole time in the server (read to reply, its wait for the engine included).
// A request is counted when it ends, so a scrape does not count itself. Thread-safe.
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "tilefire/engine.h"

namespace tilefire::cli {

class ServeMetrics {
 public:
  // Upper bounds of every histogram's buckets, in seconds (a +Inf bucket follows).
  static constexpr std::array<double, 14> kBucketSeconds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                            0.25,  0.5,    1,     2.5,  5,     10,  30};

  // A request answered: `path` one the server serves (others are counted as "other", so arbitrary paths
  // cannot grow the output); `seconds` its time from being read to being answered.
  void request_ended(const std::string& path, int status, double seconds);
  void generation_started();
  // A generation that ran (answered whole or streamed); one that threw ends with generation_failed.
  void generation_ended(const GenerateResult& result);
  void generation_failed();
  std::string render() const;

 private:
  struct Histogram {
    std::array<uint64_t, kBucketSeconds.size() + 1> counts{};  // per bucket (not cumulative); last: +Inf
    double sum = 0;
    uint64_t count = 0;
    void observe(double seconds);
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (path, status)
  std::map<std::string, uint64_t> finished_;                  // by finish reason
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0, in_flight_ = 0;
  uint64_t reused_prompt_tokens_ = 0;  // GenerateResult::reused_tokens: not prefilled
  uint64_t draft_tokens_ = 0, accepted_tokens_ = 0;  // speculative decoding's
  Histogram ttft_, tpot_, generation_request_;
};

}  // namespace tilefire::cli
