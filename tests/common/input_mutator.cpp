// InputMutator (tests/common/input_mutator.h).
#include "tests/common/input_mutator.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace tilefire::testing {

using nlohmann::json;

namespace {

// Text a JSON parser or the code behind it may trip on, dropped into the middle of a document.
const char* const kTokens[] = {"{",  "}",    "[",     "]",         "\"",   ",",   ":",     "0",        "-",
                               "1e400", "-1", "9999999999999999999999", "18446744073709551616", "\\u0000",
                               "\xff", "null", "true", "NaN", "0.5", "\"\\ud800\"", " ", "\n", "e", "."};

// Every node's pointer (objects and arrays included), in document order.
void collect(const json& node, const json::json_pointer& at, std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) collect(value, at / key, out);
  } else if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) collect(node[i], at / i, out);
  }
}

}  // namespace

uint64_t fuzz_case_count(uint64_t default_count) {
  const char* text = std::getenv("TILEFIRE_FUZZ_SCALE");
  const uint64_t scale = text ? std::strtoull(text, nullptr, 10) : 0;
  return default_count * (scale ? scale : 1);
}

void InputMutator::note(const std::string& edit) { log_ += (log_.empty() ? "" : "; ") + edit; }

json InputMutator::extreme_value() {
  switch (below(20)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return int64_t(1) << 31;
    case 3: return int64_t(1) << 32;
    case 18: return (int64_t(1) << 31) - 1;
    case 19: return (int64_t(1) << 32) - 1;
    case 4: return int64_t(1) << 53;
    case 5: return uint64_t(1) << 63;
    case 6: return std::numeric_limits<uint64_t>::max();
    case 7: return std::numeric_limits<int64_t>::min();
    case 8: return 1e308;
    case 9: return 1e-308;
    case 10: return 0.5;
    case 11: return -0.0;
    case 12: return "";
    case 13: return std::string(4096, 'x');
    case 14: return nullptr;
    case 15: return one_in(2);
    case 16: return json::array();
    default: return json::object();
  }
}

std::string InputMutator::mutate_bytes(std::string text) {
  const uint64_t edits = 1 + below(3);
  for (uint64_t e = 0; e < edits; ++e) {
    const size_t at = size_t(below(text.size() + 1));
    switch (below(6)) {
      case 0:
        if (at < text.size()) text[at] = char(uint8_t(text[at]) ^ uint8_t(1u << below(8)));
        note("bit flip at " + std::to_string(at));
        break;
      case 1: {
        const std::string token = kTokens[below(std::size(kTokens))];
        text.insert(at, token);
        note("'" + token + "' inserted at " + std::to_string(at));
        break;
      }
      case 2: {
        const size_t count = size_t(1 + below(8));
        text.erase(at, count);
        note(std::to_string(count) + " bytes cut at " + std::to_string(at));
        break;
      }
      case 3: {
        const std::string range = text.substr(at, size_t(1 + below(16)));
        text.insert(at, range);
        note("'" + range + "' repeated at " + std::to_string(at));
        break;
      }
      case 4:
        text.resize(at);
        note("truncated to " + std::to_string(at) + " bytes");
        break;
      default:
        if (at < text.size()) text[at] = kTokens[below(std::size(kTokens))][0];
        note("byte " + std::to_string(at) + " replaced");
        break;
    }
  }
  return text;
}

json InputMutator::mutate_json(json document) {
  const uint64_t edits = 1 + below(3);
  for (uint64_t e = 0; e < edits; ++e) {
    std::vector<json::json_pointer> nodes;
    collect(document, json::json_pointer(), nodes);
    const json::json_pointer at = nodes[size_t(below(nodes.size()))];
    json& node = document[at];
    const std::string where = at.to_string().empty() ? "the top level" : at.to_string();
    switch (below(6)) {
      case 0:
      case 1: {
        const json value = extreme_value();
        node = value;
        note(where + " = " + value.dump().substr(0, 40));
        break;
      }
      case 2:
        if (at.empty()) break;
        {
          json& parent = document[at.parent_pointer()];
          if (parent.is_object()) {
            parent.erase(at.back());
          } else {
            parent.erase(size_t(std::stoul(at.back())));
          }
        }
        note(where + " removed");
        break;
      case 3:
        if (node.is_object()) {
          node["fuzz_" + std::to_string(below(100))] = extreme_value();
          note("a key added to " + where);
        } else if (node.is_array()) {
          node.push_back(node.empty() ? extreme_value() : node[size_t(below(node.size()))]);
          note("an element added to " + where);
        }
        break;
      case 4:
        if (node.is_number()) {
          const double factors[] = {-1.0, 0.0, 2.0, 1e9, 1.0 / 3.0, 1e300};
          const double factor = factors[below(std::size(factors))];
          node = node.get<double>() * factor;
          note(where + " scaled by " + std::to_string(factor));
        } else if (node.is_array() && !node.empty()) {
          node.erase(node.size() - 1);
          note("the last element of " + where + " removed");
        }
        break;
      default:
        if (node.is_number_integer() || node.is_number_unsigned()) {
          // Wrapping, as unsigned arithmetic: 2^64 - 1 + 1 is 0, and -2^63 - 1 is 2^63 - 1.
          const bool up = one_in(2);
          const uint64_t delta = up ? 1 : ~uint64_t(0);
          node = node.is_number_unsigned() ? json(node.get<uint64_t>() + delta)
                                           : json(int64_t(uint64_t(node.get<int64_t>()) + delta));
          note(where + (up ? " + 1" : " - 1"));
        } else if (node.is_string()) {
          node = node.get<std::string>() + (one_in(2) ? "x" : "");
          if (!node.get<std::string>().empty() && one_in(2)) node = node.get<std::string>().substr(1);
          note(where + " respelt");
        }
        break;
    }
  }
  return document;
}

std::string InputMutator::mutate_json_text(const json& document) {
  // A respelt string can lose the first byte of a multi-byte character; the JSON library writes such
  // a string only with a replacement character in place (the byte edits below make raw bad bytes).
  std::string text = mutate_json(document).dump(one_in(2) ? -1 : 2, ' ', false, json::error_handler_t::replace);
  if (one_in(4)) text = mutate_bytes(std::move(text));
  return text;
}

}  // namespace tilefire::testing
