// diff: two weight sets compared tensor by tensor in fp32 (each side converted from F32/BF16/F16), in
// kChunkBytes pieces. Per tensor: max |a - b| and that maximum relative to the larger of the two tensors'
// largest magnitudes (so a near-zero element does not blow the ratio up). NaN equals NaN only bit for bit.
#include <cmath>
#include <cstring>

#include <fmt/ranges.h>

#include "ckpt/commands.hpp"
#include "ckpt/source.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {
namespace {

struct Side {
  Weights model, optimizer;
  bool checkpoint = false;
};

Side open_side(const fs::path& path) {
  if (fs::is_regular_file(path)) return {Weights::file(path), {}, false};
  if (fs::is_directory(path)) {
    if (checkpoint::find_checkpoint(path)) {
      Checkpoint c = open_checkpoint(path);
      return {c.model, c.optimizer, true};
    }
    if (is_hf_dir(path)) return {Weights::hf_dir(path), {}, false};
  }
  throw BadInput(fmt::format("{} is neither a checkpoint, a Hugging Face directory nor a .safetensors file", path.string()),
                 "pass two checkpoints or model directories");
}

struct Result {
  double max_abs = 0, max_mag = 0;
};

Result compare(const Weights& a, const Weights& b, const std::string& name) {
  const std::uint64_t numel = a.info(name).numel();
  const std::uint64_t chunk = kChunkBytes / 4;
  std::vector<float> x, y;
  std::vector<char> scratch;
  Result r;
  for (std::uint64_t first = 0; first < numel; first += chunk) {
    const std::uint64_t n = std::min(chunk, numel - first);
    x.resize(n);
    y.resize(n);
    a.read_f32(name, first, n, x.data(), scratch);
    b.read_f32(name, first, n, y.data(), scratch);
    for (std::uint64_t i = 0; i < n; ++i) {
      double d = std::fabs(static_cast<double>(x[i]) - y[i]);
      if (std::isnan(d) && std::memcmp(&x[i], &y[i], 4) != 0) d = INFINITY;
      if (!std::isnan(d)) r.max_abs = std::max(r.max_abs, d);
      r.max_mag = std::max({r.max_mag, static_cast<double>(std::fabs(x[i])), static_cast<double>(std::fabs(y[i]))});
    }
  }
  return r;
}

// Returns the number of differences (tensors above tolerance, missing, extra, shape changes).
int diff_sets(const Weights& a, const Weights& b, const std::string& what, double tolerance) {
  int problems = 0, compared = 0;
  double worst = 0;
  std::string worst_name;
  for (const std::string& n : a.names()) {
    if (!b.contains(n)) {
      fmt::print("  only in A: {}\n", n);
      ++problems;
      continue;
    }
    const st::TensorInfo &ta = a.info(n), &tb = b.info(n);
    if (ta.shape != tb.shape) {
      fmt::print("  shape differs: {} [{}] vs [{}]\n", n, fmt::join(ta.shape, ", "), fmt::join(tb.shape, ", "));
      ++problems;
      continue;
    }
    const Result r = compare(a, b, n);
    ++compared;
    const double rel = r.max_mag > 0 ? r.max_abs / r.max_mag : 0;
    const bool above = r.max_abs > tolerance;
    problems += above;
    if (r.max_abs >= worst) worst = r.max_abs, worst_name = n;
    fmt::print("  {:<56} {:>4}/{:<4} max_abs {:.3e}  max_rel {:.3e}{}\n", n, st::dtype_name(ta.dtype),
               st::dtype_name(tb.dtype), r.max_abs, rel, above ? "  ABOVE TOLERANCE" : "");
  }
  for (const std::string& n : b.names())
    if (!a.contains(n)) {
      fmt::print("  only in B: {}\n", n);
      ++problems;
    }
  fmt::print("{}: {} tensors compared, largest max_abs {:.3e} ({}), {} difference(s) above tolerance {:g} or in the "
             "tensor set\n", what, compared, worst, worst_name.empty() ? "-" : worst_name, problems, tolerance);
  return problems;
}

}  // namespace

int run_diff(const DiffOptions& o) {
  if (!(o.tolerance >= 0)) throw BadInput(fmt::format("--tolerance {} must be >= 0", o.tolerance),
                                          "pass 0 (bit for bit) or a positive relative tolerance such as 1e-6");
  const Side a = open_side(o.a), b = open_side(o.b);
  fmt::print("A = {}\nB = {}\n", o.a.string(), o.b.string());
  int problems = diff_sets(a.model, b.model, "weights", o.tolerance);
  if (o.optimizer) {
    if (!a.checkpoint || !b.checkpoint)
      throw BadInput("--optimizer compares two checkpoints; a Hugging Face directory has no optimizer state",
                     "compare the weights only (without --optimizer), or two ulysses-train checkpoints");
    problems += diff_sets(a.optimizer, b.optimizer, "optimizer", o.tolerance);
  }
  return problems == 0 ? 0 : 1;
}

}  // namespace ulysses::ckpt
