// transport/nccl_windows.h in a build without NCCL 2.28 (or without CUDA).
#include "tilefire/errors.h"
#include "transport/nccl_windows.h"

namespace tilefire {

struct NcclWindowGroup::State {};

bool NcclWindowGroup::built() { return false; }

NcclWindowGroup::NcclWindowGroup(const RankView&, uint32_t, int, uint64_t, uint32_t, uint32_t, uint32_t) {
  throw InputError("--tp with --backend cuda and one rank per process needs NCCL 2.28 with its device API, which this "
                   "build of tilefire does not have (nccl.h and libnccl were not found when it was configured)");
}
NcclWindowGroup::~NcclWindowGroup() = default;
RankView NcclWindowGroup::view() const { return {}; }

}  // namespace tilefire
