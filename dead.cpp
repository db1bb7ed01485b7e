#include <iostream>
#include "tilefire/errors.h"
#include "tilefire/reply_grammar.h"
using namespace tilefire;
int main() {
  std::string g = "root ::= ", tail;
  for (int i = 0; i < 300; ++i) { g += "(\"a\" "; tail += " \"z\")"; }
  g += "\"a\"" + tail;
  auto grammar = ReplyGrammar::compile(g);
  GrammarParseTable table(grammar);
  auto s = table.start();
  int n = 0;
  while (s.feed('a')) ++n;
  int any = 0; for (int b = 0; b < 256; ++b) { auto t = s; any += t.feed(uint8_t(b)); }
  std::cout << "nested 300: took " << n << " a's; complete=" << s.complete() << "; bytes that may follow: " << any << "\n";
  g = "root ::= ";
  for (int i = 0; i < 300; ++i) g += "(";
  g += "\"a\"";
  for (int i = 0; i < 300; ++i) g += " \"z\")";
  auto g2 = ReplyGrammar::compile(g);
  GrammarParseTable t2(g2);
  auto s2 = t2.start();
  any = 0; for (int b = 0; b < 256; ++b) { auto t = s2; any += t.feed(uint8_t(b)); }
  std::cout << "groups 300: compiled; bytes allowed at start: " << any << " complete=" << s2.complete() << "\n";
}
