#include "stop_text.h"

#include <algorithm>
#include <utility>

namespace tilefire::cli {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

size_t StopText::first_stop(const std::string& text, size_t offset) const {
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    // The first occurrence that ends past the protected text (occurrences may overlap: step by one).
    size_t at = text.find(stop);
    while (at != std::string::npos && offset + at + stop.size() <= protected_end_) at = text.find(stop, at + 1);
    first = std::min(first, at);
  }
  return first;
}

std::string StopText::add(std::string_view piece, bool protected_piece) {
  if (stopped_) return "";
  held_.append(piece);
  if (protected_piece) protected_end_ = shown_ + held_.size();
  const size_t found = first_stop(held_, shown_);
  if (found != std::string::npos) {
    stopped_ = true;
    std::string shown = held_.substr(0, found);
    shown_ += held_.size();
    held_.clear();
    return shown;
  }
  // Hold back the longest end of the text that is a beginning of a stop string (shorter than it: the whole
  // of it would have been found).
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    size_t length = std::min(held_.size(), stop.size() - 1);
    while (length > keep && held_.compare(held_.size() - length, length, stop, 0, length) != 0) --length;
    keep = std::max(keep, length);
  }
  std::string shown = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  shown_ += shown.size();
  return shown;
}

std::string StopText::finish() {
  std::string rest = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  shown_ += rest.size();
  return rest;
}

}  // namespace tilefire::cli
