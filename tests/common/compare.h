#pragma once
// NaN-aware comparisons for tests: a value mismatches unless it equals the expected one (infinities of
// the same sign) or |a - b| <= atol + rtol * |b|, so a NaN on either side always mismatches. Reports the
// count and the first mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

namespace tilefire::testing {

struct Mismatches {
  size_t count = 0;
  std::string first;  // the first few, for the failure message
};

// The rule above for one value. An infinite or NaN expected value is matched only by the same value (with
// |b| infinite, atol + rtol * |b| would let anything but NaN through), and a finite one only by a finite one.
inline bool close_enough(double a, double b, double atol, double rtol) {
  if (!std::isfinite(b)) return a == b;
  return a == b || (std::isfinite(a) && std::fabs(a - b) <= atol + rtol * std::fabs(b));
}

template <class A, class B>
Mismatches compare_close(const A* actual, const B* expected, size_t n, double atol, double rtol, size_t show = 5) {
  Mismatches m;
  std::ostringstream out;
  for (size_t i = 0; i < n; ++i) {
    const double a = double(actual[i]), b = double(expected[i]);
    if (!close_enough(a, b, atol, rtol)) {
      if (m.count < show) out << "  [" << i << "] got " << a << " expected " << b << "\n";
      ++m.count;
    }
  }
  m.first = out.str();
  return m;
}

template <class A, class B>
Mismatches compare_close(const std::vector<A>& actual, const std::vector<B>& expected, double atol, double rtol) {
  if (actual.size() != expected.size()) {
    Mismatches m;
    m.count = actual.size() > expected.size() ? actual.size() : expected.size();
    m.first = "  sizes differ: " + std::to_string(actual.size()) + " vs " + std::to_string(expected.size()) + "\n";
    return m;
  }
  return compare_close(actual.data(), expected.data(), actual.size(), atol, rtol);
}

// Relative error of a whole vector: ||a - b|| / ||b||; NaN when any value is NaN, and a test failure and
// NaN when the sizes differ (NaN fails both "close" and "far apart" checks).
template <class A, class B>
double relative_l2_error(const std::vector<A>& actual, const std::vector<B>& expected) {
  if (actual.size() != expected.size()) {
    ADD_FAILURE() << "relative_l2_error: sizes differ, " << actual.size() << " vs " << expected.size();
    return std::nan("");
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double d = double(actual[i]) - double(expected[i]);
    num += d * d;
    den += double(expected[i]) * double(expected[i]);
  }
  return std::sqrt(num) / std::sqrt(den);
}

// Counts the NaN-aware mismatches of `got` against `want` and reports the first five as test failures.
template <class A, class B>
size_t count_mismatches(const std::vector<A>& got, const std::vector<B>& want, double atol, double rtol,
                        const std::string& what) {
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double a = got[i], b = want[i];
    if (!close_enough(a, b, atol, rtol)) {
      if (mismatches < 5)
        ADD_FAILURE() << what << ": index " << i << " got " << a << " want " << b << " (atol " << atol << ", rtol " << rtol << ")";
      ++mismatches;
    }
  }
  if (got.size() != want.size()) ADD_FAILURE() << what << ": sizes differ, " << got.size() << " vs " << want.size();
  return mismatches;
}

// Logits against the double-precision reference forward pass (tests/common/reference_model.h): within
// 1e-4 of the largest reference logit. The reference reads the same stored weights widened to double, so
// this holds for every weight dtype (the engine accumulates in f32).
inline void expect_logits_match_reference(const std::vector<float>& actual, const std::vector<double>& expected,
                                          const std::string& where) {
  double scale = 0;  // of the finite logits: an infinite one would make every tolerance infinite
  for (double v : expected)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  const Mismatches m = compare_close(actual, expected, 1e-4 * scale, 1e-4);
  EXPECT_EQ(m.count, 0u) << where << ": " << m.count << " logits differ from the reference\n" << m.first;
}

// The message of the exception of type E that `action` throws; a test failure if it throws nothing or
// something else.
template <class E>
std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "threw another exception type: " << error.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// The two largest logits are further apart than `margin`; when they are not, a greedy choice may flip on
// rounding, so tests compare greedy tokens only where this holds. False for fewer than two logits.
inline bool clear_winner(const std::vector<float>& logits, float margin) {
  if (logits.size() < 2) return false;
  std::vector<float> top(logits);
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
  return top[0] - top[1] > margin;
}

}  // namespace tilefire::testing
