// transport/device_checks.h in a build without CUDA: nothing can run.
#include "transport/device_checks.h"

namespace tilefire {

DeviceCheckResult check_virtual_rank_allreduce(int, uint32_t, uint32_t, uint32_t) {
  DeviceCheckResult result;
  result.not_run_because = "this build has no CUDA backend";
  return result;
}

DeviceCheckResult check_nccl_single_rank_window(int, uint32_t) {
  DeviceCheckResult result;
  result.not_run_because = "this build has no CUDA backend";
  return result;
}

}  // namespace tilefire
