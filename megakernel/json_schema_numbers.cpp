// A number held to minimum / maximum (exclusive or not): the bounds in exact decimal units, and whether a
// number written so far can still end within them (json_schema_node.h).
//
// What a reply may write for such a number is a subset of JSON's numbers: at most kBoundedNumberDigits
// digits (a lone 0 before the point not counted) and no exponent. Then every value is a whole number of
// units of 10^-15, below 10^30 of them, and exact arithmetic on __int128 decides each digit. Why 15: JSON
// Schema validators compare doubles (Ajv: `data <= maximum`), and two decimals of at most 15 significant
// digits never round to one double, so a text exactly within the bound as the schema's double prints is
// within it as a double too, exclusive bounds included (a 16-digit text could round onto the bound).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <string>

#include "json_schema_node.h"
#include "tilefire/errors.h"

namespace tilefire {

namespace {

// Rounded towards negative infinity (C++ rounds towards zero).
__int128 floor_div(__int128 numerator, __int128 denominator) {
  const __int128 quotient = numerator / denominator;
  return quotient * denominator > numerator ? quotient - 1 : quotient;
}

__int128 ceil_div(__int128 numerator, __int128 denominator) { return -floor_div(-numerator, denominator); }

// Whether some point start + k * spacing (k >= 0) below `end` has a magnitude the node's bounds allow,
// given the sign.
bool lattice_meets(const JsonSchema::Node& node, bool negative, __int128 start, __int128 end, __int128 spacing) {
  const __int128 least = negative ? -node.max_units : node.min_units, most = negative ? -node.min_units : node.max_units;
  const __int128 low = std::max(least, start), high = std::min(most, end - 1);
  if (low > high) return false;
  return start + ceil_div(low - start, spacing) * spacing <= high;
}

}  // namespace

bool number_reachable(const JsonSchema::Node& node, const NumberPrefix& prefix) {
  constexpr uint32_t kMost = kBoundedNumberDigits;
  if (!prefix.begun) {  // a '-' alone: -0... or -1... to -9...
    NumberPrefix next = prefix;
    next.begun = true;
    next.zero = true;
    if (number_reachable(node, next)) return true;
    next.zero = false;
    next.digits = 1;
    for (next.value = 1; next.value <= 9; ++next.value)
      if (number_reachable(node, next)) return true;
    return false;
  }
  const __int128 value = prefix.value;
  if (prefix.fraction_digits < 0) {  // in the integer part
    if (prefix.zero) return lattice_meets(node, prefix.negative, 0, power_of_ten(kMost), 1);  // 0.xxx..., 15 digits at most
    // j more integer digits, then up to 15 - digits - j after the point.
    for (uint32_t more = 0; prefix.digits + more <= kMost; ++more) {
      const __int128 unit = power_of_ten(more + kMost);
      if (lattice_meets(node, prefix.negative, value * unit, (value + 1) * unit, power_of_ten(prefix.digits + more))) return true;
    }
    return false;
  }
  // After the point with f fraction digits: [D.F, D.F + 10^-f), in steps of the last digit still possible.
  const uint32_t fraction = uint32_t(prefix.fraction_digits);
  const __int128 start = value * power_of_ten(kMost - fraction);
  return lattice_meets(node, prefix.negative, start, start + power_of_ten(kMost - fraction), power_of_ten(prefix.digits - fraction));
}

bool number_within(const JsonSchema::Node& node, const NumberPrefix& prefix) {
  const uint32_t fraction = prefix.fraction_digits < 0 ? 0 : uint32_t(prefix.fraction_digits);
  const __int128 magnitude = __int128(prefix.value) * power_of_ten(kBoundedNumberDigits - fraction);
  const __int128 units = prefix.negative ? -magnitude : magnitude;
  return units >= node.min_units && units <= node.max_units;
}

std::string decimal_of_bound(double value) {
  // The shortest of its 15- and 17-digit forms that reads back as itself: the 15-digit one is the only
  // decimal of 15 digits that is this double, which the exclusive bounds rely on (the top of the file).
  char printed[40];
  std::snprintf(printed, sizeof printed, "%.15g", value);
  if (std::strtod(printed, nullptr) != value) std::snprintf(printed, sizeof printed, "%.17g", value);
  return printed;
}

__int128 number_bound_units(const std::string& text, bool lower, bool exclusive) {
  // text: -?digits(.digits)?(e[+-]?digits)?  ->  mantissa * 10^exponent
  bool negative = false;
  __int128 mantissa = 0;
  int32_t exponent = 0;
  size_t at = 0;
  if (text[at] == '-') negative = true, ++at;
  bool after_point = false;
  for (; at < text.size() && text[at] != 'e' && text[at] != 'E'; ++at) {
    if (text[at] == '.') {
      after_point = true;
      continue;
    }
    mantissa = mantissa * 10 + (text[at] - '0');  // at most 20 digits: an int64's or a %.17g's
    if (after_point) --exponent;
  }
  if (at < text.size()) exponent += std::atoi(text.c_str() + at + 1);
  // In units of 10^-15, as an inclusive bound; past the largest value a reply can write, clamped there.
  const __int128 beyond = kMostNumberUnits;  // 10^30: no value a reply writes is this far
  const int32_t scale = exponent + int32_t(kBoundedNumberDigits);
  __int128 units = 0;
  bool whole = true;  // units is the bound exactly
  if (mantissa == 0) {
    units = 0;
  } else if (scale >= 0) {
    units = scale > 30 || mantissa > beyond / power_of_ten(uint32_t(scale)) ? beyond : mantissa * power_of_ten(uint32_t(scale));
  } else if (scale < -36) {
    units = 0, whole = false;  // a bound closer to 0 than any unit
  } else {
    const __int128 divisor = power_of_ten(uint32_t(-scale));
    units = mantissa / divisor;  // towards zero: the magnitude's floor
    whole = units * divisor == mantissa;
  }
  // Signed, then made inclusive: the least unit at or above a lower bound (strictly, if exclusive), the
  // most at or below an upper one.
  __int128 floor_units = negative ? -units - (whole ? 0 : 1) : units;
  __int128 ceil_units = negative ? -units : units + (whole ? 0 : 1);
  if (lower) return exclusive ? floor_units + 1 : ceil_units;
  return exclusive ? ceil_units - 1 : floor_units;
}

}  // namespace tilefire
