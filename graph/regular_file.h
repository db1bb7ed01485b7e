#pragma once
// A regular file opened for reading, as the weight readers need it: opened non-blocking, so that a FIFO
// named like a checkpoint is refused at once instead of waiting for a writer (a regular file reads the
// same either way), and closed when the object goes.
#include <cstdint>
#include <filesystem>
#include <string>

namespace tilefire {

class RegularFile {
 public:
  // InputError "<path>: cannot open <kind> (<reason>)", "<path>: cannot stat (...)" or "<path>: not a
  // regular file" (a FIFO, a device, a folder).
  RegularFile(const std::filesystem::path& path, const std::string& kind);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // in bytes, when it was opened
  const std::string& origin() const { return origin_; }  // the path, for messages

 private:
  std::string origin_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace tilefire
