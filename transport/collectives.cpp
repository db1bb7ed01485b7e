// Collectives over a RankView (transport/collectives.h) and the flag wait with its timeout.
#include "transport/collectives.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace tilefire {

void wait_flag(const RankView& view, uint32_t peer, uint32_t id, uint64_t epoch, const char* collective) {
  std::atomic_ref<uint64_t> flag(view.flags[peer][id]);
  if (flag.load(std::memory_order_acquire) >= epoch) return;
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t spins = 1;; ++spins) {
    const uint64_t seen = flag.load(std::memory_order_acquire);
    if (seen >= epoch) return;
    if (spins % 256 == 0) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
      if (waited.count() >= view.timeout_ms)
        throw TransportError("rank " + std::to_string(view.rank) + " of " + std::to_string(view.ranks) + ": " + collective +
                             " (slot " + std::to_string(id) + ", epoch " + std::to_string(epoch) + ") waited " +
                             std::to_string(waited.count()) + " ms for rank " + std::to_string(peer) +
                             ", which is at epoch " + std::to_string(seen) + ": it died or never arrived");
      std::this_thread::yield();  // ranks may share cores; a spinning waiter must not starve its peer
    }
  }
}

namespace {

// out[i - first] = sum over ranks of input_r[i] for i in [first, last), in rank order.
void sum_in_rank_order(const RankView& view, uint64_t input_offset, uint32_t first, uint32_t last, float* out) {
  for (uint32_t i = first; i < last; ++i) out[i - first] = view.at<const float>(0, input_offset)[i];
  for (uint32_t r = 1; r < view.ranks; ++r) {
    const float* in = view.at<const float>(r, input_offset);
    for (uint32_t i = first; i < last; ++i) out[i - first] += in[i];
  }
}

void wait_all_peers(const RankView& view, uint32_t flag, uint64_t epoch, const char* collective) {
  for (uint32_t r = 0; r < view.ranks; ++r)
    if (r != view.rank) wait_flag(view, r, flag, epoch, collective);
}

}  // namespace

void allreduce_one_shot(const RankView& view, uint64_t input_offset, uint32_t begin, uint32_t end, uint32_t flag,
                        uint64_t epoch, float* out) {
  publish_flag(view, flag, epoch);  // first, so ranks that wait on each other cannot deadlock
  wait_all_peers(view, flag, epoch, "all-reduce");
  sum_in_rank_order(view, input_offset, begin, end, out + begin);
}

void reduce_scatter(const RankView& view, uint64_t input_offset, uint32_t begin, uint32_t end, uint32_t flag,
                    uint64_t epoch, float* out) {
  publish_flag(view, flag, epoch);
  wait_all_peers(view, flag, epoch, "reduce-scatter");
  uint32_t first, last;
  rank_share(begin, end, view.ranks, view.rank, &first, &last);
  sum_in_rank_order(view, input_offset, first, last, out);
}

void allgather(const RankView& view, uint64_t offset, uint32_t begin, uint32_t end, uint32_t flag, uint64_t epoch,
               float* out) {
  publish_flag(view, flag, epoch);
  for (uint32_t r = 0; r < view.ranks; ++r) {
    uint32_t first, last;
    rank_share(begin, end, view.ranks, r, &first, &last);
    if (r != view.rank) wait_flag(view, r, flag, epoch, "all-gather");
    const float* in = view.at<const float>(r, offset);
    for (uint32_t i = first; i < last; ++i) out[i] = in[i];
  }
}

void allreduce_two_phase(const RankView& view, uint64_t input_offset, uint64_t reduced_offset, uint32_t begin,
                         uint32_t end, uint32_t flag, uint64_t epoch, float* out) {
  uint32_t first, last;
  rank_share(begin, end, view.ranks, view.rank, &first, &last);
  // Phase 1 writes this rank's share of the sum where the peers will gather it from.
  reduce_scatter(view, input_offset, begin, end, flag, epoch, view.at<float>(view.rank, reduced_offset) + first);
  allgather(view, reduced_offset, begin, end, flag + 1, epoch, out);
}

}  // namespace tilefire
