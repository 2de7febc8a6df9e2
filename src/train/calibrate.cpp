#include "train/calibrate.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/checksum.hpp"
#include "core/launch_env.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "model/precision.hpp"
#include "plan/calibration.hpp"
#include "plan/memory_model.hpp"
#include "train/device.hpp"

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

// Two sequences of S random tokens, one document each: what a calibration run trains on.
void write_random_dataset(const std::filesystem::path& dir, std::int64_t S, std::int64_t vocab) {
  std::filesystem::create_directories(dir);
  constexpr std::int64_t kSequences = 2;
  shard::ShardWriter w(dir / "shard-00000.h5", {S, 1, 64, 0, false}, kSequences);
  std::mt19937 rng(static_cast<std::uint32_t>(S));
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kSequences * S));   // [2, S]
  for (auto& t : ids) t = token(rng);
  const std::vector<shard::SequenceMeta> metas(kSequences, {static_cast<std::int32_t>(S), {0}});
  w.append(ids, {}, metas);
  w.close();
  const auto path = dir / "shard-00000.h5";
  shard::Manifest m;
  m.seq_len = S, m.sp = 1, m.alignment = 64, m.vocab_size = vocab, m.max_token_id = vocab - 1, m.policy = "pad";
  m.command = "ulysses-train --calibrate-memory", m.created_by = "ulysses-train --calibrate-memory";
  m.stats = {{"sequences", kSequences}};
  m.shards = {{"shard-00000.h5", "train", kSequences, static_cast<std::int64_t>(std::filesystem::file_size(path)),
               xxh3_file_hex(path)}};
  shard::write_manifest(m, dir / "manifest.json");
}

// The environment of a calibration run: this one's, without what would make the child join our MPI job or read
// our Slurm step (it is a singleton of its own).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    bool launcher = false;
    for (const char* prefix : kLauncherPrefixes) launcher = launcher || v.starts_with(prefix);
    if (!launcher) env.emplace_back(v);
  }
  return env;
}

// A real two-step training run of this binary (a child process: its own peak, as a run's metrics report it) on
// `data` with these flags, saving no checkpoint (one of an 8B model is ~96 GB) and not refused by the plan it
// calibrates; the peak bytes: the allocator's high-water mark on CUDA, the process's peak RSS on CPU.
std::int64_t measure(const TrainOptions& o, const std::filesystem::path& config, const plan::MemoryFlags& flags,
                     const std::filesystem::path& data, const std::filesystem::path& run, int threads) {
  std::vector<std::string> args = {"/proc/self/exe", "--data", data.string(), "--model-config", config.string(),
                                   "--output", run.string(), "--steps", "2", "--save-every", "-1", "--lr", "1e-4",
                                   "--ignore-memory-plan", "--threads", std::to_string(threads), "--device", o.device,
                                   "--precision", flags.precision, "--sharding", flags.sharding};
  if (flags.activation_checkpointing) args.push_back("--activation-checkpointing");
  if (flags.tiled_mlp) args.push_back("--tiled-mlp");
  if (flags.logits_chunk_tokens > 0)
    for (const std::string& a : {std::string("--logits-chunk-tokens"), std::to_string(flags.logits_chunk_tokens)})
      args.push_back(a);
  const std::vector<std::string> env = child_environment();
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  argv.push_back(nullptr), envp.push_back(nullptr);
  const std::string log = run.string() + ".log";
  const pid_t parent = getpid();
  const pid_t pid = fork();
  ULY_CHECK(pid >= 0, "fork: {}", std::strerror(errno));
  if (pid == 0) {   // the child: only exec (and the redirection) between fork and exec; it ends when we do
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);   // we ended before it asked
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, STDERR_FILENO), dup2(fd, STDOUT_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream metrics(run / "metrics.jsonl");
  double peak_mib = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    peak_mib = std::max(peak_mib, j.contains("peak_gpu_mib") ? j["peak_gpu_mib"].get<double>()
                                                             : j["peak_rss_mib"].get<double>());
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || peak_mib <= 0) {
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {}), last;
    for (std::stringstream lines(text); std::getline(lines, text);) last = text;
    throw std::runtime_error(fmt::format("the calibration run at {} failed (status {}): {}", run.string(), status, last));
  }
  return static_cast<std::int64_t>(peak_mib * (1 << 20));
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
  const arch::ModelConfig c = arch::read_model_config(config_path, o.rope);
  if (c.moe.enabled())   // the factors are of dense layers' tensors; a routed MLP's are counted (plan/memory_model.cpp)
    throw BadInput(fmt::format("--calibrate-memory: {} is a mixture of experts ({} experts); a profile is measured on "
                               "a dense model", config_path.string(), c.moe.experts),
                   "pass a small dense config of the family's attention (e.g. a Qwen3 or Llama of the same hidden "
                   "size); the planner counts the routed MLP itself and uses the profile for the rest");
  const std::vector<std::int64_t> lengths = parse_lengths(o.calibrate_lengths);
  const c10::Device device = choose_device(o.device, 0);
  const std::string& precision = o.memory.precision;
  static_cast<void>(ulysses::plan::precision_from_name(precision));   // BadInput for an unknown name, before any run
  const std::int64_t chunk = std::max<std::int64_t>(4, lengths.front() / 8);   // several chunks at every length
  const int threads = o.threads > 0 ? o.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  plan::Profile base;
  base.cuda = device.is_cuda();
  base.name = fmt::format("{} {}", device_name(device), o.memory.precision);
  base.source = fmt::format("ulysses-train --calibrate-memory on {} ({}), {}, model {}, lengths {}", host,
                            device_name(device), today(), config_path.string(), o.calibrate_lengths);
  const auto work = std::filesystem::temp_directory_path() / fmt::format("ulysses-calibrate-{}", getpid());
  std::vector<plan::Measurement> points;
  try {
    for (std::int64_t S : lengths) write_random_dataset(work / fmt::format("data-{}", S), S, c.vocab_size);
    for (plan::CalibrationSet set : plan::kCalibrationSets)
      for (std::int64_t S : lengths) {
        const plan::MemoryFlags flags = plan::calibration_flags(set, precision, chunk);
        const auto run = work / fmt::format("run-{}-{}", plan::calibration_set_name(set), S);
        points.push_back({set, S, measure(o, config_path, flags, work / fmt::format("data-{}", S), run, threads)});
        log_info("calibrate {:>12} S = {:>7}: peak {}", plan::calibration_set_name(set), S,
                 human_bytes(static_cast<std::uint64_t>(points.back().peak)));
      }
  } catch (...) {
    std::filesystem::remove_all(work);
    throw;
  }
  std::filesystem::remove_all(work);
  const plan::Profile p = plan::fit_profile(c, points, precision, chunk, base);
  log_info("profile \"{}\": saved {:.3f}, work {:.3f}, mlp {:.3f}, loss {:.3f}, fixed {} ({})", p.name,
           p.saved_factor, p.work_factor, p.mlp_factor, p.loss_factor, human_bytes(static_cast<std::uint64_t>(p.cuda ? p.device_fixed : p.host_fixed)),
           p.cuda ? "device" : "process");
  for (const plan::Measurement& m : points) {
    const plan::Breakdown b =
        plan::predict(c, plan::Layout{}, plan::resolve(plan::calibration_flags(m.set, precision, chunk), c, 1), p, m.seq_len);
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
