#include "train/checkpoint.hpp"

#include <fstream>
#include <optional>

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

using Part = ModelStates::Part;

// The whole fp32 tensors of one part → one safetensors file, streamed one tensor at a time. Every rank calls it
// (sharded states gather as they go); only the writer opens the file.
void write_part(const fs::path& path, ModelStates& states, Part part, const std::map<std::string, std::string>& meta,
                bool writer) {
  std::optional<st::Writer> out;
  if (writer) {
    std::vector<st::Writer::Decl> decls;
    for (const auto& w : states.whole_list(part)) decls.push_back({w.name, st::DType::kF32, w.shape});
    out.emplace(path, decls, meta);
  }
  states.for_each_whole(part, [&](const std::string&, const torch::Tensor& t) {
    if (!out) return;
    torch::Tensor host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    out->write_next(host.data_ptr(), static_cast<std::uint64_t>(host.numel()) * sizeof(float));
  });
  if (out) out->finish();
}

// Every tensor of one part from `reader`'s file into the states (shape-checked), one whole tensor at a time.
void read_part(const st::Reader& reader, const fs::path& path, ModelStates& states, Part part) {
  for (const auto& w : states.whole_list(part)) {
    const st::TensorInfo* info = reader.find(w.name);
    if (!info) throw BadInput(fmt::format("{}: tensor {} is missing", path.string(), w.name),
                              "the checkpoint was written for another model");
    if (info->dtype != st::DType::kF32 || info->shape != w.shape)
      throw BadInput(fmt::format("{}: tensor {} is {} {}, the model expects F32 {}", path.string(), w.name,
                                 st::dtype_name(info->dtype), fmt::join(info->shape, "x"), fmt::join(w.shape, "x")));
    torch::Tensor host = torch::empty(w.shape, torch::kFloat32);
    reader.read(*info, host.data_ptr());
    states.load_whole(part, w.name, host);
  }
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, ModelStates& states, const TrainerState& state,
                         const RankLayout& layout, const fs::path& model_config, const std::string& architecture,
                         int keep_last, bool writer) {
  const std::string name = checkpoint::step_dir_name(state.step);
  std::optional<OutputDir> out;
  if (writer) {
    fs::create_directories(root);
    out.emplace(root / name, /*overwrite=*/true);
  }
  const fs::path tmp = out ? out->tmp() : fs::path();
  write_part(tmp / checkpoint::kModel, states, Part::kWeights, {{"format", "pt"}}, writer);
  write_part(tmp / checkpoint::kOptimizer, states, Part::kOptimizer,
             {{"steps", std::to_string(states.optimizer().steps())}}, writer);
  if (!writer) return {};
  nlohmann::json ts = {{"step", state.step}, {"cursor", state.cursor}, {"tokens_seen", state.tokens_seen},
                       {"options", state.options}};
  std::ofstream(tmp / checkpoint::kTrainerState) << ts.dump(2) << "\n";
  fs::copy_file(model_config, tmp / checkpoint::kConfig);
  checkpoint::Manifest m;
  m.step = state.step;
  m.world = layout.world();
  m.sp = layout.sp();
  m.dp = layout.dp();
  m.architecture = architecture;
  for (const char* f : {checkpoint::kModel, checkpoint::kOptimizer, checkpoint::kTrainerState, checkpoint::kConfig})
    m.files.push_back(checkpoint::file_entry(tmp, f));
  checkpoint::write_manifest(m, tmp);
  out->commit();
  checkpoint::set_latest(root, name);
  checkpoint::prune(root, keep_last);
  return root / name;
}

TrainerState load_checkpoint(const fs::path& dir, ModelStates& states) {
  checkpoint::Manifest m = checkpoint::read_manifest(dir);
  const fs::path model_path = dir / checkpoint::kModel;
  read_part(st::Reader(model_path), model_path, states, Part::kWeights);
  const fs::path opt_path = dir / checkpoint::kOptimizer;
  const st::Reader opt_reader(opt_path);
  auto steps_it = opt_reader.metadata().find("steps");
  if (steps_it == opt_reader.metadata().end())
    throw BadInput(fmt::format("{}: metadata \"steps\" is missing", opt_path.string()));
  read_part(opt_reader, opt_path, states, Part::kOptimizer);
  states.optimizer().set_steps(std::stoll(steps_it->second));
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
