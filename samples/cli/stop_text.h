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

  // The part of the text so far that can be shown now (none once a stop string has appeared). A
  // `protected_piece` cannot end a stop string: the text of a reply's first min_tokens - 1 tokens (vLLM's
  // min_tokens: a stop string counts where it ends in the text of token min_tokens or later).
  std::string add(std::string_view piece, bool protected_piece = false);
  // At the end of the generation: what was held back, unless a stop string appeared.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  // Where the earliest stop string in `text` begins that ends past the protected text, or npos; `text`
  // begins `offset` bytes into what was added.
  size_t first_stop(const std::string& text, size_t offset) const;

  std::vector<std::string> stops_;
  std::string held_;           // the end of the text so far that begins a stop string
  size_t shown_ = 0;           // bytes of what was added before held_
  size_t protected_end_ = 0;   // bytes of what was added that no stop string may end in
  bool stopped_ = false;
};

}  // namespace tilefire::cli
