#pragma once
// GPU tests skip, saying why, where no CUDA device can run the megakernel (every CI machine).
#include <gtest/gtest.h>

#include "megakernel/cuda/cuda_executor.h"

#define TILEFIRE_REQUIRE_CUDA_DEVICE()                                                              \
  if (const std::string cuda_reason = ::tilefire::CudaExecutor::unavailable_reason(); !cuda_reason.empty()) { \
    GTEST_SKIP() << "no CUDA device: " << cuda_reason;                                               \
  }
