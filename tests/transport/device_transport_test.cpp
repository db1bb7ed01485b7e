// The transport's GPU side on one GPU: R virtual ranks (CTAs of one cooperative kernel) all-reduce over
// one device window with the flag protocol, for many epochs, and must each get bitwise the rank-order
// sum; a one-rank NCCL 2.28 device communicator registers a window, syncs an LSA barrier and reads it
// back; the engine's NCCL back end (transport/nccl_windows.h) sets a one-rank group up, zeroed, its
// flags after its window, and tears it down, and a set-up whose peer never comes ends with its name. Skipped without a GPU (and the NCCL checks without NCCL);
// CI compiles them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/common/cuda_device.h"
#include "transport/device_checks.h"
#include "transport/groups.h"
#include "transport/nccl_windows.h"

namespace tilefire::testing {
namespace {

TEST(DeviceTransport, VirtualRanksAllReduceInRankOrder) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  for (uint32_t ranks : {2u, 3u, 4u, 8u}) {
    const DeviceCheckResult r = check_virtual_rank_allreduce(0, ranks, 4099, 50);
    ASSERT_TRUE(r.ran) << ranks << " ranks: " << r.not_run_because << r.error;
    EXPECT_EQ(r.mismatches, 0u) << ranks << " ranks";
  }
}

TEST(DeviceTransport, OneRankNcclDeviceCommunicator) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  const DeviceCheckResult r = check_nccl_single_rank_window(0, 1000);
  if (!r.ran && r.error.empty()) GTEST_SKIP() << r.not_run_because;
  ASSERT_TRUE(r.ran) << r.error;
  EXPECT_EQ(r.mismatches, 0u);
}

// The NCCL back end's set-up on one GPU (more ranks need more GPUs: NCCL refuses two on one): the id
// passes through a one-rank host group, the window is registered, the device API gives its address,
// and the flags sit after the window at a 4 KiB boundary, zeroed.
TEST(DeviceTransport, NcclWindowGroupOfOneRank) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  if (!NcclWindowGroup::built()) GTEST_SKIP() << "this build has no NCCL 2.28";
  InProcessGroup meeting(1, 4096, 1, 1000);
  constexpr uint64_t kWindowBytes = 5000;
  NcclWindowGroup group(meeting.view(0), 0, 0, kWindowBytes, 7, 1000, 10000);
  const RankView view = group.view();
  ASSERT_EQ(view.ranks, 1u);
  ASSERT_NE(view.windows[0], nullptr);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(view.flags[0]), view.windows[0] + 8192);
  CudaExecutor cuda(CudaOptions{});
  std::vector<uint64_t> flags(7, 1);
  cuda.download(flags.data(), view.flags[0], flags.size() * sizeof(uint64_t));
  for (uint64_t f : flags) EXPECT_EQ(f, 0u);
}

// A rank that never joins NCCL's set-up (it died after the id went round) stops the others within the
// set-up timeout, with its rank named, instead of leaving them in ncclCommInitRank for ever. On one GPU:
// rank 0 of a two-rank group sets up alone.
TEST(DeviceTransport, NcclSetUpNamesARankThatNeverCame) {
  TILEFIRE_REQUIRE_CUDA_DEVICE();
  if (!NcclWindowGroup::built()) GTEST_SKIP() << "this build has no NCCL 2.28";
  InProcessGroup meeting(2, 4096, 1, 1000);
  const auto start = std::chrono::steady_clock::now();
  try {
    NcclWindowGroup group(meeting.view(0), 0, 0, 5000, 7, 1000, 2000);
    FAIL() << "rank 0 of 2 finished NCCL's set-up alone";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 never reached it"), std::string::npos) << e.what();
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_LT(waited.count(), 15000) << "the abort took too long after the 2 s deadline";
}

}  // namespace
}  // namespace tilefire::testing
