#pragma once
// The check the pattern and grammar constraints share: along one random reply (each token drawn among
// those the walk allows), the constraint's mask at every step equals the trie's walk from the same bytes
// in a state of the test's own (no tables, no lists), plus the ending token where the text is whole; the
// reply ends at that token, where the constraint says it ended (and the state agrees), or at most_tokens.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace tilefire::testing {

// `walk_mask(state, mask)` sets the walk's allowed tokens in `mask`; `after_token(state, generated)` runs
// after each token is fed. Returns the masks compared (a failure is reported and ends the reply).
template <class Constraint, class State, class WalkMask>
size_t compare_masks_along_a_random_reply(Constraint& constraint, State walked, const WalkMask& walk_mask,
                                          const std::vector<std::string>& vocabulary, int32_t eos, size_t most_tokens,
                                          std::mt19937& random,
                                          const std::function<void(const State&, const std::vector<int32_t>&)>& after_token = {}) {
  std::vector<int32_t> generated;
  size_t compared = 0;
  while (generated.size() < most_tokens) {
    std::vector<uint8_t> through(vocabulary.size(), 0), walk(vocabulary.size(), 0);
    constraint.allowed(generated, through);
    walk_mask(walked, walk);
    if (walked.complete()) walk[size_t(eos)] = 1;
    if (through != walk) {
      ADD_FAILURE() << "the masks differ after " << generated.size() << " tokens";
      return compared;
    }
    ++compared;
    std::vector<int32_t> choices;
    for (size_t t = 0; t < walk.size(); ++t)
      if (walk[t]) choices.push_back(int32_t(t));
    if (choices.empty()) {
      ADD_FAILURE() << "a dead end after " << generated.size() << " tokens";
      return compared;
    }
    const int32_t token = choices[random() % choices.size()];
    if (token == eos) break;
    generated.push_back(token);
    if (!walked.feed(vocabulary[size_t(token)])) {
      ADD_FAILURE() << "the walk's own state refused the token it allowed";
      return compared;
    }
    if (after_token) after_token(walked, generated);
    if (constraint.ended(generated)) {
      EXPECT_TRUE(walked.ended());
      break;
    }
  }
  return compared;
}

}  // namespace tilefire::testing
