#pragma once
// Mutations of a valid input file for fuzz tests (tests/e2e/input_fuzz_test.cpp): byte-level edits of
// its text (bit flips, JSON punctuation and extreme numbers dropped in, ranges cut, repeated or the end
// truncated) and edits of its JSON structure (a value swapped for an extreme or mistyped one, a key
// removed or added, an array grown or shrunk). A mutation is a function of the seed alone, so a failing
// case reruns alone; describe() says what was done, for the failure message.
#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace tilefire::testing {

// How many cases a fuzz test runs: `default_count`, times K when TILEFIRE_FUZZ_SCALE=K is set (a sweep).
uint64_t fuzz_case_count(uint64_t default_count);

class InputMutator {
 public:
  explicit InputMutator(uint64_t seed) : rng_(seed) {}

  // One to three byte-level edits of `text`.
  std::string mutate_bytes(std::string text);
  // One to three structural edits of `document`.
  nlohmann::json mutate_json(nlohmann::json document);
  // Structural edits, then (one time in four) byte-level ones of the dumped text.
  std::string mutate_json_text(const nlohmann::json& document);

  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }  // uniform in [0, n)
  bool one_in(uint64_t n) { return below(n) == 0; }
  // A value a parser may not expect: 0, -1, 2^31 and 2^32 and one less, 2^53, 2^63, 2^64 - 1, -2^63, 1e308, 1e-308,
  // 0.5, -0.0, an empty or long string, null, a bool, an empty array or object.
  nlohmann::json extreme_value();

  const std::string& describe() const { return log_; }  // the edits made so far

 private:
  void note(const std::string& edit);
  std::mt19937_64 rng_;
  std::string log_;
};

}  // namespace tilefire::testing
