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

// An allocation's bytes end where its guard page begins, so the two addresses say everything.
struct WatchedGuard {
  std::atomic<uintptr_t> allocation{0};  // 0: a free slot
  std::atomic<uintptr_t> guard{0};
};
constexpr size_t kSlots = 8192;
WatchedGuard watched[kSlots];

size_t page_bytes = 0;  // set before the handler is installed
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
    const uintptr_t allocation = w.allocation.load(std::memory_order_acquire);
    if (allocation == 0) continue;
    const uintptr_t guard = w.guard.load(std::memory_order_relaxed);
    if (address < guard || address >= guard + page_bytes) continue;
    const size_t bytes = guard - allocation;
    char line[256];
    size_t length = 0;
    append_text(line, &length, sizeof line, "tilefire emulation: device code accessed ");
    append_number(line, &length, sizeof line, address, true);
    append_text(line, &length, sizeof line, ", byte ");
    append_number(line, &length, sizeof line, address - guard, false);
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
  page_bytes = size_t(sysconf(_SC_PAGESIZE));
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous_action);
}

}  // namespace

void watch_guard_page(const void* allocation, size_t bytes) {
  std::call_once(install_once, install_handler);
  const auto address = reinterpret_cast<uintptr_t>(allocation);
  for (WatchedGuard& w : watched) {
    if (w.allocation.load(std::memory_order_relaxed) != 0) continue;
    // Claim the slot with the guard's address first (a slot whose allocation is 0 is skipped by the
    // handler), then publish the allocation.
    uintptr_t free_guard = 0;
    if (!w.guard.compare_exchange_strong(free_guard, address + bytes, std::memory_order_acq_rel)) continue;
    w.allocation.store(address, std::memory_order_release);
    return;
  }
}

void unwatch_guard_page(const void* allocation) {
  const auto address = reinterpret_cast<uintptr_t>(allocation);
  for (WatchedGuard& w : watched) {
    if (w.allocation.load(std::memory_order_acquire) != address) continue;
    w.allocation.store(0, std::memory_order_release);  // the handler skips it from here
    w.guard.store(0, std::memory_order_release);       // and the slot is free
    return;
  }
}

}  // namespace tilefire::emulation
