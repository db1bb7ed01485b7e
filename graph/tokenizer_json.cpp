// read_tokenizer_json (graph/tokenizer_json.h): the JSON library's event parser builds the document as
// its own parser would, except under model.vocab and model.merges, whose entries go straight into flat
// lists.
#include "graph/tokenizer_json.h"

#include "graph/json_file.h"

namespace tilefire {
namespace {

using nlohmann::json;

class Builder {
 public:
  Builder(TokenizerJson& out, const std::string& origin) : out_(out), origin_(origin) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool value) { return put(json(value)); }
  bool number_integer(json::number_integer_t value) { return put(json(value)); }
  bool number_unsigned(json::number_unsigned_t value) { return put(json(value)); }
  bool number_float(json::number_float_t value, const std::string&) { return put(json(value)); }
  bool binary(json::binary_t& value) { return put(json(std::move(value))); }

  bool string(std::string& value) {
    if (!open_.empty()) {
      Open& top = open_.back();
      if (top.sink == Sink::merges) {  // "left right"
        out_.merges.push_back({TokenizerJson::Merge::Form::text, std::move(value), "", json()});
        return true;
      }
      if (top.sink == Sink::merge_pair && top.strings < 2) {  // [left, right]
        TokenizerJson::Merge& merge = out_.merges.back();
        (top.strings++ == 0 ? merge.left : merge.right) = std::move(value);
        return true;
      }
    }
    return put(json(std::move(value)));
  }

  bool key(std::string& name) {
    open_.back().key = std::move(name);
    return true;
  }

  bool start_object(std::size_t) {
    // model.vocab: its entries into out_.vocab, an empty object left in its place.
    const bool vocab = at_model_member("vocab");
    json* node = put_container(json::object());
    if (vocab) {
      out_.vocab.clear();  // a second "vocab" key replaces the first, as in the JSON library's own tree
      open_.push_back({nullptr, Sink::vocab});
    } else {
      open_.push_back({node, Sink::none});
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (!open_.empty() && open_.back().sink == Sink::merges) {  // a merge as [left, right]
      out_.merges.push_back({TokenizerJson::Merge::Form::pair, "", "", json()});
      open_.push_back({nullptr, Sink::merge_pair});
      return true;
    }
    const bool merges = at_model_member("merges");
    json* node = put_container(json::array());
    if (merges) {
      out_.merges.clear();
      open_.push_back({nullptr, Sink::merges});
    } else {
      open_.push_back({node, Sink::none});
    }
    return true;
  }

  bool end_object() {
    open_.pop_back();
    return true;
  }

  bool end_array() {
    const Open closed = open_.back();
    open_.pop_back();
    if (closed.sink == Sink::merge_pair && closed.strings < 2) other_merge(closed);  // [] or [left]: kept as given
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) { throw_invalid_json(error, origin_); }

 private:
  enum class Sink {
    none,        // a JSON value: `node` is it
    vocab,       // model.vocab: members go to out_.vocab
    merges,      // model.merges: items go to out_.merges
    merge_pair,  // a list in model.merges, `strings` of its items in out_.merges.back() so far
  };
  struct Open {
    Open(json* node, Sink sink) : node(node), sink(sink) {}
    json* node;
    Sink sink;
    std::string key;  // an object's member being read
    int strings = 0;  // merge_pair
  };

  // Whether the container that starts now is the member `name` of the document's "model" object.
  bool at_model_member(const char* name) const {
    return open_.size() == 2 && open_[0].sink == Sink::none && open_[0].node->is_object() && open_[0].key == "model" &&
           open_[1].sink == Sink::none && open_[1].node->is_object() && open_[1].key == name;
  }

  // A merge that is neither "left right" nor [left, right]: from here on a JSON value, with the strings
  // read so far as its first items.
  json* other_merge(const Open& pair) {
    TokenizerJson::Merge& merge = out_.merges.back();
    merge.form = TokenizerJson::Merge::Form::other;
    merge.other = json::array();
    if (pair.strings > 0) merge.other.push_back(std::move(merge.left));
    if (pair.strings > 1) merge.other.push_back(std::move(merge.right));
    merge.left.clear();
    merge.right.clear();
    return &merge.other;
  }

  // Puts `value` where the parser is and returns where it went (the containers it is in stay put while
  // it is open: an object's members and a list's items are added only to the innermost one).
  json* put_container(json value) {
    if (open_.empty()) {
      out_.document = std::move(value);
      return &out_.document;
    }
    Open& top = open_.back();
    switch (top.sink) {
      case Sink::none:
        if (top.node->is_object()) {
          json& member = (*top.node)[top.key];  // a key given twice keeps the last, as the library's tree does
          member = std::move(value);
          return &member;
        }
        top.node->push_back(std::move(value));
        return &top.node->back();
      case Sink::vocab:
        out_.vocab.emplace_back(std::move(top.key), std::move(value));
        return &out_.vocab.back().second;
      case Sink::merges: {
        out_.merges.push_back({TokenizerJson::Merge::Form::other, "", "", std::move(value)});
        return &out_.merges.back().other;
      }
      case Sink::merge_pair: {  // a third item, or one that is not a string
        json* list = other_merge(top);
        top = Open(list, Sink::none);
        list->push_back(std::move(value));
        return &list->back();
      }
    }
    return nullptr;
  }

  bool put(json value) {
    put_container(std::move(value));
    return true;
  }

  TokenizerJson& out_;
  const std::string& origin_;
  std::vector<Open> open_;  // the containers the parser is in, innermost last
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::filesystem::path& path, const std::string& origin) {
  const std::string text = read_json_file_text(path, origin);
  TokenizerJson out;
  Builder builder(out, origin);
  try {
    json::sax_parse(text.data(), text.data() + text.size(), &builder);
  } catch (const json::exception& error) {
    throw_invalid_json(error, origin);
  }
  return out;
}

}  // namespace tilefire
