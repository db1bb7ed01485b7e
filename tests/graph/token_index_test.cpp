// The tokenizer's two flat hash tables (graph/token_index.h), against std::map on random contents that
// make them grow from empty, with many repeated keys.
#include "graph/token_index.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace tilefire {
namespace {

TEST(TokenIndex, FindsEveryTokenItHoldsAndNothingElseAsItGrows) {
  std::mt19937_64 rng(7);
  std::vector<std::string> texts;  // by id; some ids are left without a token, as in real vocabularies
  TokenIndex index;
  std::map<std::string, int32_t> expected;
  for (int32_t id = 0; id < 20000; ++id) {
    std::string text;
    for (uint64_t length = 1 + rng() % 6; length > 0; --length) text += char('a' + rng() % 5);
    texts.push_back(text);
    if (id % 7 == 3) continue;
    const bool added = index.insert(id, texts);
    EXPECT_EQ(added, expected.emplace(text, id).second) << text;  // a text given twice keeps its first id
  }
  for (const auto& [text, id] : expected) EXPECT_EQ(index.find(text, texts), id) << text;
  for (const std::string absent : {"", "f", "abcdefg", "aaaaaaa", "z"}) EXPECT_EQ(index.find(absent, texts), -1) << absent;
  EXPECT_EQ(TokenIndex().find("a", texts), -1);
}

TEST(MergeTable, KeepsTheLastMergeOfEachPairAsItGrows) {
  std::mt19937_64 rng(11);
  MergeTable table;
  std::map<uint64_t, std::pair<uint32_t, int32_t>> expected;
  for (uint32_t rank = 0; rank < 30000; ++rank) {
    const uint64_t key = MergeTable::pair(int32_t(rng() % 300), int32_t(rng() % 300));  // many pairs come back
    const int32_t merged = int32_t(rng() % (1 << 22));
    table.insert_or_assign(key, {rank, merged});
    expected[key] = {rank, merged};
  }
  for (const auto& [key, merge] : expected) {
    const MergeTable::Merge* found = table.find(key);
    ASSERT_NE(found, nullptr) << key;
    EXPECT_EQ(found->rank, merge.first);
    EXPECT_EQ(found->merged, merge.second);
  }
  EXPECT_EQ(table.find(MergeTable::pair(300, 0)), nullptr);
  EXPECT_EQ(table.find(MergeTable::pair(0, 1 << 21)), nullptr);
  EXPECT_EQ(MergeTable().find(MergeTable::pair(1, 2)), nullptr);
}

}  // namespace
}  // namespace tilefire
