#include "dist/mpi_world.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/launch_env.hpp"
#include "dist/check_mpi.hpp"

namespace ulysses::dist {
namespace {

// "[rank R] error: … — HINT: …\n" before MPI_Init: the rank as the launcher says it.
std::string rank_line(const BadInput& e) {
  return fmt::format("[rank {}] error: {}\n", launch_rank(this_environment()), one_line(e));
}

// Joining the job may not hang: under Hydra, a rank that ended before MPI_Init (the front's refusal on that rank
// alone, a crash at start) leaves the others waiting in it for ever. After `limit` this process says so and ends.
// The line is made here, before MPI_Init (which may change the environment under a thread reading it).
class InitDeadline {
 public:
  explicit InitDeadline(std::chrono::seconds limit) {
    if (limit.count() <= 0) return;
    const BadInput e(fmt::format("MPI_Init did not finish within {} s: a rank of this launch ended before joining "
                                 "the job or never started, or MPI could not connect the ranks", limit.count()),
                     "the first error line of the other ranks says why (none: check the launcher and its PMI); " +
                         std::string(kInitTimeoutVariable) + "=SECONDS sets this limit (0: none)");
    line_ = rank_line(e);
    try {
      thread_ = std::thread([this, limit] { watch(limit); });
    } catch (const std::system_error&) {   // no thread to spare: MPI_Init goes unwatched, as before
    }
  }
  ~InitDeadline() {   // MPI_Init returned
    {
      std::lock_guard<std::mutex> lock(m_);
      joined_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  InitDeadline(const InitDeadline&) = delete;
  InitDeadline& operator=(const InitDeadline&) = delete;

 private:
  void watch(std::chrono::seconds limit) {
    {
      std::unique_lock<std::mutex> lock(m_);
      if (cv_.wait_for(lock, limit, [this] { return joined_; })) return;
    }
    std::fputs(line_.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(kExitFailure);
  }

  std::string line_;
  std::mutex m_;
  std::condition_variable cv_;
  bool joined_ = false;
  std::thread thread_;
};

std::chrono::seconds init_timeout() {   // unset or empty: the default
  const char* text = std::getenv(kInitTimeoutVariable);
  if (text == nullptr || *text == '\0') return kDefaultInitTimeout;
  char* end = nullptr;
  const long long s = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || s < 0 || s > 1'000'000) {
    std::fputs(rank_line(BadInput(fmt::format("{}='{}' is not a number of seconds", kInitTimeoutVariable,
                                              printable(text)),
                                  fmt::format("0 (no limit) to 1000000; unset, {} s", kDefaultInitTimeout.count())))
                   .c_str(),
               stderr);
    std::exit(kExitBadInput);
  }
  return std::chrono::seconds(s);
}

}  // namespace

MpiWorld::MpiWorld(int& argc, char**& argv) {
  int granted = MPI_THREAD_SINGLE;
  {
    const InitDeadline deadline(init_timeout());
    CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &granted));
  }
  if (granted < MPI_THREAD_FUNNELED)
    abort_all(kExitFailure, fmt::format("error: MPI grants {}, every run needs at least MPI_THREAD_FUNNELED",
                                        thread_level_name(granted)));
  CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size_));
}

MpiWorld::~MpiWorld() { MPI_Finalize(); }

namespace {

std::string plural(int n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

int parse_ntasks(const char* text) {
  char* end = nullptr;
  long n = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || n < 1 || n > 1'000'000)
    throw BadInput(fmt::format("SLURM_NTASKS='{}' is not a positive task count", text),
                   "launch with srun inside a Slurm job, or unset SLURM_NTASKS outside one");
  return static_cast<int>(n);
}

void print_line(int rank, std::string_view message) {
  fmt::print(stderr, "[rank {}] {}\n", rank, message);
  std::fflush(nullptr);   // stdout too: MPI_Abort may not flush it
}

int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace

int required_thread_level(bool cuda_tensors, bool nccl_watchdog) {
  if (nccl_watchdog) return MPI_THREAD_MULTIPLE;
  return cuda_tensors ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED;
}

std::string_view thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "an unknown MPI thread level";
}

void check_thread_level(int granted, int required, std::string_view why) {
  if (granted >= required) return;
  throw BadInput(fmt::format("this MPI grants {} but {} needs {}", thread_level_name(granted), why,
                             thread_level_name(required)),
                 "use an MPI built with thread support (MPICH and Open MPI grant MPI_THREAD_MULTIPLE), or train "
                 "with --device cpu");
}

void check_world_size(int mpi_size, std::optional<int> expected) {
  if (expected) {
    if (*expected != mpi_size)
      throw BadInput(fmt::format("MPI world has {} but --world asks for {}", plural(mpi_size, "rank"),
                                 *expected),
                     fmt::format("launch {} ranks (mpiexec -n {} or srun --mpi=pmi2 -n {})", *expected,
                                 *expected, *expected));
    return;
  }
  const char* ntasks_text = std::getenv("SLURM_NTASKS");
  if (ntasks_text == nullptr) return;
  int ntasks = parse_ntasks(ntasks_text);
  if (ntasks != mpi_size)
    throw BadInput(fmt::format("MPI world has {} but Slurm asked for {} (SLURM_NTASKS={})",
                               plural(mpi_size, "rank"), plural(ntasks, "task"), ntasks),
                   "launch with srun --mpi=pmi2 (srun --mpi=none starts N independent singletons)");
}

constexpr std::chrono::seconds kAbortGrace{10};
constexpr std::chrono::seconds kLowerRankFirst{2};

// MPICH's MPI_Abort prints "Abort(2) on node 1 (rank 1 in comm 0): application called MPI_Abort(...)" from the
// calling process: our line has said what happened, so its stderr goes to /dev/null first.
void silence_stderr() {
  std::fflush(stderr);
  if (const int null = open("/dev/null", O_WRONLY); null >= 0) dup2(null, STDERR_FILENO);
}

void abort_all(int code, std::string_view message) {
  int rank = world_rank_or_minus_one();
  // MPI_Abort from a watchdog thread may wait behind a lock the main thread holds inside MPI, and printing may
  // block on a full pipe: should neither have ended the process after kAbortGrace, this rank ends itself
  // (mpiexec and srun --kill-on-bad-exit then end the others; without it, their watchdogs do).
  if (rank >= 0)
    std::thread([code] {
      std::this_thread::sleep_for(kLowerRankFirst + kAbortGrace);
      std::_Exit(code);
    }).detach();
  // One line per job: an error every rank meets (a flag, a file) is said by rank 0, whose abort ends the others
  // while they wait; a rank that fails alone says it a moment later, with its rank number.
  if (rank > 0) std::this_thread::sleep_for(kLowerRankFirst);
  print_line(rank, message);
  if (rank < 0) std::exit(code);
  // The line is in the pipe to the launcher; MPI_Abort makes it kill every rank, and under load MPICH's hydra
  // was seen to exit before forwarding it (CI: an "exit 2" with an empty stderr). A moment lets it read.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  silence_stderr();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);   // MPI_Abort does not return; this satisfies [[noreturn]] should it ever do so
}

int run_guarded(const MpiWorld& world, const std::function<int()>& body) {
  int code = kExitOk;
  std::string message;
  try {
    return body();
  } catch (const BadInput& e) {
    code = kExitBadInput;
    message = one_line(e);
  } catch (const std::exception& e) {
    code = kExitFailure;
    message = printable(e.what(), 4096);   // library text may quote a file's bytes
  }
  message = "error: " + message;
  if (world.size() > 1) abort_all(code, message);
  print_line(world.rank(), message);
  return code;
}

}  // namespace ulysses::dist
