#pragma once
// Functions shared by host and device code (index math, the Program's device view) are marked
// TILEFIRE_HD; in a host-only translation unit the mark is empty.
#if defined(__CUDACC__)
#define TILEFIRE_HD __host__ __device__
#else
#define TILEFIRE_HD
#endif
