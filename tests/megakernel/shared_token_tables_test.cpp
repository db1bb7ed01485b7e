// What constrained replies share (megakernel/shared_token_tables.h): a compiled schema's or pattern's tables
// of the tokens from each pattern state, made the second time any reply is in a state and read by every
// later one, on any thread (a grammar's lists of the tokens from each set of parses likewise, from the
// first visit: reply_grammar.cpp); and the last texts compiled, so that requests sending the same schema
// or pattern get one compiled object. Run under ThreadSanitizer too (scripts/test-sanitizers).
#include "megakernel/shared_token_tables.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tilefire/errors.h"
#include "tilefire/json_schema.h"
#include "tilefire/reply_grammar.h"
#include "tilefire/reply_pattern.h"

namespace tilefire {
namespace {

struct CountedTable {
  int key = 0;
  size_t size = 0;
  size_t entries() const { return size; }
};
using Tables = SharedTokenTables<int, CountedTable>;

TEST(SharedTokenTables, MadeTheSecondTimeAStateIsAskedForThenKept) {
  Tables tables;
  int made = 0;
  const auto make = [&] {
    ++made;
    return std::make_shared<const CountedTable>(CountedTable{7, 100});
  };
  EXPECT_EQ(tables.find_or_make(7, make), nullptr);  // seen once: walked
  EXPECT_EQ(made, 0);
  const std::shared_ptr<const CountedTable> second = tables.find_or_make(7, make);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->key, 7);
  EXPECT_EQ(tables.find_or_make(7, make), second);  // kept: not made again
  EXPECT_EQ(made, 1);
  EXPECT_EQ(tables.find_or_make(8, make), nullptr);  // another state is its own
}

TEST(SharedTokenTables, TheLeastRecentlyUsedGoWhenTheEntriesPassTheBound) {
  Tables tables;
  const size_t big = Tables::kMostEntries / 2 + 1;  // two of them do not fit together
  const auto make_of = [&](int key) { return [=] { return std::make_shared<const CountedTable>(CountedTable{key, big}); }; };
  for (int key : {1, 2}) tables.find_or_make(key, make_of(key));  // seen
  const std::shared_ptr<const CountedTable> first = tables.find_or_make(1, make_of(1));
  const std::shared_ptr<const CountedTable> second = tables.find_or_make(2, make_of(2));  // drops table 1
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(first->key, 1);  // a table handed out stays valid while its holder keeps it
  EXPECT_EQ(tables.find_or_make(2, make_of(2)), second);
  const std::shared_ptr<const CountedTable> again = tables.find_or_make(1, make_of(1));  // made anew, drops 2
  EXPECT_NE(again, first);
  EXPECT_EQ(again->key, 1);
}

// Threads asking for the same few states at once: every table handed out is its key's, and once one is
// kept every later ask gets that one.
TEST(SharedTokenTables, ThreadsAskingAtOnceGetTheirKeysTables) {
  Tables tables;
  std::atomic<int> made{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng{uint32_t(t)};
      for (int i = 0; i < 2000; ++i) {
        const int key = std::uniform_int_distribution<int>(0, 15)(rng);
        const auto table = tables.find_or_make(key, [&] {
          ++made;
          return std::make_shared<const CountedTable>(CountedTable{key, 10});
        });
        if (table && table->key != key) ++wrong;
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(made.load(), 16);
  for (int key = 0; key < 16; ++key) {
    const auto kept = tables.find_or_make(key, [] { return std::shared_ptr<const CountedTable>(); });
    ASSERT_NE(kept, nullptr) << key;
    EXPECT_EQ(tables.find_or_make(key, [] { return std::shared_ptr<const CountedTable>(); }), kept);
  }
}

TEST(RecentlyCompiled, TheSameTextGetsTheSameObjectAmongTheLastFew) {
  RecentlyCompiled<std::string> recent;
  int compiled = 0;
  const auto compile = [&](std::string_view text) {
    ++compiled;
    if (text == "bad") throw InputError("bad text");
    return std::make_shared<const std::string>(text);
  };
  const auto first = recent.get("a", compile);
  EXPECT_EQ(recent.get("a", compile), first);
  EXPECT_EQ(compiled, 1);
  EXPECT_THROW(recent.get("bad", compile), InputError);
  EXPECT_THROW(recent.get("bad", compile), InputError);  // not kept: compiled (and refused) again
  EXPECT_EQ(compiled, 3);
  for (size_t i = 0; i < RecentlyCompiled<std::string>::kKept; ++i) recent.get("text " + std::to_string(i), compile);
  const auto later = recent.get("a", compile);  // the oldest went
  EXPECT_NE(later, first);
  EXPECT_EQ(*later, "a");
}

TEST(RecentlyCompiled, SchemasAndPatternsCompiledCachedAreShared) {
  const std::string schema = R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"}}})";
  EXPECT_EQ(JsonSchema::compile_cached(schema), JsonSchema::compile_cached(schema));
  EXPECT_NE(JsonSchema::compile_cached(schema), JsonSchema::compile(schema));  // compile is always fresh
  EXPECT_NE(JsonSchema::compile_cached(schema), JsonSchema::compile_cached(R"({"type": "string"})"));
  EXPECT_THROW(JsonSchema::compile_cached(R"({"type": "strin"})"), InputError);
  EXPECT_EQ(ReplyPattern::compile_cached("[a-z]{1,40}"), ReplyPattern::compile_cached("[a-z]{1,40}"));
  EXPECT_THROW(ReplyPattern::compile_cached("(a"), InputError);
}

// A vocabulary of pieces that a pattern string takes and refuses, closing quotes and escapes among them.
std::vector<std::string> pattern_vocabulary() {
  std::vector<std::string> vocabulary;
  for (int byte = 0; byte < 256; ++byte) vocabulary.push_back(std::string(1, char(byte)));
  const std::vector<std::string> pieces = {"A", "B", "Z", "AB", "-", "12", "0", "9", "\"", "\",", "\"}", "\\", "\\u0041", "é", "x"};
  std::mt19937 rng(5);
  for (int i = 0; i < 800; ++i) {
    std::string token;
    for (int n = std::uniform_int_distribution<int>(1, 3)(rng); n > 0; --n)
      token += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    vocabulary.push_back(token);
  }
  for (const char* piece : {"AB", "12"}) vocabulary.push_back(piece);  // the reply below writes them
  return vocabulary;
}

// Four threads at once, each running `reply` through six constraints make() gives in turn: the masks before
// its tokens that are not `expected`'s.
template <class MakeConstraint>
int masks_differing_on_threads(const MakeConstraint& make, const std::vector<int32_t>& reply, const std::vector<std::vector<uint8_t>>& expected) {
  std::atomic<int> differing{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 6; ++round) {
        auto constraint = make();
        std::vector<int32_t> generated;
        for (size_t i = 0; i < reply.size(); ++i) {
          std::vector<uint8_t> allowed(expected[i].size(), 0);
          constraint.allowed(generated, allowed);
          if (allowed != expected[i]) ++differing;
          generated.push_back(reply[i]);
        }
      }
    });
  for (std::thread& thread : threads) thread.join();
  return differing.load();
}

// Replies to one schema on threads at once, each from its string's first token reading tables the others
// made: every mask is the automaton's own verdict on each token (worked out beforehand, on this thread,
// from a schema compiled apart).
TEST(SharedTokenTables, RepliesToOneSchemaOnThreadsAtOnceGetTheAutomatonsMasks) {
  const std::string text = R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2,3}(?:-\\d{1,4})?$"}},
                             "required": ["code"], "additionalProperties": false})";
  const std::vector<std::string> vocabulary = pattern_vocabulary();
  const auto trie = std::make_shared<const TokenTrie>(vocabulary);
  const auto id_of = [&](const std::string& piece) {
    return int32_t(std::find(vocabulary.begin(), vocabulary.end(), piece) - vocabulary.begin());
  };
  // {"code": "AB-12"} a byte or piece at a time: the tokens of one reply.
  std::vector<int32_t> reply;
  for (const std::string piece : {"{", "\"", "c", "o", "d", "e", "\"", ":", "\"", "AB", "-", "12", "9", "\"", "}"}) reply.push_back(id_of(piece));
  // The expected mask before each token, from a separate schema's automaton fed token by token.
  std::vector<std::vector<uint8_t>> expected;
  {
    JsonSchemaMatcher matcher(JsonSchema::compile(text));
    JsonSchemaBytes state = matcher.start();
    for (int32_t token : reply) {
      std::vector<uint8_t> mask(vocabulary.size(), 0);
      for (size_t t = 0; t < vocabulary.size(); ++t) {
        JsonSchemaBytes next = state;
        mask[t] = !vocabulary[t].empty() && next.feed(std::string_view(vocabulary[t]));
      }
      expected.push_back(mask);
      ASSERT_TRUE(state.feed(std::string_view(vocabulary[size_t(token)])));
    }
  }
  const auto schema = JsonSchema::compile(text);
  EXPECT_EQ(masks_differing_on_threads([&] { return JsonSchemaReplyConstraint(trie, schema); }, reply, expected), 0);
  // A reply after them reads the table of its string's start at its first visit there (the first reply walked).
  JsonSchemaMatcher later(schema);
  JsonSchemaBytes in_code = later.start();
  ASSERT_TRUE(in_code.feed(std::string_view("{\"code\": \"")));
  std::vector<uint8_t> from_table(vocabulary.size(), 0);
  EXPECT_TRUE(in_code.allow_tokens_itself(*trie, from_table));
  JsonSchemaMatcher apart(JsonSchema::compile(text));
  JsonSchemaBytes fresh = apart.start();
  ASSERT_TRUE(fresh.feed(std::string_view("{\"code\": \"")));
  std::vector<uint8_t> walked(vocabulary.size(), 0);
  EXPECT_FALSE(fresh.allow_tokens_itself(*trie, walked));  // its schema's first reply there: no table yet
  trie->allow_tokens(fresh, walked);
  EXPECT_EQ(from_table, walked);
}

// Replies to one grammar on threads at once, each reading the lists of tokens the others made from each set
// of parses: every mask is the trie's walk from the same tokens in a table of the thread's own (worked out
// beforehand, on this thread, from a grammar compiled apart).
TEST(SharedTokenTables, RepliesToOneGrammarOnThreadsAtOnceGetTheWalksMasks) {
  const std::string gbnf = "root ::= \"{\" pair (\",\" pair)* \"}\"\npair ::= [A-Z]+ \":\" ([0-9]+ | \"\\\"\" [A-Z-]* \"\\\"\")";
  const std::vector<std::string> vocabulary = pattern_vocabulary();
  const auto trie = std::make_shared<const TokenTrie>(vocabulary);
  const auto id_of = [&](const std::string& piece) {
    return int32_t(std::find(vocabulary.begin(), vocabulary.end(), piece) - vocabulary.begin());
  };
  // {AB:12,Z:"AB-"} a byte or piece at a time.
  std::vector<int32_t> reply;
  for (const std::string piece : {"{", "AB", ":", "12", "9", ",", "Z", ":", "\"", "AB", "-", "\"", "}"}) reply.push_back(id_of(piece));
  std::vector<std::vector<uint8_t>> expected;
  {
    GrammarParseTable table(ReplyGrammar::compile(gbnf));
    GrammarReplyBytes state = table.start();
    for (int32_t token : reply) {
      std::vector<uint8_t> mask(vocabulary.size(), 0);
      trie->walk(state, [&](int32_t allowed, const GrammarReplyBytes&) { mask[size_t(allowed)] = 1; });
      expected.push_back(mask);
      ASSERT_TRUE(state.feed(std::string_view(vocabulary[size_t(token)])));
    }
  }
  const auto grammar = ReplyGrammar::compile(gbnf);
  EXPECT_EQ(masks_differing_on_threads([&] { return GrammarReplyConstraint(trie, grammar, {}); }, reply, expected), 0);
  EXPECT_GE(grammar->token_tables(), 8u);  // the reply's sets of parses, each listed once for all threads
}

}  // namespace
}  // namespace tilefire
