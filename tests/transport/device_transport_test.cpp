// The transport's GPU side on one GPU: R virtual ranks (CTAs of one cooperative kernel) all-reduce over
// one device window with the flag protocol, for many epochs, and must each get bitwise the rank-order
// sum; a one-rank NCCL 2.28 device communicator registers a window, syncs an LSA barrier and reads it
// back. Skipped without a GPU (and the NCCL check without NCCL); CI compiles them.
#include <gtest/gtest.h>

#include "tests/common/cuda_device.h"
#include "transport/device_checks.h"

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

}  // namespace
}  // namespace tilefire::testing
