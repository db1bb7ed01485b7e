// RegularFile (graph/regular_file.h).
#include "graph/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tilefire/errors.h"

namespace tilefire {

RegularFile::RegularFile(const std::filesystem::path& path, const std::string& kind) : origin_(path.string()) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw InputError(origin_ + ": cannot open " + kind + " (" + std::strerror(errno) + ")");
  struct stat info {};
  // Thrown from the constructor, so the destructor will not run: close here.
  auto refuse = [&](const std::string& what) {
    ::close(fd_);
    throw InputError(origin_ + ": " + what);
  };
  if (::fstat(fd_, &info) != 0) refuse(std::string("cannot stat (") + std::strerror(errno) + ")");
  if (!S_ISREG(info.st_mode)) refuse("not a regular file");
  size_ = static_cast<uint64_t>(info.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

}  // namespace tilefire
