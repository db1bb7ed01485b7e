#pragma once
// Spin-then-block waiting on grow-only counters, and the counter comparisons themselves.
//
// A waiter spins (cheap when the producer is a few hundred nanoseconds away), then yields, then parks on
// an epoch word with std::atomic::wait. A signaller wakes parked threads only when someone is parked, so
// the common path of a signal is one atomic add and one plain load. The store/load pair on each side
// (waiter: sleepers++ then re-check; signaller: counter++ then check sleepers) is all seq_cst, so by the
// single total order one of the two sees the other and a wake-up is never lost. On x86 this costs
// nothing beyond the locked add itself: seq_cst loads are plain loads.
#include <atomic>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tilefire {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Counters only grow and may wrap: `value` has reached `target` when it is at most 2^31 - 1 past it.
constexpr bool counter_reached(uint32_t value, uint32_t target) { return int32_t(value - target) >= 0; }

// seq_cst (a plain load on x86) so that it pairs with Parking's sleeper count; see Parking.
inline bool event_reached(const std::atomic<uint32_t>& counter, uint32_t target) {
  return counter_reached(counter.load(std::memory_order_seq_cst), target);
}

class Parking {
 public:
  template <class Ready>
  void wait_until(Ready&& ready) {
    wait_until(ready, [] { return false; });
  }

  // As above; while spinning, `idle_work()` runs instead of a pause for as long as it returns true (it
  // has more to do), so a waiting worker can do useful work, such as fetching its next tile's weights.
  template <class Ready, class IdleWork>
  void wait_until(Ready&& ready, IdleWork&& idle_work) {
    for (int i = 0; i < kSpins;) {
      if (ready()) return;
      if (!idle_work()) {
        cpu_relax();
        ++i;
      }
    }
    for (int i = 0; i < kYields; ++i) {
      if (ready()) return;
      std::this_thread::yield();
    }
    for (;;) {
      const uint32_t seen = epoch_.load(std::memory_order_acquire);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (ready()) {  // `ready` must read the counter with a seq_cst load
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      epoch_.wait(seen, std::memory_order_acquire);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (ready()) return;
    }
  }

  // Call after the seq_cst store or read-modify-write that may make a waiter ready.
  void wake_all() {
    if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
  }

 private:
  static constexpr int kSpins = 2048;
  static constexpr int kYields = 64;
  alignas(64) std::atomic<uint32_t> epoch_{0};
  alignas(64) std::atomic<uint32_t> sleepers_{0};
};

}  // namespace tilefire
