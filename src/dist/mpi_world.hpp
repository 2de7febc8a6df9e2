// The MPI world of one process, and how a failure on one rank ends every rank.
//
// MpiWorld initializes MPI asking for MPI_THREAD_MULTIPLE (the trainer then checks the level granted,
// MPI_Query_thread, against what its run needs: required_thread_level) and finalizes MPI when destroyed. run_guarded wraps a tool's body so that an
// exception on any rank prints one "[rank r] error: …" line and calls MPI_Abort: no peer is left
// waiting forever in a collective. Typical main:
//
//   int main(int argc, char** argv) {
//     ulysses::dist::MpiWorld world(argc, argv);
//     return ulysses::dist::run_guarded(world, [&] { check_world_size(world.size()); …; return 0; });
//   }
//
// Deliberately absent: sub-communicators (process_groups.hpp), anything about tensors (comm/).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

namespace ulysses::dist {

// How long MPI_Init may take before this process ends with one line saying so (exit 1): ULYSSES_INIT_TIMEOUT
// seconds, 600 when unset or empty, 0 for no limit. A rank that ends before joining (its own line says why) otherwise
// leaves its peers waiting in MPI_Init for ever (MPICH's Hydra does not end them).
inline constexpr const char* kInitTimeoutVariable = "ULYSSES_INIT_TIMEOUT";
inline constexpr std::chrono::seconds kDefaultInitTimeout{600};

class MpiWorld {
 public:
  // MPI_Init_thread(MULTIPLE) within kInitTimeoutVariable's limit; aborts if MPI offers less than FUNNELED
  MpiWorld(int& argc, char**& argv);
  ~MpiWorld();                         // MPI_Finalize
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// The MPI thread level a run uses. CPU tensors: MPI only from the main thread (CPU autograd runs backward on
// the caller's thread): FUNNELED. CUDA tensors over MPI: the all-to-all backward runs on LibTorch's CUDA
// autograd thread while the main thread waits in backward(): SERIALIZED. NCCL: the watchdog thread calls
// MPI_Abort while the main thread may be inside an MPI collective: MULTIPLE.
int required_thread_level(bool cuda_tensors, bool nccl_watchdog);
std::string_view thread_level_name(int level);   // "MPI_THREAD_SERIALIZED", …

// Throws BadInput unless `granted` ≥ `required`, naming both and what needs it (`why`, e.g. "--device cuda
// --comm mpi").
void check_thread_level(int granted, int required, std::string_view why);

// Throws BadInput when the MPI world size differs from what the launch asked for: `expected` (e.g. a
// --world flag) when given, otherwise SLURM_NTASKS when set. Catches `srun --mpi=none`, which starts
// N independent size-1 worlds that would each train alone and exit 0.
void check_world_size(int mpi_size, std::optional<int> expected = std::nullopt);

// Prints "[rank r] message" on stderr and ends every rank with `code` (MPI_Abort on MPI_COMM_WORLD), one line per
// job: ranks other than 0 wait 2 s before printing, so an error every rank meets is said once, by rank 0, and
// MPI_Abort's own text (MPICH: "Abort(2) on node …") is not printed. Before MPI_Init or after MPI_Finalize it
// ends only this process, with the same code. Should MPI_Abort not have ended the process 10 s after the line
// (called from a thread while another holds MPI), the rank _Exits itself.
[[noreturn]] void abort_all(int code, std::string_view message);

// Runs body and returns its exit code. An exception prints "[rank r] error: …" (BadInput with its
// hint) and gives kExitBadInput (2) for BadInput, kExitFailure (1) otherwise: with more than one
// rank through abort_all (every rank ends), with one rank by returning the code.
int run_guarded(const MpiWorld& world, const std::function<int()>& body);

}  // namespace ulysses::dist
