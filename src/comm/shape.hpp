// "[2, 3, 4]": a tensor's shape for error messages of the communicators.
#pragma once

#include <string>

#include <torch/types.h>

namespace ulysses::comm {

inline std::string shape_of(const torch::Tensor& x) {
  std::string s = "[";
  for (std::int64_t i = 0; i < x.dim(); ++i) s += (i ? ", " : "") + std::to_string(x.size(i));
  return s + "]";
}

}  // namespace ulysses::comm
