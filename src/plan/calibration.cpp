#include "plan/calibration.hpp"

#include <array>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "plan/memory_model.hpp"

namespace ulysses::plan {
namespace {

constexpr int kUnknowns = 5;   // fixed, work, loss, saved, mlp
using Row = std::array<double, kUnknowns>;

// Gaussian elimination with partial pivoting on the normal equations; false when singular.
bool solve(std::array<Row, kUnknowns> a, Row b, Row& x) {
  for (int c = 0; c < kUnknowns; ++c) {
    int pivot = c;
    for (int r = c + 1; r < kUnknowns; ++r)
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    if (std::abs(a[pivot][c]) < 1e-12 * (1 + std::abs(a[c][c]))) return false;
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    for (int r = 0; r < kUnknowns; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < kUnknowns; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (int c = 0; c < kUnknowns; ++c) x[c] = b[c] / a[c][c];
  return true;
}

}  // namespace

const char* calibration_set_name(CalibrationSet s) {
  switch (s) {
    case CalibrationSet::kAll: return "all";
    case CalibrationSet::kWholeLogits: return "whole-logits";
    case CalibrationSet::kUntiledMlp: return "untiled-mlp";
    case CalibrationSet::kPlain: break;
  }
  return "plain";
}

MemoryFlags calibration_flags(CalibrationSet s, const std::string& precision, std::int64_t chunk) {
  MemoryFlags f;
  f.precision = precision;
  f.sharding = "no_shard";
  f.activation_checkpointing = s != CalibrationSet::kPlain;
  f.tiled_mlp = s == CalibrationSet::kAll || s == CalibrationSet::kWholeLogits;
  f.logits_chunk_tokens = s == CalibrationSet::kWholeLogits ? 0 : chunk;
  return f;
}

Profile fit_profile(const arch::ModelConfig& c, const std::vector<Measurement>& points, const std::string& precision,
                    std::int64_t chunk, Profile base) {
  if (points.size() < static_cast<std::size_t>(2 * std::size(kCalibrationSets)))
    throw BadInput(fmt::format("a calibration needs two lengths of each of its 4 feature sets; got {} points",
                               points.size()),
                   "pass two lengths: --calibrate-lengths 1024,2048");
  const Layout one;   // one rank, SP 1
  std::array<Row, kUnknowns> ata{};
  Row atb{};
  for (const Measurement& m : points) {
    const Features f = resolve(calibration_flags(m.set, precision, chunk), c, 1);
    auto total = [&](double work, double loss, double saved, double mlp) {
      Profile p = base;
      p.work_factor = work, p.loss_factor = loss, p.saved_factor = saved, p.mlp_factor = mlp;
      p.device_fixed = 0, p.host_fixed = 0;
      const Breakdown b = predict(c, one, f, p, m.seq_len);
      return static_cast<double>(b.device() + b.host());
    };
    const double exact = total(0, 0, 0, 0);
    const Row row{1.0, total(1, 0, 0, 0) - exact, total(0, 1, 0, 0) - exact, total(0, 0, 1, 0) - exact,
                  total(0, 0, 0, 1) - exact};
    const double y = static_cast<double>(m.peak) - exact;
    for (int i = 0; i < kUnknowns; ++i) {
      for (int j = 0; j < kUnknowns; ++j) ata[i][j] += row[i] * row[j];
      atb[i] += row[i] * y;
    }
  }
  Row x{};
  if (!solve(ata, atb, x) || !(x[1] > 0 && x[2] > 0 && x[3] > 0 && x[4] > 0))
    throw BadInput(fmt::format("the calibration's peaks do not determine the profile (fitted work {:.3g}, loss {:.3g}, "
                               "saved {:.3g}, mlp {:.3g})", x[1], x[2], x[3], x[4]),
                   "use lengths far enough apart that memory grows (e.g. --calibrate-lengths 2048,8192)");
  Profile p = base;
  (p.cuda ? p.device_fixed : p.host_fixed) = static_cast<std::int64_t>(x[0]);
  p.work_factor = x[1], p.loss_factor = x[2], p.saved_factor = x[3], p.mlp_factor = x[4];
  p.measurements = nlohmann::json::array();
  for (const Measurement& m : points)
    p.measurements.push_back({{"features", calibration_set_name(m.set)}, {"seq_len", m.seq_len}, {"peak", m.peak}});
  return p;
}

}  // namespace ulysses::plan
