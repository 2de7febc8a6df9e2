// The finiteness guard: every step's loss and gradient norm (the same on every rank once all-reduced) are checked
// before AdamW touches the weights. A non-finite one never reaches the weights, a checkpoint or --keep-last's
// pruning: by default the run stops (exit 4, kExitNonFinite), its last checkpoint the last good state; with
// --on-nonfinite skip the step is dropped (no update; the data and the schedule move on) and the run stops only
// after --max-skipped-steps of them in a row. Torch-free: the trainer hands it the step's numbers.
#pragma once

#include <cstdint>
#include <string>

namespace ulysses::train {

enum class OnNonfinite { kStop, kSkip };
OnNonfinite on_nonfinite_from_name(const std::string& name);   // "stop" or "skip" (the CLI checks the word)

class FiniteGuard {
 public:
  FiniteGuard(OnNonfinite policy, std::int64_t max_skipped_in_a_row);

  enum class Verdict { kStep, kSkip, kStop };
  // What to do with step `step` whose loss and gradient norm are these (kStep: both finite).
  Verdict judge(std::int64_t step, double loss, double grad_norm);
  // The one line that says why (after kSkip or kStop): the step, what was non-finite, what happens now.
  const std::string& reason() const { return reason_; }

 private:
  OnNonfinite policy_;
  std::int64_t max_in_a_row_;
  std::int64_t in_a_row_ = 0;
  std::string reason_;
};

}  // namespace ulysses::train
