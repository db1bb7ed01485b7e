// The megakernel's host side (megakernel/cuda/cuda_executor.cu), compiled by the host compiler against
// the emulated runtime (cuda_runtime_emulated.cpp). It is plain host code: nothing in it changes.
#include "megakernel/cuda/cuda_executor.cu"
