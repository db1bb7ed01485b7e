#pragma once
// The order of a pattern state's table of tokens (json_schema_pattern_tokens.cpp for a schema's pattern
// strings, reply_pattern_tokens.cpp for replies held to a regex): by the state a token ends in, then the
// characters it adds, then its id, so that tokens alike in both get one verdict from the lengths left and
// a group's mask writes go in order.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace tilefire {

// Sorts a table's tokens by state, then characters, then id, in counting passes (linear: a sort by
// comparison took twice as long as the walk that made the table).
template <class Entries>
inline void sort_by_state_and_characters(Entries& whole) {
  Entries sorted(whole.size());
  const auto counting_pass = [&](auto key_of) {
    size_t keys = 0;
    for (const auto& entry : whole) keys = std::max<size_t>(keys, key_of(entry) + 1u);
    std::vector<size_t> begin(keys + 1, 0);
    for (const auto& entry : whole) ++begin[key_of(entry) + 1u];
    for (size_t k = 0; k < keys; ++k) begin[k + 1] += begin[k];
    for (const auto& entry : whole) sorted[begin[key_of(entry)]++] = entry;  // stable
    whole.swap(sorted);
  };
  counting_pass([](const auto& entry) { return size_t(entry.token); });  // so a group's mask writes go in order
  counting_pass([](const auto& entry) { return size_t(entry.characters); });
  counting_pass([](const auto& entry) { return size_t(entry.target); });
}

}  // namespace tilefire
