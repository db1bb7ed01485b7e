// Ranks as processes over POSIX shared memory (fork()ed from the test): the collectives agree across
// processes; a rank that never joins, or is killed mid-run, ends the others' waits with a TransportError
// naming it; and the bootstrap reads RANK / WORLD_SIZE / TILEFIRE_RENDEZVOUS or mpirun's variables.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "transport/collectives.h"
#include "transport/groups.h"

namespace tilefire::testing {
namespace {

constexpr uint32_t kCount = 100;

std::string unique_rendezvous(const char* tag) { return std::string(tag) + "-" + std::to_string(getpid()); }

float value(uint32_t rank, uint64_t epoch, uint32_t i) { return float(rank + 1) * 0.25f + float(epoch) + float(i) * 0.5f; }

// Runs `epochs` all-reduces as `rank`; returns the number of wrong elements. Buffers alternate by parity.
uint64_t run_allreduces(const RankView& view, uint64_t epochs) {
  uint64_t bad = 0;
  std::vector<float> out(kCount);
  for (uint64_t epoch = 1; epoch <= epochs; ++epoch) {
    float* input = view.at<float>(view.rank, (epoch & 1) * kCount * 4);
    for (uint32_t i = 0; i < kCount; ++i) input[i] = value(view.rank, epoch, i);
    allreduce_one_shot(view, (epoch & 1) * kCount * 4, 0, kCount, 0, epoch, out.data());
    for (uint32_t i = 0; i < kCount; ++i) {
      float expected = value(0, epoch, i);
      for (uint32_t r = 1; r < view.ranks; ++r) expected += value(r, epoch, i);
      bad += out[i] != expected;
    }
  }
  return bad;
}

TEST(SharedMemory, TwoProcessesAgree) {
  const std::string meet = unique_rendezvous("agree");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1
    int status = 1;
    try {
      SharedMemoryGroup group(Bootstrap{1, 2, meet, "test"}, 2 * kCount * 4, 4, 5000);
      status = run_allreduces(group.view(), 40) == 0 ? 0 : 1;
    } catch (const std::exception&) {
      status = 2;
    }
    _exit(status);
  }
  SharedMemoryGroup group(Bootstrap{0, 2, meet, "test"}, 2 * kCount * 4, 4, 5000);
  EXPECT_EQ(run_allreduces(group.view(), 40), 0u);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank 1 exited with " << status;
}

TEST(SharedMemory, ARankThatNeverJoinsIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  try {
    SharedMemoryGroup group(Bootstrap{0, 3, unique_rendezvous("never"), "test"}, 4096, 4, 300);
    FAIL() << "a group with absent ranks formed";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1, 2 never joined"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(SharedMemory, ARankKilledMidRunIsNamed) {
  const std::string meet = unique_rendezvous("killed");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1: three epochs, then it reports and waits to be killed
    close(ready[0]);
    SharedMemoryGroup group(Bootstrap{1, 2, meet, "test"}, 2 * kCount * 4, 4, 5000);
    run_allreduces(group.view(), 3);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    for (;;) pause();
  }
  close(ready[1]);
  SharedMemoryGroup group(Bootstrap{0, 2, meet, "test"}, 2 * kCount * 4, 4, 400);
  EXPECT_EQ(run_allreduces(group.view(), 3), 0u);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  shm_unlink(("/tilefire." + meet + ".1").c_str());  // the killed rank could not remove its segment
  std::vector<float> out(kCount);
  try {
    allreduce_one_shot(group.view(), 0, 0, kCount, 0, 4, out.data());
    FAIL() << "an all-reduce with a killed peer returned";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("for rank 1, which is at epoch 3"), std::string::npos) << e.what();
  }
  close(ready[0]);
}

// A rank's segment left by a run whose process died (no destructor ran) is never taken for a live peer:
// the next run's ranks agree on fresh segments and compute correct sums.
TEST(SharedMemory, AStaleSegmentOfADeadRunIsReplaced) {
  const std::string meet = unique_rendezvous("stale");
  for (int run = 0; run < 2; ++run) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // rank 1; in the first run it dies without removing its segment
      auto* group = new SharedMemoryGroup(Bootstrap{1, 2, meet, "test"}, 2 * kCount * 4, 4, 5000);
      const uint64_t bad = run_allreduces(group->view(), 5);
      if (run == 1) delete group;
      _exit(bad == 0 ? 0 : 1);
    }
    {
      SharedMemoryGroup group(Bootstrap{0, 2, meet, "test"}, 2 * kCount * 4, 4, 5000);
      EXPECT_EQ(run_allreduces(group.view(), 5), 0u) << "run " << run;
      int status = 0;
      ASSERT_EQ(waitpid(child, &status, 0), child);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "run " << run;
    }
    if (run == 0) {  // rank 1's stale segment is there, its creator dead
      const int fd = shm_open(("/tilefire." + meet + ".1").c_str(), O_RDONLY, 0600);
      EXPECT_GE(fd, 0) << "the dead rank's segment should have stayed";
      if (fd >= 0) close(fd);
    }
  }
  shm_unlink(("/tilefire." + meet + ".1").c_str());
}

// A second process that claims a rank a live process holds is refused, naming that process.
TEST(SharedMemory, ARankHeldByALiveProcessIsRefused) {
  const std::string meet = unique_rendezvous("held");
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a one-rank group that stays alive until told
    SharedMemoryGroup group(Bootstrap{0, 1, meet, "test"}, 4096, 4, 5000);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    char wait_byte;
    if (read(done[0], &wait_byte, 1) != 1) _exit(4);
    _exit(0);
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  try {
    SharedMemoryGroup group(Bootstrap{0, 1, meet, "test"}, 4096, 4, 300);
    ADD_FAILURE() << "a rank held by a live process was taken over";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("process " + std::to_string(child) + " already holds this rank"), std::string::npos)
        << e.what();
  }
  const char go = 1;
  ASSERT_EQ(write(done[1], &go, 1), 1);
  waitpid(child, nullptr, 0);
  shm_unlink(("/tilefire." + meet + ".0").c_str());
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
}

// Environment variables for the duration of one test.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "TILEFIRE_RENDEZVOUS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "PMIX_NAMESPACE"})
      unsetenv(name);
    for (auto [name, value] : vars) setenv(name, value, 1);
  }
  ~ScopedEnv() {
    for (const char* name : {"RANK", "WORLD_SIZE", "TILEFIRE_RENDEZVOUS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                             "PMIX_NAMESPACE"})
      unsetenv(name);
  }
};

std::string bootstrap_error() {
  try {
    bootstrap_from_environment();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Bootstrap, FromTheEnvironmentAndFromMpirun) {
  {
    ScopedEnv env({});
    EXPECT_FALSE(bootstrap_from_environment().has_value());
  }
  {
    ScopedEnv env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"TILEFIRE_RENDEZVOUS", "job/7"}});
    const auto b = bootstrap_from_environment();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->rank, 1u);
    EXPECT_EQ(b->ranks, 4u);
    EXPECT_EQ(b->rendezvous, "job_7");  // a name for shm_open
    EXPECT_EQ(b->source, "environment");
  }
  {
    ScopedEnv env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMIX_NAMESPACE", "prterun-host-123@1"}});
    const auto b = bootstrap_from_environment();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->ranks, 2u);
    EXPECT_EQ(b->source, "mpirun");
  }
  {
    ScopedEnv env({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"TILEFIRE_RENDEZVOUS", "x"}});
    EXPECT_NE(bootstrap_error().find("rank 2 is outside a world of 2 ranks"), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "1"}});
    EXPECT_NE(bootstrap_error().find("RANK and WORLD_SIZE must be set together"), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "two"}, {"TILEFIRE_RENDEZVOUS", "x"}});
    EXPECT_NE(bootstrap_error().find("WORLD_SIZE must be a non-negative integer, got 'two'"), std::string::npos);
  }
  {
    ScopedEnv env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    EXPECT_NE(bootstrap_error().find("TILEFIRE_RENDEZVOUS"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilefire::testing
