#include "model/precision.hpp"

#include <ATen/autocast_mode.h>


namespace ulysses::model {

c10::ScalarType compute_dtype(Precision p) { return p == Precision::kFp32 ? c10::kFloat : c10::kBFloat16; }

c10::ScalarType weight_dtype(Precision p) { return p == Precision::kBf16 ? c10::kBFloat16 : c10::kFloat; }

AutocastScope::AutocastScope(Precision p, const c10::Device& device)
    : active_(autocasts(p)), type_(device.type()) {
  if (!active_) return;
  was_enabled_ = at::autocast::is_autocast_enabled(type_);
  was_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_dtype(type_, c10::kBFloat16);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

}  // namespace ulysses::model
