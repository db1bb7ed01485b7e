#pragma once
// The persistent kernel's entry point, for the host code that launches it (cuda_executor.cu).
namespace tilefire {

// The address of the megakernel (a __global__ taking one KernelConfig), for cudaLaunchCooperativeKernel
// and the occupancy queries.
const void* megakernel_entry();

}  // namespace tilefire
