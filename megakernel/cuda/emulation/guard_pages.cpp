// The table is a fixed array of atomics, scanned by the signal handler: no locks or allocation there,
// which a handler may not use (the faulting thread may hold the runtime's mutex or be inside malloc).
#include "megakernel/cuda/emulation/guard_pages.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace tilefire::emulation {
namespace {

struct WatchedGuard {
  std::atomic<uintptr_t> guard{0};  // 0: a free slot
  std::atomic<uintptr_t> allocation{0};
  std::atomic<size_t> bytes{0};
  std::atomic<size_t> page_bytes{0};
};
constexpr size_t kSlots = 8192;
WatchedGuard watched[kSlots];

struct sigaction previous_action;
std::once_flag install_once;

// Appends `value` in hexadecimal (0x...) or decimal to `out` at `*length` (async-signal-safe).
void append_number(char* out, size_t* length, size_t capacity, uintptr_t value, bool hex) {
  char digits[24];
  size_t n = 0;
  const unsigned base = hex ? 16 : 10;
  do {
    digits[n++] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0);
  if (hex) digits[n++] = 'x', digits[n++] = '0';
  while (n > 0 && *length + 1 < capacity) out[(*length)++] = digits[--n];
}

void append_text(char* out, size_t* length, size_t capacity, const char* text) {
  for (; *text != '\0' && *length + 1 < capacity; ++text) out[(*length)++] = *text;
}

void on_segv(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const WatchedGuard& w : watched) {
    const uintptr_t guard = w.guard.load(std::memory_order_acquire);
    if (guard == 0 || address < guard || address >= guard + w.page_bytes.load(std::memory_order_relaxed)) continue;
    const uintptr_t allocation = w.allocation.load(std::memory_order_relaxed);
    const size_t bytes = w.bytes.load(std::memory_order_relaxed);
    char line[256];
    size_t length = 0;
    append_text(line, &length, sizeof line, "tilefire emulation: device code accessed ");
    append_number(line, &length, sizeof line, address, true);
    append_text(line, &length, sizeof line, ", byte ");
    append_number(line, &length, sizeof line, address - (allocation + bytes), false);
    append_text(line, &length, sizeof line, " past the end of the ");
    append_number(line, &length, sizeof line, bytes, false);
    append_text(line, &length, sizeof line, "-byte device allocation at ");
    append_number(line, &length, sizeof line, allocation, true);
    append_text(line, &length, sizeof line, " (on a GPU: cudaErrorIllegalAddress)\n");
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line, length);
    break;
  }
  // Give the fault back to whoever had it: returning re-runs the faulting access, which now takes the
  // previous action (a sanitizer's report, or the default: the process dies of SIGSEGV).
  (void)signal_number;
  (void)context;
  sigaction(SIGSEGV, &previous_action, nullptr);
}

void install_handler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_action);
}

}  // namespace

void watch_guard_page(const void* guard, size_t page_bytes, const void* allocation, size_t bytes) {
  std::call_once(install_once, install_handler);
  for (WatchedGuard& w : watched) {
    uintptr_t free_slot = 0;
    if (!w.guard.compare_exchange_strong(free_slot, ~uintptr_t(0), std::memory_order_acq_rel)) continue;
    // Claimed (the all-ones address matches no fault); fill it, then publish the guard's address.
    w.allocation.store(reinterpret_cast<uintptr_t>(allocation), std::memory_order_relaxed);
    w.bytes.store(bytes, std::memory_order_relaxed);
    w.page_bytes.store(page_bytes, std::memory_order_relaxed);
    w.guard.store(reinterpret_cast<uintptr_t>(guard), std::memory_order_release);
    return;
  }
}

void unwatch_guard_page(const void* guard) {
  for (WatchedGuard& w : watched) {
    uintptr_t expected = reinterpret_cast<uintptr_t>(guard);
    if (w.guard.compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return;
  }
}

}  // namespace tilefire::emulation
