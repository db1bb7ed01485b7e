#pragma once
// Errors Tilefire reports to its users.
#include <stdexcept>

namespace tilefire {

// Bad input: a missing or truncated file, a wrong config, a bad flag, a tensor of the wrong shape, a
// prompt longer than the context. The message names the file, tensor, key or flag and what was expected.
// The command line turns it into exit status 2.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tilefire
