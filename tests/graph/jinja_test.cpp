// Chat templates (graph/jinja.h) against Jinja2 as Hugging Face transformers sets it up.
//
// Three kinds of check:
// - the feature cases of tests/graph/jinja_cases.inc (whitespace control, statements, expressions,
//   filters, tests, methods, whole templates of the kinds models ship) rendered by Tilefire and by
//   tests/graph/chat_template_oracle.py, one python3 process for all of them: the outputs must be equal,
//   and the templates Jinja2 refuses must be refused with an InputError. Without python3 and jinja2 this
//   skips, or fails when TILEFIRE_REQUIRE_TOKENIZER_FILES=1 says the tokenizer tests must all run;
// - the constructs Tilefire does not run, refused by name when the template is parsed;
// - random templates assembled from pieces of the cases: rendered, or refused with an InputError.
#include "graph/jinja.h"
#include "graph/jinja_value.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/input_mutator.h"
#include "tests/common/jinja_oracle.h"
#include "tests/common/test_models.h"
#include "tilefire/errors.h"

namespace tilefire {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

struct FeatureCase {
  const char* source;
  const char* context = nullptr;  // JSON text; nullptr: kDefaultContext
};

struct ErrorCase {
  const char* source;
  const char* message;  // what Tilefire's InputError must say ("" when anything will do)
};

#include "tests/graph/jinja_cases.inc"

using testing::oracle_now;
using testing::OracleCase;

ordered_json case_context(const char* context) { return ordered_json::parse(context ? context : kDefaultContext); }

std::string escaped(const std::string& text) { return ordered_json(text).dump(-1, ' ', false, ordered_json::error_handler_t::replace); }

// What Tilefire made of a template: its output, or the message of what it threw.
struct Outcome {
  enum Kind { rendered, input_error, other_error } kind;
  std::string text;
};

Outcome render_with_tilefire(const std::string& source, const ordered_json& context) {
  try {
    const jinja::Template compiled(source, "case");
    return {Outcome::rendered, compiled.render(context, oracle_now())};
  } catch (const InputError& error) {
    return {Outcome::input_error, error.what()};
  } catch (const std::exception& error) {
    return {Outcome::other_error, error.what()};
  }
}

ordered_json run_oracle(const std::vector<OracleCase>& cases) { return testing::run_jinja_oracle(cases); }

TEST(JinjaTemplate, RendersAsJinja2DoesForTransformers) {
  REQUIRE_JINJA_ORACLE();
  std::vector<OracleCase> cases;
  for (const FeatureCase& c : kFeatureCases) cases.push_back({c.source, case_context(c.context)});
  for (const ErrorCase& c : kErrorCases) cases.push_back({c.source, case_context(nullptr)});
  const ordered_json oracle = run_oracle(cases);

  size_t mismatches = 0;
  const auto report = [&](size_t i, const std::string& what) {
    ++mismatches;
    ADD_FAILURE() << "case " << i << ": " << escaped(cases[i].source) << "\n" << what;
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool meant_to_fail = i >= std::size(kFeatureCases);
    const ordered_json& expected = oracle[i];
    if (expected.contains("error") != meant_to_fail) {  // the case itself is wrong (or Jinja2 changed)
      report(i, meant_to_fail ? "Jinja2 renders this error case: " + escaped(expected.value("output", ""))
                              : "Jinja2 refuses this feature case: " + expected.value("error", ""));
      continue;
    }
    const Outcome got = render_with_tilefire(cases[i].source, cases[i].context);
    if (got.kind == Outcome::other_error) {
      report(i, "Tilefire threw an exception other than InputError: " + got.text);
    } else if (!meant_to_fail) {
      const std::string want = expected.at("output").get<std::string>();
      if (got.kind != Outcome::rendered || got.text != want)
        report(i, std::string(got.kind == Outcome::rendered ? "  Tilefire: " : "  Tilefire refused it: ") + escaped(got.text) +
                      "\n  Jinja2:   " + escaped(want));
    } else {
      const std::string message = kErrorCases[i - std::size(kFeatureCases)].message;
      if (got.kind == Outcome::rendered)
        report(i, "  Tilefire rendered it: " + escaped(got.text) + "\n  Jinja2 failed: " + expected.at("error").get<std::string>());
      else if (got.text.find(message) == std::string::npos)
        report(i, "  Tilefire's message: " + got.text + "\n  does not contain: " + message);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << cases.size() << " cases (" << std::size(kFeatureCases) << " to render, " << std::size(kErrorCases)
                            << " to refuse)";
}

TEST(JinjaTemplate, CaseContextsAreJsonObjects) {
  for (const FeatureCase& c : kFeatureCases) {
    ordered_json context;
    ASSERT_NO_THROW(context = case_context(c.context)) << c.source;
    EXPECT_TRUE(context.is_object()) << c.source;
  }
}

// Without the oracle: raise_exception's message, and the template's origin, reach the InputError.
TEST(JinjaTemplate, RaiseExceptionCarriesItsMessage) {
  try {
    jinja::Template("a\n{{ raise_exception('No system message, ' ~ n) }}", "tokenizer_config.json chat_template").render(case_context(nullptr), oracle_now());
    ADD_FAILURE() << "raise_exception did not throw";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("No system message, 7"), std::string::npos) << message;
    EXPECT_NE(message.find("tokenizer_config.json chat_template"), std::string::npos) << message;
  }
}

// What Tilefire does not run is refused when the template is parsed, not when (or if) it is reached, by
// the construct's name, at its line.
TEST(JinjaTemplate, RefusesWhatItDoesNotRunWhenParsing) {
  const std::pair<const char*, const char*> refused[] = {
      {"{% include 'x' %}", "include"},
      {"{% extends 'x' %}", "extends"},
      {"{% block b %}{% endblock %}", "block"},
      {"{% import 'x' as y %}", "import"},
      {"{% from 'x' import y %}", "from"},
      {"{% filter upper %}x{% endfilter %}", "filter"},
      {"{% if false %}{{ x | nosuchfilter }}{% endif %}", "nosuchfilter"},  // unknown even where never reached
      {"{% if t %}x", "if"},
      {"{% for x in l %}x", "for"},
      {"{{ x", ""},
      {"{% macro m() %}x", "macro"},
  };
  const std::string origin = "tokenizer_config.json chat_template";
  for (const auto& [source, name] : refused) {
    try {
      const jinja::Template compiled(source, origin);
      ADD_FAILURE() << escaped(source) << " was accepted";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind(origin + ": line ", 0), 0u) << escaped(source) << ": " << message;
      EXPECT_NE(message.find(name), std::string::npos) << escaped(source) << ": " << message << "\n  does not name " << name;
    }
  }
  const std::pair<const char*, const char*> at_line[] = {
      {"{# one #}\n{% if t %}\nx\n{% include 'x' %}{% endif %}", "line 4"},
      {"a\nb\n{{ s | nosuchfilter }}", "line 3"},
      {"{% for m in messages %}\n{{ m.role }}\n{% endfor %}\n\n{% endif %}", "line 5"},
  };
  for (const auto& [source, line] : at_line) {
    try {
      const jinja::Template compiled(source, origin);
      ADD_FAILURE() << escaped(source) << " was accepted";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(line), std::string::npos) << escaped(source) << ": " << error.what();
    }
  }
  // A rendering error names its line too.
  try {
    jinja::Template("x\n\n{{ nope.attr }}", origin).render(case_context(nullptr), oracle_now());
    ADD_FAILURE() << "an undefined value's attribute was rendered";
  } catch (const InputError& error) {
    EXPECT_NE(std::string(error.what()).find("line 3"), std::string::npos) << error.what();
  }
  // A method called with the wrong arguments says how many it takes.
  const std::pair<const char*, const char*> wrong_arguments[] = {
      {"{{ 'a'.strip('x', 'y') }}", "strip() takes at most 1 argument"},
      {"{{ 'a'.zfill() }}", "zfill() takes 1 argument"},
      {"{{ 'a'.center() }}", "center() takes 1 to 2 arguments"},
      {"{{ 'a'.replace('a', 'b', 1, 2) }}", "replace() takes 2 to 3 arguments"},
      {"{{ 'a'.upper(x=1) }}", "upper() takes no keyword arguments"},
      {"{{ ','.join() }}", "join() takes 1 argument"},
      {"{{ 'a'.find() }}", "find() takes 1 to 3 arguments"},
  };
  for (const auto& [source, message] : wrong_arguments) {
    try {
      const std::string rendered = jinja::Template(source, origin).render(case_context(nullptr), oracle_now());
      ADD_FAILURE() << source << " rendered as '" << rendered << "'";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << source << ": " << error.what();
    }
  }
}

// Templates built to break a renderer: chains and nests deeper than it can walk, values that hold
// themselves or nest past what Python can print, numbers past 64 bits, huge counts. Each renders or is
// refused with an InputError that says why, quickly; under ASan, without a leak (a namespace holding
// itself is freed).
TEST(JinjaTemplate, HostileTemplatesAreRefusedOrRenderedNeverCrashed) {
  const auto repeat = [](const std::string& piece, int times) {
    std::string out;
    for (int i = 0; i < times; ++i) out += piece;
    return out;
  };
  std::string nested_call = "f(k - 1)";
  for (int i = 0; i < 60; ++i) nested_call = "('' ~ " + nested_call + ")";
  const std::pair<std::string, const char*> refused[] = {
      {"{{ 1" + repeat(" + 1", 10000) + " }}", "nests more than 256 levels"},
      {"{{ d" + repeat(".a", 10000) + " }}", "nests more than 256 levels"},
      {"{{ s" + repeat(" | trim", 10000) + " }}", "nests more than 256 levels"},
      {"{{ " + repeat("(", 10000) + "1" + repeat(")", 10000) + " }}", "nests more than 256 levels"},
      {"{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", "more than 400 levels"},
      {"{% set ns = namespace(v=none) %}{% for i in range(100000) %}{% set ns.v = namespace(v=ns.v) %}{% endfor %}{{ ns.v }}", "too deep to print"},
      {"{% set ns = namespace(g=[1]) %}{% for i in range(100000) %}{% set ns.g = ns.g | select %}{% endfor %}{{ ns.g | list }}", "more than 400 levels"},
      {"{% macro f(k) %}{% if k > 0 %}{{ " + nested_call + " }}{% endif %}{% endmacro %}{{ f(99) }}", "more than 500 deep"},
      {"{% macro f(k) %}{{ f(k + 1) }}{% endmacro %}{{ f(0) }}", "more than 100 deep"},
      {"{{ 99999999999999999999 }}", "past 64 bits"},
      {"{{ l.99999999999999999999 }}", "past 64 bits"},
      {"{{ 10 ** 20 }}", "overflow"},
      {"{{ [9223372036854775807, 1] | sum }}", "past 64 bits"},
      {"{{ (-9223372036854775807 - 1) | abs }}", "past 64 bits"},
      {"{{ '99999999999999999999' | int }}", "past 64 bits"},
      {"{{ 1e20 | int }}", "past 64 bits"},
      {"{{ l | select }}", "cannot be printed"},
      {"{{ 'x' ~ (l | map('string')) }}", "cannot be printed"},
      {"{{ 'ab' * 100000000 }}", "too long"},
      {"{{ strftime_now('%f') }}", "%f"},
      // Values that grow past what a prompt needs, and a loop that would run for minutes.
      {"{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}", "past 64 MiB"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(24) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}", "past 1048576 items"},
      {"{{ ('x' * 60000000) | list | length }}", "walked one by one"},
      {"{{ 'ab' | indent(9223372036854775807) }}", "past 64 MiB"},
      {"{{ {'a': 1} | tojson(indent=9223372036854775807) }}", "past 64 MiB"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "more than 5,000,000 statements"},
  };
  const ordered_json context = case_context(nullptr);
  for (const auto& [source, message] : refused) {
    try {
      jinja::Template(source, "hostile").render(context, oracle_now());
      ADD_FAILURE() << escaped(source.substr(0, 200)) << " rendered";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << escaped(source.substr(0, 200)) << ": " << error.what();
    }
  }
  // What Jinja2 renders and Tilefire can hold renders (each also against Jinja2 in jinja_cases.inc).
  EXPECT_EQ(jinja::Template("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "t").render(context, oracle_now()),
            "<Namespace {'self': <Namespace {...}>}>");
  EXPECT_EQ(jinja::Template("{{ '' * 1000000000000000000 }}{{ [] * 1000000000000000000 }}{{ l[::-9223372036854775807] }}", "t").render(context, oracle_now()),
            "[][2]");
}

// Integers past 64 bits in a template's variables would be read by the JSON parser as floats, and the
// template would see another value: they are refused, naming where.
TEST(JinjaTemplate, VariablesWithIntegersPast64BitsAreRefused) {
  for (const char* text : {R"({"n": 99999999999999999999})", R"([{"role": "user", "content": "x", "id": -99999999999999999999}])"}) {
    try {
      jinja::parse_variables_json(text, "messages.json");
      ADD_FAILURE() << text << " was accepted";
    } catch (const InputError& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.rfind("messages.json: ", 0), 0u) << message;
      EXPECT_NE(message.find("99999999999999999999"), std::string::npos) << message;
    }
  }
  EXPECT_EQ(jinja::parse_variables_json(R"({"a": 9223372036854775807, "b": -9223372036854775808, "c": 1e300, "d": 1.5})", "v").dump(),
            R"({"a":9223372036854775807,"b":-9223372036854775808,"c":1e+300,"d":1.5})");
  EXPECT_THROW(jinja::parse_variables_json("{", "v"), InputError);
}

// Variables nested past what a template's values hold are refused before they are parsed into a value:
// copying one 100,000 levels deep recursed past the stack (a crash of `tilefire chat --messages`).
TEST(JinjaTemplate, VariablesNestedPastTheValueDepthAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string dicts = [] {
    std::string text;
    for (uint32_t i = 0; i <= jinja::kMaxValueDepth; ++i) text += "{\"a\": ";
    return text + "1" + std::string(jinja::kMaxValueDepth + 1, '}');
  }();
  for (const std::string& text : {deep, dicts}) {
    try {
      jinja::parse_variables_json(text, "messages.json");
      ADD_FAILURE() << text.substr(0, 40) << "... was accepted";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("messages.json: lists and dicts nest more than 400 levels deep"), std::string::npos)
          << error.what();
    }
  }
  const std::string within = std::string(jinja::kMaxValueDepth, '[') + std::string(jinja::kMaxValueDepth, ']');
  EXPECT_EQ(jinja::parse_variables_json(within, "v").dump(), within);
  // Within the depth, a syntax error is still refused as not JSON.
  EXPECT_THROW(jinja::parse_variables_json("[[1,]]", "v"), InputError);
}

// Random templates from pieces of the cases, sometimes with bytes mutated, rendered with the default
// context or a mutated one: each renders or throws InputError (under ASan, without touching bad memory).
TEST(JinjaTemplate, RandomTemplatesRenderOrThrowInputError) {
  std::vector<std::string> sources;
  for (const FeatureCase& c : kFeatureCases) sources.emplace_back(c.source);
  for (const ErrorCase& c : kErrorCases) sources.emplace_back(c.source);
  const ordered_json context = case_context(nullptr);
  const nlohmann::json plain_context = nlohmann::json::parse(kDefaultContext);
  for (uint64_t i = 0; i < testing::fuzz_case_count(200); ++i) {
    testing::InputMutator mutator(4000 + i);
    std::string source;
    const uint64_t pieces = 1 + mutator.below(3);
    for (uint64_t p = 0; p < pieces; ++p) {
      const std::string& from = sources[size_t(mutator.below(sources.size()))];
      if (mutator.one_in(3)) {
        source += from;
      } else {  // any range: tags and strings cut in the middle, UTF-8 too
        const size_t begin = size_t(mutator.below(from.size() + 1));
        source += from.substr(begin, size_t(mutator.below(from.size() - begin + 1)));
      }
    }
    if (mutator.one_in(2)) source = mutator.mutate_bytes(source);
    ordered_json variables = context;
    if (mutator.one_in(4)) {
      const nlohmann::json mutated = mutator.mutate_json(plain_context);
      if (mutated.is_object()) variables = ordered_json::parse(mutated.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    try {
      const jinja::Template compiled(source, "fuzz");
      compiled.render(variables, oracle_now());
    } catch (const InputError&) {
    } catch (const std::exception& error) {
      ADD_FAILURE() << "case " << i << " (" << mutator.describe() << "): " << escaped(source) << " threw " << error.what();
    }
  }
}

}  // namespace
}  // namespace tilefire

namespace tilefire {
namespace {

// Python changes the case of every cased character; Tilefire of ASCII letters only, so the case filters
// and methods refuse other text rather than leave its letters as they were.
TEST(JinjaTemplate, ChangesTheCaseOfAsciiLettersAndRefusesOtherText) {
  const ordered_json context = {{"name", "\u00e9a"}};
  EXPECT_EQ(jinja::Template("{{ 'aB1' | upper }} {{ 'aB1'.lower() }} {{ 'x y' | title }}", "t").render(context, testing::oracle_now()), "AB1 ab1 X Y");
  for (const char* source : {"{{ name | upper }}", "{{ name.lower() }}", "{{ name | title }}", "{{ name | capitalize }}", "{{ name is lower }}",
                             "{{ [name, 'b'] | sort }}"}) {
    try {
      jinja::Template(source, "t").render(context, testing::oracle_now());
      ADD_FAILURE() << source << " rendered";
    } catch (const InputError& error) {
      EXPECT_NE(std::string(error.what()).find("non-ASCII"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace tilefire
