#pragma once
// splitmix64: the project's one small deterministic generator (random weights, sampling draws, stress
// delays). The same seed gives the same sequence on every platform, unlike <random>'s distributions.
#include <cstdint>

namespace tilefire {

constexpr uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace tilefire
