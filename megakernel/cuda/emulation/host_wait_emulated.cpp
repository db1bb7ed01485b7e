// The record of kernels the host gave up on (megakernel/cuda/host_wait.cu), compiled by the host compiler
// against the emulated runtime, as cuda_executor_emulated.cpp is.
#include "megakernel/cuda/host_wait.cu"
