#include "train/finite_guard.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ulysses::train {

OnNonfinite on_nonfinite_from_name(const std::string& name) {
  return name == "skip" ? OnNonfinite::kSkip : OnNonfinite::kStop;
}

FiniteGuard::FiniteGuard(OnNonfinite policy, std::int64_t max_skipped_in_a_row)
    : policy_(policy), max_in_a_row_(max_skipped_in_a_row) {}

FiniteGuard::Verdict FiniteGuard::judge(std::int64_t step, double loss, double grad_norm) {
  std::vector<std::string> bad;
  if (!std::isfinite(loss)) bad.push_back(fmt::format("the loss is {}", loss));
  if (!std::isfinite(grad_norm)) bad.push_back(fmt::format("the gradient norm is {}", grad_norm));
  if (bad.empty()) {
    in_a_row_ = 0;
    return Verdict::kStep;
  }
  ++in_a_row_;
  const std::string what = fmt::format("step {}: {}", step, fmt::join(bad, " and "));
  if (policy_ == OnNonfinite::kSkip && in_a_row_ <= max_in_a_row_) {
    reason_ = fmt::format("{}: skipped, the weights and AdamW's state left as they were ({} of at most {} in a row, "
                          "--max-skipped-steps)", what, in_a_row_, max_in_a_row_);
    return Verdict::kSkip;
  }
  reason_ = policy_ == OnNonfinite::kSkip
                ? fmt::format("{}: {} non-finite steps in a row (--max-skipped-steps {}): stopped, nothing saved", what,
                              in_a_row_, max_in_a_row_)
                : fmt::format("{}: stopped before AdamW's update, nothing saved", what);
  return Verdict::kStop;
}

}  // namespace ulysses::train
