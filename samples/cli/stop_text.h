#pragma once
// Stop strings (run --stop, serve's "stop"): generated text cut where the first of them appears, as it
// streams. A piece of text that might be the beginning of a stop string is held back until the next pieces
// settle it, so what has been shown never needs taking back.
#include <string>
#include <string_view>
#include <vector>

namespace tilefire::cli {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);  // none empty

  // The part of the text so far that can be shown now (none once a stop string has appeared).
  std::string add(std::string_view piece);
  // At the end of the generation: what was held back, unless a stop string appeared.
  std::string finish();
  bool stopped() const { return stopped_; }
  // `text` up to where a stop string first appears (all of it when none does).
  std::string cut(const std::string& text) const;

 private:
  size_t first_stop(const std::string& text) const;  // where the earliest stop string begins, or npos

  std::vector<std::string> stops_;
  std::string held_;  // the end of the text so far that begins a stop string
  bool stopped_ = false;
};

}  // namespace tilefire::cli
