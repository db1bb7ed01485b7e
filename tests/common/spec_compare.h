#pragma once
// Two ModelSpecs field by field, exactly (a config's round trip must not drift), as gtest expectations.
#include "graph/model_spec.h"

namespace tilefire::testing {

void expect_same_spec(const ModelSpec& a, const ModelSpec& b);

}  // namespace tilefire::testing
