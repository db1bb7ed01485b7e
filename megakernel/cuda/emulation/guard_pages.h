#pragma once
// Names the fault when emulated device code runs past the end of a device allocation. Each allocation
// of the emulated runtime ends at an inaccessible page (cuda_runtime_emulated.cpp); a kernel that
// touches it gets SIGSEGV, which by itself prints nothing. While any guard page is watched, a SIGSEGV
// handler looks the faulting address up and, when it lies in a guard page, writes one line naming the
// address, how far past the end it is and the allocation, then lets the fault take its previous course
// (the default action, or a sanitizer's handler), so the process still dies as it would have.
#include <cstddef>

namespace tilefire::emulation {

// Starts watching the page at `allocation + bytes` (page aligned, inaccessible) as the end of the
// `bytes`-byte allocation at `allocation`. Installs the handler the first time. Up to 8192 allocations are
// watched at once; past that a fault in an unwatched page dies without the line.
void watch_guard_page(const void* allocation, size_t bytes);

// Stops watching the guard page of the allocation at `allocation` (before its mapping is released).
void unwatch_guard_page(const void* allocation);

}  // namespace tilefire::emulation
