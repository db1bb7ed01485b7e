#pragma once
// The message of the InputError a call throws, or "" when it throws none: for tests that check a refusal
// names what was wrong (an empty message never contains the expected words, so a call taken is a failure).
#include <string>

#include "tilefire/errors.h"

namespace tilefire::testing {

template <class Call>
std::string refusal(Call&& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace tilefire::testing
