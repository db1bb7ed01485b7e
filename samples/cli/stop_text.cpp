#include "stop_text.h"

#include <algorithm>
#include <utility>

namespace tilefire::cli {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {}

size_t StopText::first_stop(const std::string& text) const {
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, text.find(stop));
  return first;
}

std::string StopText::cut(const std::string& text) const { return text.substr(0, first_stop(text)); }

std::string StopText::add(std::string_view piece) {
  if (stopped_) return "";
  held_.append(piece);
  const size_t found = first_stop(held_);
  if (found != std::string::npos) {
    stopped_ = true;
    std::string shown = held_.substr(0, found);
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
  return shown;
}

std::string StopText::finish() {
  std::string rest = stopped_ ? std::string() : std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace tilefire::cli
