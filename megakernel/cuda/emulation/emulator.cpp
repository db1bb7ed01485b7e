// The host emulation of a CUDA device (emulator.h): grids, CTAs as OS threads, threads as fibers, and
// the CTA-level machinery (barriers, warp collectives, mbarriers, bulk copies) the device code meets.
#include "megakernel/cuda/emulation/emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
// Under ThreadSanitizer every fiber is announced to it, and each switch synchronises the two fibers
// (they are one CTA's threads: their order is the barriers', which the switches follow).
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define TILEFIRE_TSAN_FIBERS 1
// The emulation's own wake-ups between CTAs must not order the CTAs' memory for TSan: a kernel whose
// signal lacks its fence would pass through them. (libtsan's dynamic annotations.)
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
#define TILEFIRE_IGNORE_SYNC_BEGIN() AnnotateIgnoreSyncBegin(__FILE__, __LINE__)
#define TILEFIRE_IGNORE_SYNC_END() AnnotateIgnoreSyncEnd(__FILE__, __LINE__)
#else
#define TILEFIRE_IGNORE_SYNC_BEGIN()
#define TILEFIRE_IGNORE_SYNC_END()
#endif

namespace tilefire::emulation {

namespace {

// --- fiber stacks and context switches --------------------------------------------------------------

constexpr size_t kStackBytes = 256 * 1024;  // device code is shallow; the guard page below catches overflow

// Stacks are reused across launches (a decode step is one launch of ~300 threads per CTA).
class StackPool {
 public:
  unsigned char* take() {
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        unsigned char* stack = free_.back();
        free_.pop_back();
        return stack;
      }
    }
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    void* memory = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "tilefire emulation: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(memory, page, PROT_NONE);  // the guard page, below the stack
    return static_cast<unsigned char*>(memory) + page;
  }
  void give_back(unsigned char* stack) {
    std::lock_guard lock(mutex_);
    free_.push_back(stack);
  }

 private:
  std::mutex mutex_;
  std::vector<unsigned char*> free_;
};

StackPool& stack_pool() {
  static StackPool* pool = new StackPool;  // never destroyed: grids may outlive static destruction order
  return *pool;
}

#if defined(__x86_64__)
// System V x86-64: saves the callee-saved registers, MXCSR and the x87 control word on the current
// stack, stores the stack pointer in *save, and resumes the context whose stack pointer is `load`.
extern "C" void tilefire_emulation_switch(void** save, void* load);
extern "C" void tilefire_emulation_fiber_start();
asm(R"(
.text
.globl tilefire_emulation_switch
.type tilefire_emulation_switch,@function
tilefire_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size tilefire_emulation_switch, .-tilefire_emulation_switch
.globl tilefire_emulation_fiber_start
.type tilefire_emulation_fiber_start,@function
tilefire_emulation_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
.size tilefire_emulation_fiber_start, .-tilefire_emulation_fiber_start
)");

struct Context {
  void* stack_pointer = nullptr;
  void* tsan_fiber = nullptr;
};

// A fresh context that calls entry(argument) on `stack` when first resumed.
void make_context(Context& context, unsigned char* stack, void (*entry)(void*), void* argument) {
#if TILEFIRE_TSAN_FIBERS
  context.tsan_fiber = __tsan_create_fiber(0);
#endif
  auto* top = reinterpret_cast<uint64_t*>(reinterpret_cast<uintptr_t>(stack + kStackBytes) & ~uintptr_t(15));
  uint64_t* sp = top - 10;  // 16-byte aligned: after the pops and the ret, rsp = top - 16
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  sp[0] = uint64_t(mxcsr) | (uint64_t(fpcw) << 32);
  sp[1] = 0;                                    // r15
  sp[2] = 0;                                    // r14
  sp[3] = reinterpret_cast<uint64_t>(entry);    // r13
  sp[4] = reinterpret_cast<uint64_t>(argument); // r12
  sp[5] = 0;                                    // rbx
  sp[6] = 0;                                    // rbp
  sp[7] = reinterpret_cast<uint64_t>(&tilefire_emulation_fiber_start);
  context.stack_pointer = sp;
}
void switch_context(Context& from, Context& to) {
#if TILEFIRE_TSAN_FIBERS
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  tilefire_emulation_switch(&from.stack_pointer, to.stack_pointer);
}
#else
struct Context {
  ucontext_t context{};
  void* tsan_fiber = nullptr;
};
void make_context(Context& context, unsigned char* stack, void (*entry)(void*), void* argument) {
#if TILEFIRE_TSAN_FIBERS
  context.tsan_fiber = __tsan_create_fiber(0);
#endif
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = kStackBytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, reinterpret_cast<void (*)()>(entry), 1, argument);
}
void switch_context(Context& from, Context& to) {
#if TILEFIRE_TSAN_FIBERS
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  swapcontext(&from.context, &to.context);
}
#endif

// The context the calling OS thread runs in, as the scheduler's (a fiber switches back to it).
void adopt_current_context(Context& context) {
#if TILEFIRE_TSAN_FIBERS
  context.tsan_fiber = __tsan_get_current_fiber();
#else
  (void)context;
#endif
}
void destroy_context(Context& context) {
#if TILEFIRE_TSAN_FIBERS
  if (context.tsan_fiber) __tsan_destroy_fiber(context.tsan_fiber);
  context.tsan_fiber = nullptr;
#else
  (void)context;
#endif
}

// Thrown in a fiber to unwind it when its grid has trapped; caught at the fiber's entry.
struct KernelUnwind {};

// Writes to global memory that another CTA may be polling for (atomics, release stores) bump this
// epoch; a CTA whose threads all poll sleeps until it moves, or for a millisecond at most (the host's
// writes, such as a resident kernel's doorbell, do not bump it).
class GlobalWrites {
 public:
  void note() {
    TILEFIRE_IGNORE_SYNC_BEGIN();
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);
      changed_.notify_all();
    }
    TILEFIRE_IGNORE_SYNC_END();
  }
  uint64_t epoch() const {
    TILEFIRE_IGNORE_SYNC_BEGIN();
    const uint64_t e = epoch_.load(std::memory_order_seq_cst);
    TILEFIRE_IGNORE_SYNC_END();
    return e;
  }
  void sleep_while(uint64_t seen) {
    TILEFIRE_IGNORE_SYNC_BEGIN();
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, std::chrono::milliseconds(1), [&] { return epoch_.load(std::memory_order_seq_cst) != seen; });
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    TILEFIRE_IGNORE_SYNC_END();
  }

 private:
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
};

GlobalWrites& global_writes() {
  static GlobalWrites* writes = new GlobalWrites;  // never destroyed: grids may outlive static destruction
  return *writes;
}

}  // namespace

// --- the grid and its CTAs ------------------------------------------------------------------------------

namespace detail {
thread_local const uint3* current_thread_index = nullptr;
thread_local uint32_t current_lane = 0;
}  // namespace detail

class Cta;

class Grid {
 public:
  Grid(KernelArguments* arguments, dim3 grid, dim3 block, size_t dynamic_shared)
      : arguments_(arguments), grid_(grid), block_(block), dynamic_shared_(dynamic_shared) {}
  ~Grid() { delete arguments_; }

  void start();
  void join() {
    for (std::thread& t : threads_) t.join();
  }
  bool finished() const { return running_.load(std::memory_order_acquire) == 0; }

  void record_trap(const std::string& message) {
    std::lock_guard lock(mutex_);
    if (!trapped_.load(std::memory_order_relaxed)) trap_message_ = message;
    trapped_.store(true, std::memory_order_release);
  }
  bool trapped() const { return trapped_.load(std::memory_order_acquire); }
  std::string trap_message() {
    std::lock_guard lock(mutex_);
    return trap_message_;
  }

  KernelArguments& arguments() { return *arguments_; }
  const dim3& grid() const { return grid_; }
  const dim3& block() const { return block_; }
  size_t dynamic_shared() const { return dynamic_shared_; }

 private:
  KernelArguments* arguments_;
  dim3 grid_, block_;
  size_t dynamic_shared_;
  std::vector<std::thread> threads_;
  std::atomic<uint32_t> running_{0};
  std::atomic<bool> trapped_{false};
  std::mutex mutex_;
  std::string trap_message_;
};

namespace {

struct Fiber {
  Cta* cta = nullptr;
  uint32_t linear = 0;  // x + y * block.x + z * block.x * block.y
  uint3 index{};
  Context context;
  unsigned char* stack = nullptr;
  bool finished = false;
  // While wait_word is set and *wait_word == wait_value, the scheduler leaves this fiber asleep.
  const uint32_t* wait_word = nullptr;
  uint32_t wait_value = 0;
  const char* waiting_at = "";  // for the deadlock message
  uint32_t collectives = 0;     // warp collectives this lane has entered
  bool fenced = false;          // a fence since this thread's last barrier (device_prelude.h, __threadfence)
};

struct Barrier {  // bar.sync
  uint32_t arrived = 0;
  uint32_t expected = 0;
  uint32_t generation = 0;
};

struct WarpExchange {
  uint32_t words[2][32][kCollectiveWords] = {};
  Collective kinds[2][32] = {};
  uint32_t arrived[2] = {0, 0};
  uint32_t completed = 0;  // collectives the whole warp has completed
};

struct MbarrierState {
  uint32_t expected = 0;  // arrivals per phase
  uint32_t pending = 0;   // arrivals the current phase still waits for
  int64_t tx = 0;         // transaction bytes it still waits for
  uint32_t phase = 0;     // phases completed
};

struct PendingCopy {
  void* destination = nullptr;
  const void* source = nullptr;
  uint32_t bytes = 0;
  uint64_t* barrier = nullptr;
};

}  // namespace

class Cta {
 public:
  Cta(Grid& grid, uint32_t linear_block) : grid_(grid) {
    const dim3& g = grid.grid();
    block_index_ = {linear_block % g.x, (linear_block / g.x) % g.y, linear_block / (g.x * g.y)};
    const dim3& b = grid.block();
    threads_ = b.x * b.y * b.z;
    // 128-byte aligned dynamic shared memory, filled with 0xff: NaN for f32 and bf16 alike.
    shared_storage_.assign(grid.dynamic_shared() + 128, 0xff);
    dynamic_shared_ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(shared_storage_.data()) + 127) & ~uintptr_t(127));
    warps_.resize((threads_ + 31) / 32);
  }

  void run();

  // --- on a fiber ---
  Fiber& current() { return *current_; }
  Grid& grid() { return grid_; }
  const uint3& block_index() const { return block_index_; }
  unsigned char* dynamic_shared() { return dynamic_shared_; }

  void yield() {
    switch_from(*current_);
    if (grid_.trapped()) throw KernelUnwind{};
  }
  void wait_while_equal(const uint32_t* word, uint32_t value, const char* what) {
    Fiber& f = *current_;
    while (*word == value) {
      f.wait_word = word;
      f.wait_value = value;
      f.waiting_at = what;
      yield();
    }
    f.wait_word = nullptr;
  }
  void poll() {
    current_->wait_word = nullptr;
    yield();
  }
  [[noreturn]] void trap(const std::string& why) {
    const Fiber& f = *current_;
    grid_.record_trap("CTA (" + std::to_string(block_index_.x) + ", " + std::to_string(block_index_.y) + ", " +
                      std::to_string(block_index_.z) + ") thread " + std::to_string(f.linear) + ": " + why);
    throw KernelUnwind{};
  }

  void barrier_sync(uint32_t id, uint32_t threads) {
    if (id >= 16) trap("bar.sync " + std::to_string(id) + ": barriers are 0 to 15");
    if (threads == 0 || threads % 32 != 0 || threads > threads_)
      trap("bar.sync " + std::to_string(id) + " with " + std::to_string(threads) + " threads in a CTA of " +
           std::to_string(threads_) + " (a multiple of 32, at most the CTA)");
    Barrier& b = barriers_[id];
    if (b.arrived == 0) {
      b.expected = threads;
    } else if (b.expected != threads) {
      trap("bar.sync " + std::to_string(id) + " reached with " + std::to_string(threads) + " threads while others wait for " +
           std::to_string(b.expected));
    }
    current_->fenced = false;
    const uint32_t generation = b.generation;
    if (++b.arrived == threads) {
      b.arrived = 0;
      ++b.generation;
      return;
    }
    wait_while_equal(&b.generation, generation, id == 0 ? "__syncthreads" : "bar.sync");
  }

  const uint32_t* warp_collective(Collective kind, uint32_t mask, const uint32_t* words, uint32_t count) {
    if (mask != 0xffffffffu) trap("a warp collective with mask " + std::to_string(mask) + " (the emulation takes full warps)");
    if (threads_ % 32 != 0) trap("a warp collective in a CTA of " + std::to_string(threads_) + " threads (not whole warps)");
    Fiber& f = *current_;
    WarpExchange& w = warps_[f.linear / 32];
    const uint32_t lane = f.linear % 32;
    const uint32_t generation = f.collectives++;
    const uint32_t buffer = generation & 1;
    std::copy(words, words + count, w.words[buffer][lane]);
    w.kinds[buffer][lane] = kind;
    if (++w.arrived[buffer] == 32) {
      w.arrived[buffer] = 0;
      for (uint32_t l = 1; l < 32; ++l)
        if (w.kinds[buffer][l] != w.kinds[buffer][0])
          trap("the lanes of warp " + std::to_string(f.linear / 32) + " are in different warp collectives (lane 0 in " +
               collective_name(w.kinds[buffer][0]) + ", lane " + std::to_string(l) + " in " + collective_name(w.kinds[buffer][l]) +
               ")");
      w.completed = generation + 1;
    } else {
      wait_while_equal(&w.completed, generation, "a warp collective");
    }
    return &w.words[buffer][0][0];
  }

  void mbarrier_init(uint64_t* barrier, uint32_t arrivals) {
    if (arrivals == 0 || arrivals >= (1u << 20)) trap("mbarrier.init with " + std::to_string(arrivals) + " arrivals");
    if (reinterpret_cast<uintptr_t>(barrier) % 8 != 0) trap("mbarrier.init on an address that is not 8-byte aligned");
    mbarriers_[barrier] = MbarrierState{arrivals, arrivals, 0, 0};
  }
  MbarrierState& mbarrier(uint64_t* barrier, const char* what) {
    auto it = mbarriers_.find(barrier);
    if (it == mbarriers_.end()) trap(std::string(what) + " on an mbarrier that was never initialised");
    return it->second;
  }
  void mbarrier_arrive(uint64_t* barrier, uint32_t expect_tx_bytes) {
    MbarrierState& m = mbarrier(barrier, "mbarrier.arrive");
    if (m.pending == 0) trap("mbarrier.arrive on a phase with no pending arrivals");
    m.tx += expect_tx_bytes;
    --m.pending;
    complete_phase_if_done(m);
  }
  bool mbarrier_test_parity(uint64_t* barrier, uint32_t parity) {
    if ((mbarrier(barrier, "mbarrier.try_wait").phase & 1u) != (parity & 1u)) return true;
    land_copies(barrier);  // a copy lands as late as it can: when its barrier is waited on
    if ((mbarrier(barrier, "mbarrier.try_wait").phase & 1u) != (parity & 1u)) return true;
    poll();  // try_wait suspends for a while before it answers
    return (mbarrier(barrier, "mbarrier.try_wait").phase & 1u) != (parity & 1u);
  }
  void bulk_copy_to_shared(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
    const auto d = reinterpret_cast<uintptr_t>(destination), s = reinterpret_cast<uintptr_t>(source);
    if (bytes == 0 || bytes % 16 != 0 || d % 16 != 0 || s % 16 != 0)
      trap("cp.async.bulk of " + std::to_string(bytes) + " bytes from an address " + std::to_string(s % 16) +
           " bytes past 16-byte alignment to one " + std::to_string(d % 16) +
           " bytes past it (the size and both addresses must be multiples of 16)");
    const auto shared_begin = reinterpret_cast<uintptr_t>(dynamic_shared_);
    if (d < shared_begin || d + bytes > shared_begin + grid_.dynamic_shared())
      trap("cp.async.bulk into memory outside the CTA's dynamic shared memory");
    mbarrier(barrier, "cp.async.bulk");
    std::memset(destination, 0xff, bytes);  // what it will write reads as NaN until it lands
    copies_.push_back({destination, source, bytes, barrier});
  }

 private:
  static const char* collective_name(Collective kind) {
    switch (kind) {
      case Collective::syncwarp: return "__syncwarp";
      case Collective::shuffle: return "a shuffle";
      case Collective::vote: return "a vote";
      case Collective::mma: return "mma.sync";
    }
    return "?";
  }
  static void complete_phase_if_done(MbarrierState& m) {
    if (m.pending != 0 || m.tx != 0) return;
    ++m.phase;
    m.pending = m.expected;
    m.tx = 0;
  }
  // The copies in flight that complete on `barrier` (every copy when null), in issue order; true if any
  // landed.
  bool land_copies(const uint64_t* barrier) {
    bool landed = false;
    for (size_t i = 0; i < copies_.size();) {
      const PendingCopy c = copies_[i];
      if (barrier != nullptr && c.barrier != barrier) {
        ++i;
        continue;
      }
      std::memcpy(c.destination, c.source, c.bytes);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      copies_.erase(copies_.begin() + long(i));
      auto it = mbarriers_.find(c.barrier);
      if (it != mbarriers_.end()) {
        it->second.tx -= c.bytes;
        complete_phase_if_done(it->second);
      }
      landed = true;
    }
    return landed;
  }
  // The next fiber after `position` in this round that may run (a finished one never does, nor one whose
  // word still holds what it waits to see change); null at the round's end.
  Fiber* next_runnable(size_t position) {
    for (size_t i = position; i < fibers_.size(); ++i) {
      Fiber& f = fibers_[i];
      if (f.finished) continue;
      if (f.wait_word != nullptr && *f.wait_word == f.wait_value && !round_trapped_) continue;
      if (f.wait_word != nullptr) round_progressed_ = true;  // what it waited for happened
      round_resumed_any_ = true;
      return &f;
    }
    return nullptr;
  }
  // Leaves `from` (which yields or has finished) for the round's next fiber, straight from fiber to
  // fiber, or for the scheduler at the round's end.
  void switch_from(Fiber& from) {
    Fiber* next = next_runnable(from.linear + 1);
    enter(next);
    switch_context(from.context, next ? next->context : scheduler_);
  }
  void enter(Fiber* f) {
    current_ = f;
    if (f) {
      detail::current_thread_index = &f->index;
      detail::current_lane = f->linear % 32;
    }
  }
  static void fiber_entry(void* argument);
  std::string deadlock_message() const;

  Grid& grid_;
  uint3 block_index_{};
  uint32_t threads_ = 0;
  std::vector<unsigned char> shared_storage_;
  unsigned char* dynamic_shared_ = nullptr;
  std::vector<Fiber> fibers_;
  Fiber* current_ = nullptr;
  Context scheduler_;
  uint32_t live_ = 0;  // fibers not finished
  // This round: whether the grid had trapped when it began (then every fiber runs, to unwind), whether
  // a thread moved on (a wait ended, a thread finished), whether any thread ran at all.
  bool round_trapped_ = false, round_progressed_ = false, round_resumed_any_ = false;
  Barrier barriers_[16];
  std::vector<WarpExchange> warps_;
  std::unordered_map<const uint64_t*, MbarrierState> mbarriers_;
  std::vector<PendingCopy> copies_;  // bulk copies in flight
};

namespace {

thread_local Cta* t_cta = nullptr;

Cta& cta() {
  if (t_cta == nullptr) {
    std::fprintf(stderr, "tilefire emulation: a device function was called outside a kernel\n");
    std::abort();
  }
  return *t_cta;
}

}  // namespace

void Cta::fiber_entry(void* argument) {
  Fiber& f = *static_cast<Fiber*>(argument);
  Cta& cta = *f.cta;
  try {
    if (!cta.grid_.trapped()) cta.grid_.arguments().run();
  } catch (const KernelUnwind&) {
  } catch (const std::exception& e) {
    cta.grid_.record_trap(std::string("an exception in device code: ") + e.what());
  }
  f.finished = true;
  --cta.live_;
  cta.round_progressed_ = true;
  cta.switch_from(f);
  std::abort();  // a finished fiber is never resumed
}

std::string Cta::deadlock_message() const {
  std::string waits;
  uint32_t shown = 0;
  for (const Fiber& f : fibers_) {
    if (f.finished || shown == 4) continue;
    waits += (shown ? ", " : "") + std::string("thread ") + std::to_string(f.linear) + " at " + f.waiting_at;
    ++shown;
  }
  const uint32_t finished = threads_ - live_;
  const std::string exited = finished == 1 ? "; 1 thread has exited"
                             : finished    ? "; " + std::to_string(finished) + " threads have exited"
                                           : "";
  return "CTA (" + std::to_string(block_index_.x) + ", " + std::to_string(block_index_.y) + ", " + std::to_string(block_index_.z) +
         ") deadlocked: every live thread waits for threads that cannot come (" + waits + exited + ")";
}

void Cta::run() {
  t_cta = this;
  adopt_current_context(scheduler_);
  fibers_.resize(threads_);
  const dim3& b = grid_.block();
  for (uint32_t i = 0; i < threads_; ++i) {
    Fiber& f = fibers_[i];
    f.cta = this;
    f.linear = i;
    f.index = {i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
    f.stack = stack_pool().take();
    make_context(f.context, f.stack, &Cta::fiber_entry, &f);
  }
  live_ = threads_;
  uint64_t idle_rounds = 0;
  while (live_ > 0) {
    const uint64_t writes_seen = global_writes().epoch();
    round_progressed_ = round_resumed_any_ = false;
    round_trapped_ = grid_.trapped();
    // One round: every fiber that may run, in order, each switching straight to the next.
    if (Fiber* first = next_runnable(0)) {
      enter(first);
      switch_context(scheduler_, first->context);
    }
    enter(nullptr);
    const bool progressed = round_progressed_, resumed_any = round_resumed_any_;
    if (live_ > 0 && !resumed_any && !grid_.trapped()) {
      if (land_copies(nullptr)) continue;  // a thread sleeps on what a copy completes
      grid_.record_trap(deadlock_message());
      continue;
    }
    if (progressed) {
      idle_rounds = 0;
    } else if (++idle_rounds > 16 && land_copies(nullptr)) {  // every thread polls: maybe for a copy
      idle_rounds = 0;
    } else if (idle_rounds > 16) {
      global_writes().sleep_while(writes_seen);  // every thread polls: another CTA or the host has to move
    }
  }
  if (!copies_.empty() && !grid_.trapped())  // their writes would land in shared memory the CTA no longer owns
    grid_.record_trap("CTA (" + std::to_string(block_index_.x) + ", " + std::to_string(block_index_.y) + ", " +
                      std::to_string(block_index_.z) + ") exited with " + std::to_string(copies_.size()) +
                      " bulk copies still landing in its shared memory");
  for (Fiber& f : fibers_) {
    destroy_context(f.context);
    stack_pool().give_back(f.stack);
  }
  t_cta = nullptr;
}

void Grid::start() {
  const uint32_t ctas = grid_.x * grid_.y * grid_.z;
  running_.store(ctas, std::memory_order_release);
  threads_.reserve(ctas);
  for (uint32_t c = 0; c < ctas; ++c)
    threads_.emplace_back([this, c] {
      {
        Cta cta(*this, c);
        cta.run();
      }
      running_.fetch_sub(1, std::memory_order_acq_rel);
    });
}

// --- the device model and the kernel registry --------------------------------------------------------

const DeviceModel& device_model() {
  static const DeviceModel model = [] {
    DeviceModel m;
    if (const char* sms = std::getenv("TILEFIRE_EMULATED_SMS")) {
      const long n = std::strtol(sms, nullptr, 10);
      if (n >= 1 && n <= 64) m.multiprocessors = uint32_t(n);
    }
    return m;
  }();
  return model;
}

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const void*, KernelInfo>& registry() {
  static std::unordered_map<const void*, KernelInfo> r;
  return r;
}
}  // namespace

void register_kernel(const void* entry, ArgumentCopier copier, uint32_t static_shared_bytes) {
  std::lock_guard lock(registry_mutex());
  registry()[entry] = KernelInfo{copier, static_shared_bytes, 48 * 1024};
}

KernelInfo* find_kernel(const void* entry) {
  std::lock_guard lock(registry_mutex());
  auto it = registry().find(entry);
  return it == registry().end() ? nullptr : &it->second;
}

uint32_t blocks_per_multiprocessor(const KernelInfo& kernel, uint32_t threads, size_t dynamic_shared_bytes) {
  const DeviceModel& model = device_model();
  if (threads == 0 || threads > model.max_threads_per_block) return 0;
  const uint64_t shared = dynamic_shared_bytes + kernel.static_shared_bytes;
  if (shared > model.shared_per_block_optin) return 0;
  const uint32_t warps = (threads + 31) / 32;
  uint64_t blocks = std::min<uint64_t>(32, model.max_threads_per_multiprocessor / (warps * 32));
  if (shared > 0) blocks = std::min<uint64_t>(blocks, model.shared_per_multiprocessor / shared);
  return uint32_t(blocks);
}

Grid* launch_grid(const void* entry, dim3 grid, dim3 block, void** arguments, size_t dynamic_shared_bytes, bool cooperative,
                  std::string* error) {
  KernelInfo* kernel = find_kernel(entry);
  const DeviceModel& model = device_model();
  const uint64_t threads = uint64_t(block.x) * block.y * block.z, ctas = uint64_t(grid.x) * grid.y * grid.z;
  if (kernel == nullptr) {
    *error = "not a kernel of the emulation";
    return nullptr;
  }
  if (threads == 0 || threads > model.max_threads_per_block || ctas == 0) {
    *error = "a grid of " + std::to_string(ctas) + " CTAs of " + std::to_string(threads) + " threads";
    return nullptr;
  }
  if (dynamic_shared_bytes > kernel->max_dynamic_shared_bytes ||
      dynamic_shared_bytes + kernel->static_shared_bytes > model.shared_per_block_optin) {
    *error = std::to_string(dynamic_shared_bytes) + " bytes of dynamic shared memory, above the kernel's limit of " +
             std::to_string(kernel->max_dynamic_shared_bytes);
    return nullptr;
  }
  const uint64_t resident = uint64_t(blocks_per_multiprocessor(*kernel, uint32_t(threads), dynamic_shared_bytes)) * model.multiprocessors;
  if (cooperative && ctas > resident) {  // a cooperative grid must be resident all at once
    *error = "a cooperative grid of " + std::to_string(ctas) + " CTAs, of which " + std::to_string(resident) + " can be resident";
    return nullptr;
  }
  auto* g = new Grid(kernel->copy_arguments(arguments), grid, block, dynamic_shared_bytes);
  g->start();
  return g;
}

bool grid_finished(const Grid* grid) { return grid->finished(); }

bool join_grid(Grid* grid, std::string* message) {
  grid->join();
  const bool trapped = grid->trapped();
  if (trapped && message) *message = grid->trap_message();
  delete grid;
  return !trapped;
}

// --- what the device code calls ----------------------------------------------------------------------

const uint3& block_index() { return cta().block_index(); }
const dim3& block_dim() { return cta().grid().block(); }
const dim3& grid_dim() { return cta().grid().grid(); }
unsigned char* dynamic_shared_memory() { return cta().dynamic_shared(); }

void barrier_sync(uint32_t id, uint32_t threads) { cta().barrier_sync(id, threads); }
const uint32_t* warp_collective(Collective kind, uint32_t mask, const uint32_t* words, uint32_t count) {
  return cta().warp_collective(kind, mask, words, count);
}
void poll() { cta().poll(); }
void note_global_write() { global_writes().note(); }
void note_fence() { cta().current().fenced = true; }
bool fenced() { return cta().current().fenced; }
void trap(const std::string& why) { cta().trap(why); }
uint64_t global_timer_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void mbarrier_init(uint64_t* barrier, uint32_t arrivals) { cta().mbarrier_init(barrier, arrivals); }
void mbarrier_arrive(uint64_t* barrier, uint32_t expect_tx_bytes) { cta().mbarrier_arrive(barrier, expect_tx_bytes); }
bool mbarrier_test_parity(uint64_t* barrier, uint32_t parity) { return cta().mbarrier_test_parity(barrier, parity); }
void bulk_copy_to_shared(void* destination, const void* source, uint32_t bytes, uint64_t* barrier) {
  cta().bulk_copy_to_shared(destination, source, bytes, barrier);
}

}  // namespace tilefire::emulation
