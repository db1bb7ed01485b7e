// The persistent megakernel (megakernel/cuda/megakernel.cu), compiled by the host compiler for the host
// emulation, and registered with it so the emulated runtime can launch it.
#include "megakernel/cuda/emulation/device_prelude.h"

#include "megakernel/cuda/megakernel.cu"

namespace {
// The kernel's static shared memory: its CTA state and the two mbarrier arrays.
constexpr uint32_t kStaticSharedBytes =
    uint32_t(sizeof(tilefire::device::CtaState) + 2 * tilefire::kDeviceMaxStages * sizeof(uint64_t) + sizeof(uint32_t));
const bool registered = tilefire::emulation::register_kernel_function<&tilefire::device::megakernel>(kStaticSharedBytes);
}  // namespace
