#include "train/checkpoint.hpp"

#include <fstream>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.hpp"
#include <fmt/ranges.h>
#include "core/output_dir.hpp"
#include "io/checkpoint_format.hpp"
#include "io/safetensors.hpp"

namespace fs = std::filesystem;

namespace ulysses::train {
namespace {

// fp32 tensors → one safetensors file, streamed one tensor at a time.
void write_tensors(const fs::path& path, const NamedTensors& tensors, const std::map<std::string, std::string>& meta) {
  std::vector<st::Writer::Decl> decls;
  for (const auto& [name, t] : tensors) decls.push_back({name, st::DType::kF32, t.sizes().vec()});
  st::Writer writer(path, decls, meta);
  for (const auto& [name, t] : tensors) {
    torch::Tensor host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    writer.write_next(host.data_ptr(), static_cast<std::uint64_t>(host.numel()) * sizeof(float));
  }
  writer.finish();
}

// Copies every named tensor of `file` that `targets` names into it (shape-checked).
void read_tensors(const fs::path& path, const NamedTensors& targets) {
  st::Reader reader(path);
  torch::NoGradGuard no_grad;
  for (const auto& [name, dst] : targets) {
    const st::TensorInfo* info = reader.find(name);
    if (!info) throw BadInput(fmt::format("{}: tensor {} is missing", path.string(), name),
                              "the checkpoint was written for another model");
    if (info->dtype != st::DType::kF32 || info->shape != dst.sizes().vec())
      throw BadInput(fmt::format("{}: tensor {} is {} {}, the model expects F32 {}", path.string(), name,
                                 st::dtype_name(info->dtype), fmt::join(info->shape, "x"), fmt::join(dst.sizes(), "x")));
    torch::Tensor host = torch::empty(dst.sizes(), torch::kFloat32);
    reader.read(*info, host.data_ptr());
    dst.copy_(host);
  }
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, const NamedTensors& weights, const AdamW& optimizer,
                         const TrainerState& state, const RankLayout& layout, const fs::path& model_config,
                         const std::string& architecture, int keep_last) {
  fs::create_directories(root);
  const std::string name = checkpoint::step_dir_name(state.step);
  OutputDir out(root / name, /*overwrite=*/true);
  write_tensors(out.tmp() / checkpoint::kModel, weights, {{"format", "pt"}});
  write_tensors(out.tmp() / checkpoint::kOptimizer, optimizer.state(), {{"steps", std::to_string(optimizer.steps())}});
  nlohmann::json ts = {{"step", state.step}, {"cursor", state.cursor}, {"tokens_seen", state.tokens_seen},
                       {"options", state.options}};
  std::ofstream(out.tmp() / checkpoint::kTrainerState) << ts.dump(2) << "\n";
  fs::copy_file(model_config, out.tmp() / checkpoint::kConfig);
  checkpoint::Manifest m;
  m.step = state.step;
  m.world = layout.world();
  m.sp = layout.sp();
  m.dp = layout.dp();
  m.architecture = architecture;
  for (const char* f : {checkpoint::kModel, checkpoint::kOptimizer, checkpoint::kTrainerState, checkpoint::kConfig})
    m.files.push_back(checkpoint::file_entry(out.tmp(), f));
  checkpoint::write_manifest(m, out.tmp());
  out.commit();
  checkpoint::set_latest(root, name);
  checkpoint::prune(root, keep_last);
  return root / name;
}

TrainerState load_checkpoint(const fs::path& dir, const NamedTensors& params, AdamW& optimizer) {
  checkpoint::Manifest m = checkpoint::read_manifest(dir);
  read_tensors(dir / checkpoint::kModel, params);
  const fs::path opt_path = dir / checkpoint::kOptimizer;
  st::Reader opt_reader(opt_path);
  NamedTensors opt_state;
  for (const auto& t : opt_reader.tensors()) {
    torch::Tensor host = torch::empty(t.shape, torch::kFloat32);
    if (t.dtype != st::DType::kF32) throw BadInput(fmt::format("{}: {} is not F32", opt_path.string(), t.name));
    opt_reader.read(t, host.data_ptr());
    opt_state.emplace_back(t.name, host);
  }
  auto steps_it = opt_reader.metadata().find("steps");
  if (steps_it == opt_reader.metadata().end())
    throw BadInput(fmt::format("{}: metadata \"steps\" is missing", opt_path.string()));
  optimizer.load_state(opt_state, std::stoll(steps_it->second), opt_path.string());
  std::ifstream in(dir / checkpoint::kTrainerState);
  nlohmann::json ts = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (ts.is_discarded() || !ts.contains("step") || !ts.contains("cursor"))
    throw BadInput(fmt::format("{}: not a valid trainer state", (dir / checkpoint::kTrainerState).string()));
  TrainerState s;
  s.step = ts["step"].get<std::int64_t>();
  s.cursor = ts["cursor"].get<std::uint64_t>();
  s.tokens_seen = ts.value("tokens_seen", std::int64_t{0});
  s.options = ts.value("options", nlohmann::json::object());
  if (s.step != m.step)
    throw BadInput(fmt::format("{}: trainer state step {} disagrees with the manifest's {}", dir.string(), s.step, m.step));
  return s;
}

}  // namespace ulysses::train
