#pragma once
// --stop TEXT: generated text cut where a stop string first appears, as it streams. A piece of text that
// might be the beginning of the stop string is held back until the next pieces settle it, so what has been
// shown never needs taking back.
#include <string>
#include <string_view>

namespace tilefire::cli {

class StopText {
 public:
  explicit StopText(std::string stop);  // not empty

  // The part of the text so far that can be shown now (none once the stop string has appeared).
  std::string add(std::string_view piece);
  // At the end of the generation: what was held back, unless the stop string appeared.
  std::string finish();
  bool stopped() const { return stopped_; }
  // `text` up to where the stop string first appears (all of it when it does not).
  std::string cut(const std::string& text) const { return text.substr(0, text.find(stop_)); }

 private:
  std::string stop_;
  std::string held_;  // the end of the text so far that begins the stop string
  bool stopped_ = false;
};

}  // namespace tilefire::cli
