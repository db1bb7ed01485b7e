// transport/device_checks.h over the host emulation of the device (megakernel/cuda/emulation/): the
// virtual-rank kernel compiled by the host compiler and registered with the emulation. The NCCL check
// is left out (an emulated build has no NCCL), and says so.
#include "megakernel/cuda/emulation/device_prelude.h"

#include "transport/cuda/device_checks.cu"

namespace {
const bool registered = tilefire::emulation::register_kernel_function<&tilefire::virtual_rank_allreduce>(sizeof(uint32_t));
}  // namespace
