// Checks of numeric flags that CLI11's own validators miss, for CLI::Option::check (and so for --config's values:
// core/strict_config.hpp runs every option's checks). CLI11 converts an integer with strtoll, which saturates
// (--steps 99999999999999999999 became INT64_MAX), and NaN passes every comparison of CLI::Range and
// CLI::PositiveNumber (--lr nan trained on NaN). These parse the text themselves: the whole of it, nothing past the
// type's range, NaN and infinities refused.
//   app.add_option("--steps", o.steps)->check(whole_number(1, kMostSteps));
//   app.add_option("--lr", o.lr)->check(real_number(0, kUnbounded, Bound::kOpen));   // 0 < lr, finite
#pragma once

#include <cstdint>
#include <limits>

#include <CLI/CLI.hpp>

namespace ulysses {

inline constexpr double kUnbounded = std::numeric_limits<double>::max();            // real_number: no upper bound
inline constexpr std::int64_t kMostCount = std::numeric_limits<std::int64_t>::max();  // an int64 option's largest
inline constexpr std::int64_t kMostInt = std::numeric_limits<int>::max();              // an int option's largest

// A whole number in [min, max]: "\"-2\" is not a whole number from 1 to 1000000000000".
CLI::Validator whole_number(std::int64_t min, std::int64_t max);

enum class Bound { kClosed, kOpen };   // whether the bound itself is allowed (closed) or not (open)

// A finite number between min and max, each bound allowed or not: "\"nan\" is not a finite number > 0".
CLI::Validator real_number(double min, double max, Bound low = Bound::kClosed, Bound high = Bound::kClosed);

}  // namespace ulysses
