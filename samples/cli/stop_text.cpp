#include "stop_text.h"

#include <algorithm>
#include <utility>

namespace tilefire::cli {

StopText::StopText(std::string stop) : stop_(std::move(stop)) {}

std::string StopText::add(std::string_view piece) {
  if (stopped_) return "";
  held_.append(piece);
  const size_t found = held_.find(stop_);
  if (found != std::string::npos) {
    stopped_ = true;
    std::string shown = held_.substr(0, found);
    held_.clear();
    return shown;
  }
  // Hold back the longest end of the text that is a beginning of the stop string (shorter than it: the
  // whole of it would have been found).
  size_t keep = std::min(held_.size(), stop_.size() - 1);
  while (keep > 0 && held_.compare(held_.size() - keep, keep, stop_, 0, keep) != 0) --keep;
  std::string shown = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return shown;
}

std::string StopText::finish() {
  std::string rest = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace tilefire::cli
