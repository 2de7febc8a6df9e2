#include "train/calibrate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/generated/variable_factories.h>
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/log.hpp"
#include "model/causal_lm.hpp"
#include "model/precision.hpp"
#include "model/weights.hpp"
#include "plan/calibration.hpp"
#include "plan/memory_model.hpp"
#include "train/device.hpp"
#include "train/model_states.hpp"
#include "train/trainer.hpp"

namespace ulysses::train {
namespace {

std::vector<std::int64_t> parse_lengths(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      out.push_back(std::stoll(item));
    } catch (const std::exception&) {
      out.push_back(0);
    }
    if (out.back() < 64 || out.back() % 64 != 0)
      throw BadInput(fmt::format("--calibrate-lengths: \"{}\" is not a multiple of 64 tokens (≥ 64)", item),
                     "write e.g. --calibrate-lengths 1024,2048");
  }
  if (out.size() < 2) throw BadInput("--calibrate-lengths needs two lengths or more", "write e.g. 1024,2048");
  return out;
}

std::int64_t vm_hwm_bytes() {   // this process's peak RSS, /proc/self/status "VmHWM: N kB"
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// One optimizer step of a fresh model with these options on one random sequence of S tokens; the peak bytes.
std::int64_t one_step(const arch::ModelConfig& c, const model::ModelOptions& options, const c10::Device& device,
                      comm::Communicator& world, std::int64_t S) {
  model::CausalLm m(c, SequenceParallel{}, options);
  model::init_weights(m, 1);
  m->to(device);
  ModelStates states(m, world);
  reset_peak_gpu_memory(device);
  const torch::Tensor ids = torch::randint(c.vocab_size, {1, S}, torch::kInt64);   // [1, S]
  const torch::Tensor positions = torch::arange(S, torch::kInt64).view({1, S});
  const model::CausalLmOutput out = m->forward(ids.to(device), positions.to(device), torch::zeros({1, S}, torch::kInt64),
                                               ids.to(device));
  out.loss_sum.backward();
  states.finish_gradients(static_cast<double>(S));
  states.clip(1.0);
  states.step(1e-4);
  synchronize(device);
  if (auto mib = peak_gpu_mib(device)) return static_cast<std::int64_t>(*mib * (1 << 20));
  return vm_hwm_bytes();
}

// On the CPU each point runs in a child of its own (its peak RSS is a fresh process's); on CUDA in place.
std::int64_t measure(const arch::ModelConfig& c, const model::ModelOptions& options, const c10::Device& device,
                     comm::Communicator& world, std::int64_t S, int threads) {
  if (device.is_cuda()) return one_step(c, options, device, world, S);
  int fds[2];
  ULY_CHECK(pipe(fds) == 0, "pipe: {}", std::strerror(errno));
  const pid_t pid = fork();
  ULY_CHECK(pid >= 0, "fork: {}", std::strerror(errno));
  if (pid == 0) {   // the child: no MPI, no exit handlers
    close(fds[0]);
    std::int64_t peak = -1;
    try {
      at::set_num_threads(threads);
      peak = one_step(c, options, device, world, S);
    } catch (const std::exception& e) {
      fmt::print(stderr, "[calibrate] S={}: {}\n", S, e.what());
    }
    [[maybe_unused]] const auto n = write(fds[1], &peak, sizeof peak);
    _exit(peak > 0 ? 0 : 1);
  }
  close(fds[1]);
  std::int64_t peak = -1;
  const auto got = read(fds[0], &peak, sizeof peak);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got != sizeof peak || peak <= 0)
    throw std::runtime_error(fmt::format("calibration step at S = {} failed (child status {})", S, status));
  return peak;
}

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

int run_calibration(const TrainOptions& o, comm::Communicator& world) {
  if (world.size() != 1)
    throw BadInput(fmt::format("--calibrate-memory runs on one rank; this job has {}", world.size()),
                   "run it without mpiexec/srun, or with -n 1");
  const std::filesystem::path config_path = model_config_path(o);
  const arch::ModelConfig c = arch::read_model_config(config_path);
  const std::vector<std::int64_t> lengths = parse_lengths(o.calibrate_lengths);
  const c10::Device device = choose_device(o.device, 0);
  use_device(device);
  const model::Precision precision = model::precision_from_name(o.memory.precision);
  const bool bf16 = precision == model::Precision::kBf16;
  const std::int64_t chunk = std::max<std::int64_t>(4, lengths.front() / 8);   // several chunks at every length
  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  plan::Profile base;
  base.cuda = device.is_cuda();
  base.name = fmt::format("{} {}", device_name(device), o.memory.precision);
  base.source = fmt::format("ulysses-train --calibrate-memory on {} ({}), {}, model {}, lengths {}", host,
                            device_name(device), today(), config_path.string(), o.calibrate_lengths);
  std::vector<plan::Measurement> points;
  for (plan::CalibrationSet set : plan::kCalibrationSets) {
    const plan::Features f = plan::resolve(plan::calibration_flags(set, bf16, chunk), c, 1);
    const model::ModelOptions options = model::ModelOptions()
                                            .precision(precision)
                                            .activation_checkpointing(f.activation_checkpointing)
                                            .mlp_tile_tokens(f.mlp_tile_tokens)
                                            .logits_chunk_tokens(f.logits_chunk_tokens);
    for (std::int64_t S : lengths) {
      points.push_back({set, S, measure(c, options, device, world, S, threads)});
      log_info("calibrate {:>12} S = {:>7}: peak {}", plan::calibration_set_name(set), S,
               human_bytes(static_cast<std::uint64_t>(points.back().peak)));
    }
  }
  const plan::Profile p = plan::fit_profile(c, points, bf16, chunk, base);
  log_info("profile \"{}\": saved {:.3f}, work {:.3f}, loss {:.3f}, fixed {} ({})", p.name, p.saved_factor,
           p.work_factor, p.loss_factor, human_bytes(static_cast<std::uint64_t>(p.cuda ? p.device_fixed : p.host_fixed)),
           p.cuda ? "device" : "process");
  for (const plan::Measurement& m : points) {
    const plan::Breakdown b =
        plan::predict(c, plan::Layout{}, plan::resolve(plan::calibration_flags(m.set, bf16, chunk), c, 1), p, m.seq_len);
    const std::int64_t fitted = p.cuda ? b.device() : b.device() + b.host();
    log_info("  {:>12} S = {:>7}: measured {}, fitted {} ({:+.1f}%)", plan::calibration_set_name(m.set), m.seq_len,
             human_bytes(static_cast<std::uint64_t>(m.peak)), human_bytes(static_cast<std::uint64_t>(fitted)),
             100.0 * static_cast<double>(fitted - m.peak) / static_cast<double>(m.peak));
  }
  plan::write_profile(o.calibrate_memory, p);
  log_info("wrote {} — use it: ulysses-plan --profile {}, ulysses-train --memory-profile {}", o.calibrate_memory.string(),
           o.calibrate_memory.string(), o.calibrate_memory.string());
  return kExitOk;
}

}  // namespace ulysses::train
