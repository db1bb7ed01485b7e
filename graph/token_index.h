#pragma once
// Two flat hash tables for a BPE tokenizer (graph/tokenizer.h).
//
// TokenIndex: token text to id for a BPE vocabulary. Loading looks it up three times per merge (Llama 3:
// 280k merges) and encoding once per character and word, so it is one flat array probed linearly, each
// slot a word holding the high half of the text's hash and the id: a lookup reads one slot and, when the
// hash halves agree, the one text. The texts stay in the tokenizer's id-indexed list, passed to each call (an index
// keeps no pointer into it, so the tokenizer moves freely).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tilefire {

class TokenIndex {
 public:
  // Room for `count` tokens without growing.
  void reserve(size_t count, const std::vector<std::string>& texts) {
    if (count * 2 > slots_.size()) rehash(count * 2, texts);
  }

  // Adds `id`, whose text is texts[id]. False, adding nothing, when a token of that text is there.
  bool insert(int32_t id, const std::vector<std::string>& texts) {
    if ((count_ + 1) * 2 > slots_.size()) rehash((count_ + 1) * 4, texts);
    const uint64_t hash = hash_of(texts[size_t(id)]);
    for (size_t slot = hash & mask();; slot = (slot + 1) & mask()) {
      if (slots_[slot] == 0) {
        slots_[slot] = (hash & kHashBits) | (uint64_t(id) + 1);
        ++count_;
        return true;
      }
      if (same(slots_[slot], hash, texts[size_t(id)], texts)) return false;
    }
  }

  // The id of the token `text`, or -1.
  int32_t find(std::string_view text, const std::vector<std::string>& texts) const {
    if (slots_.empty()) return -1;
    const uint64_t hash = hash_of(text);
    for (size_t slot = hash & mask(); slots_[slot] != 0; slot = (slot + 1) & mask())
      if (same(slots_[slot], hash, text, texts)) return id_of(slots_[slot]);
    return -1;
  }

 private:
  static constexpr uint64_t kHashBits = ~uint64_t(0) << 32;  // the slot's high half; the low half is id + 1

  static uint64_t hash_of(std::string_view text) { return std::hash<std::string_view>{}(text); }
  static int32_t id_of(uint64_t slot) { return int32_t(uint32_t(slot) - 1); }
  static bool same(uint64_t slot, uint64_t hash, std::string_view text, const std::vector<std::string>& texts) {
    return (slot & kHashBits) == (hash & kHashBits) && texts[size_t(id_of(slot))] == text;
  }
  size_t mask() const { return slots_.size() - 1; }

  // To a power of two of at least `wanted` slots, the tokens there now placed again (their texts needed).
  void rehash(size_t wanted, const std::vector<std::string>& texts) {
    size_t size = 16;
    while (size < wanted) size *= 2;
    std::vector<uint64_t> old(size, 0);
    old.swap(slots_);
    for (uint64_t entry : old) {
      if (entry == 0) continue;
      const uint64_t hash = hash_of(texts[size_t(id_of(entry))]);
      size_t slot = hash & mask();
      while (slots_[slot] != 0) slot = (slot + 1) & mask();
      slots_[slot] = entry;
    }
  }

  std::vector<uint64_t> slots_;
  size_t count_ = 0;
};

// MergeTable: a pair of token ids to its merge, looked up for every adjacent pair of symbols as a word is
// encoded. Open addressing, linear probing, 16-byte slots.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;   // lower merges first
    int32_t merged;  // the id of the merged token
  };

  // (left << 32) | right, ids as unsigned.
  static uint64_t pair(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

  void reserve(size_t count) {
    if (count * 2 > slots_.size()) rehash(count * 2);
  }

  // Sets the merge of `key`, replacing one it had.
  void insert_or_assign(uint64_t key, Merge merge) {
    if ((count_ + 1) * 2 > slots_.size()) rehash((count_ + 1) * 4);
    for (size_t slot = start(key);; slot = (slot + 1) & mask()) {
      if (slots_[slot].key == kEmpty) {
        slots_[slot] = {key, merge};
        ++count_;
        return;
      }
      if (slots_[slot].key == key) {
        slots_[slot].merge = merge;
        return;
      }
    }
  }

  // The merge of `key`, or null.
  const Merge* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t slot = start(key); slots_[slot].key != kEmpty; slot = (slot + 1) & mask())
      if (slots_[slot].key == key) return &slots_[slot].merge;
    return nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // no pair: ids are below 2^31
  struct Slot {
    uint64_t key;
    Merge merge;
  };

  size_t mask() const { return slots_.size() - 1; }
  // Fibonacci hashing: the product's high bits, which every bit of the key moves.
  size_t start(uint64_t key) const { return size_t((key * 0x9e3779b97f4a7c15ull) >> shift_); }

  void rehash(size_t wanted) {
    size_t size = 16;
    int bits = 4;
    while (size < wanted) {
      size *= 2;
      ++bits;
    }
    std::vector<Slot> old(size, Slot{kEmpty, {0, 0}});
    old.swap(slots_);
    shift_ = 64 - bits;
    for (const Slot& entry : old) {
      if (entry.key == kEmpty) continue;
      size_t slot = start(entry.key);
      while (slots_[slot].key != kEmpty) slot = (slot + 1) & mask();
      slots_[slot] = entry;
    }
  }

  std::vector<Slot> slots_;
  size_t count_ = 0;
  int shift_ = 60;
};

}  // namespace tilefire
