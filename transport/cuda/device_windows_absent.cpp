// transport/device_windows.h in a build without CUDA.
#include "tilefire/errors.h"
#include "transport/device_windows.h"

namespace tilefire {

DeviceWindowGroup::DeviceWindowGroup(const std::vector<int>&, uint64_t, uint32_t, uint32_t, KeepMemory) : window_bytes_(0), flag_count_(0), timeout_ms_(0) {
  throw InputError("--backend cuda: this build of tilefire has no CUDA backend (nvcc was not found when it was configured)");
}
DeviceWindowGroup::~DeviceWindowGroup() = default;
void DeviceWindowGroup::release() noexcept {}
RankView DeviceWindowGroup::view(uint32_t) const { return {}; }

}  // namespace tilefire
