#pragma once
// What constrained replies work out once and share, on any thread:
// - SharedTokenTables: the tables of the tokens from each pattern state (a schema's pattern strings,
//   json_schema_pattern_tokens.cpp; a reply's counted pattern, reply_pattern.cpp), kept by the compiled
//   schema or pattern, so that every reply to it reads them. The second time any reply is in a state its
//   table is made; every later visit, by any reply, reads it.
// - RecentlyCompiled: the last few texts compiled (JsonSchema::compile_cached, ReplyPattern::compile_cached),
//   so that requests sending the same schema or pattern (a server's usual traffic) get the same compiled
//   object, and with it the tables earlier replies made.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilefire {

// A pattern state's table (a schema's pattern string or a reply's pattern): the tokens that end on a whole
// character, with the state they leave the pattern in and the characters they add, sorted by both
// (pattern_token_sort.h); and those that end inside a character or an escape, or reach a string's closing
// quote, whose verdict the reply's state gives (a few hundred in a vocabulary).
struct PatternStateTable {
  struct Whole {
    int32_t token;
    uint16_t target;  // fewer than kMostPatternStates
    uint16_t characters;
  };
  std::vector<Whole> whole;
  std::vector<int32_t> asked;
  size_t entries() const { return whole.size() + asked.size(); }
};

// The value of the first (key, value) pair of `recent` (the most recently used last) whose key is `key`,
// moved to the back; null when none is.
template <class Pairs, class Key>
auto find_recent(Pairs& recent, const Key& key) -> decltype(recent.back().second) {
  for (size_t i = 0; i < recent.size(); ++i)
    if (recent[i].first == key) {
      std::rotate(recent.begin() + ptrdiff_t(i), recent.begin() + ptrdiff_t(i) + 1, recent.end());
      return recent.back().second;
    }
  return nullptr;
}

// Tables by Key (with ==); Table has entries(), the tokens it lists. At most kMostEntries tokens in all
// (8 bytes each: 8 MiB; a Llama 3 table of a line of any characters has 123,000), the least recently
// used dropped first; a table handed out stays valid while its holder keeps it.
template <class Key, class Table>
class SharedTokenTables {
 public:
  static constexpr size_t kMostEntries = size_t(1) << 20, kMostSeen = 64;

  // The table for `key`, or null the first time it is asked for (a state seen once, as a counting
  // pattern's are, is walked: as cheap as making its table). The second time, make() builds it, outside
  // the lock: replies on other threads read the other tables meanwhile.
  template <class Make>
  std::shared_ptr<const Table> find_or_make(const Key& key, const Make& make) {
    {
      std::lock_guard lock(mutex_);
      if (std::shared_ptr<const Table> kept = find_recent(tables_, key)) return kept;
      if (std::find(seen_.begin(), seen_.end(), key) == seen_.end()) {
        if (seen_.size() < kMostSeen) {
          seen_.push_back(key);
        } else {
          seen_[next_seen_replaced_] = key;
          next_seen_replaced_ = (next_seen_replaced_ + 1) % kMostSeen;
        }
        return nullptr;
      }
    }
    std::shared_ptr<const Table> made = make();
    std::lock_guard lock(mutex_);
    if (std::shared_ptr<const Table> kept = find_recent(tables_, key)) return kept;  // made meanwhile by another reply
    size_t entries = made->entries();
    for (const auto& [kept_key, kept] : tables_) entries += kept->entries();
    size_t dropped = 0;  // the least recently used, while the new one does not fit beside them
    while (dropped < tables_.size() && entries > kMostEntries) entries -= tables_[dropped++].second->entries();
    tables_.erase(tables_.begin(), tables_.begin() + ptrdiff_t(dropped));
    tables_.emplace_back(key, made);
    return made;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<Key, std::shared_ptr<const Table>>> tables_;  // the most recently used last
  std::vector<Key> seen_;  // a ring, the oldest replaced first
  size_t next_seen_replaced_ = 0;
};

// The last kKept texts compiled to a T, most recently used last. Compiling is not under the lock (another
// text's lookup does not wait for it); a text that does not compile throws and is not kept.
template <class T>
class RecentlyCompiled {
 public:
  static constexpr size_t kKept = 8;

  template <class Compile>
  std::shared_ptr<const T> get(std::string_view text, const Compile& compile) {
    {
      std::lock_guard lock(mutex_);
      if (std::shared_ptr<const T> kept = find_recent(recent_, text)) return kept;
    }
    std::shared_ptr<const T> compiled = compile(text);
    std::lock_guard lock(mutex_);
    if (std::shared_ptr<const T> kept = find_recent(recent_, text)) return kept;  // compiled meanwhile on another thread
    if (recent_.size() == kKept) recent_.erase(recent_.begin());
    recent_.emplace_back(std::string(text), compiled);
    return compiled;
  }

 private:
  std::mutex mutex_;
  std::vector<std::pair<std::string, std::shared_ptr<const T>>> recent_;
};

}  // namespace tilefire
