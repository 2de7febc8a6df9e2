#include "train/placement.hpp"

#include <mpi.h>

#include <algorithm>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

#include "core/gpu_fabric.hpp"
#include "core/log.hpp"
#include "dist/check_mpi.hpp"
#include "dist/mpi_world.hpp"
#include "train/all_ranks.hpp"
#include "train/device.hpp"

namespace ulysses::train {
namespace {

// The lowest world rank on this machine: the ranks that MPI_COMM_TYPE_SHARED groups share memory, whatever the
// environment variables they inherited say.
int machine_leader() {
  int rank = 0, leader = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm shared = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  CHECK_MPI(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, shared));
  MPI_Comm_free(&shared);
  return leader;
}

// Every rank's view of where it runs (host, SLURM_NODEID, the launcher's local rank), gathered so all ranks
// hold the table.
std::vector<RankSelf> gather_rank_selves(comm::Communicator& world) {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  const RankSelf self = rank_self_from_env(std::string(name, static_cast<std::size_t>(len)));
  const std::vector<std::string> hosts = gather_text(world, self.host);
  torch::Tensor ids = torch::tensor({self.node, self.local_rank, machine_leader()}, torch::kInt);   // [3]
  if (world.size() > 1) ids = world.all_gather(ids);                                                 // [world * 3]
  std::vector<RankSelf> out;
  for (int r = 0; r < world.size(); ++r)
    out.push_back({hosts[static_cast<std::size_t>(r)], ids[3 * r].item<int>(), ids[3 * r + 1].item<int>(),
                   ids[3 * r + 2].item<int>()});
  return out;
}

// Before NCCL's init, which would fail late and cryptically: one GPU per rank, and the NCCL found at run time.
// Every rank takes part (CPU ranks give no bus id); true when a rank's check failed (bad_input_on_any_rank).
bool bad_gpus_for_nccl(const Topology& topo, comm::Communicator& world, int rank, const c10::Device& device,
                       comm::Backend backend) {
  std::vector<std::string> nodes;
  for (int g = 0; g < topo.world(); ++g)
    nodes.push_back(fmt::format("node {} ({})", topo.place(g).node, topo.place(g).host));
  const std::vector<std::string> gpus = gather_text(world, device_bus_id(device));
  std::string newer;
  if (bad_input_on_any_rank(world, rank, [&] {
        if (backend != comm::Backend::kNccl) return;
        check_one_rank_per_gpu(nodes, gpus);
        newer = comm::check_nccl_at_run_time();
      }))
    return true;
  if (rank == 0 && !newer.empty()) log_info("{}", newer);
  return false;
}

}  // namespace

std::optional<Placement> place_ranks(const TrainOptions& o, const dist::ProcessGroups& groups,
                                     comm::Communicator& world) {
  const std::vector<RankSelf> selves = gather_rank_selves(world);
  std::optional<Topology> placed;
  std::optional<c10::Device> device;
  std::optional<comm::Backend> backend;
  std::optional<model::Precision> precision;
  if (bad_input_on_any_rank(world, groups.rank(), [&] {
        placed.emplace(selves, o.island_size);
        device = choose_device(o.device, placed->place(groups.rank()).local_rank);
        backend = comm::choose_backend(o.comm, *device);
        int granted = MPI_THREAD_SINGLE;
        MPI_Query_thread(&granted);
        dist::check_thread_level(granted,
                                 dist::required_thread_level(device->is_cuda(), *backend == comm::Backend::kNccl),
                                 fmt::format("--device {} --comm {}", device->str(), comm::backend_name(*backend)));
        precision = ulysses::plan::dtype_plan(o.memory).precision;
      }))
    return std::nullopt;
  // The NVLink islands as the GPUs report them (GB200 NVL72), where they do, before the SP groups are checked.
  const std::string island_note = placed->measure_islands(gather_text(world, gpu_fabric_id(device_bus_id(*device))));
  if (bad_input_on_any_rank(world, groups.rank(),
                            [&] { check_sp_within_islands(groups.layout(), *placed, o.allow_sp_across_islands); }))
    return std::nullopt;
  if (groups.rank() == 0 && !island_note.empty()) log_info("warning: {}", island_note);
  if (groups.rank() == 0 && !placed->local_rank_warning().empty())
    log_info("warning: {}", placed->local_rank_warning());
  if (bad_gpus_for_nccl(*placed, world, groups.rank(), *device, *backend)) return std::nullopt;
  const int ranks_here = placed->ranks_on_node(placed->place(groups.rank()).node);
  at::set_num_threads(o.threads > 0 ? o.threads
                                    : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here));
  // A dry run touches no GPU (no context, no NCCL communicator): its groups are MPI ones, never used for tensors.
  if (!o.dry_run) use_device(*device);
  const std::optional<double> peak =
      o.peak_tflops > 0  ? std::optional<double>(o.peak_tflops)
      : device->is_cuda() ? known_peak_tflops(device_name(*device), *precision != model::Precision::kFp32)
                          : std::nullopt;
  return Placement{std::move(*placed), *device, *backend, *precision, peak};
}

}  // namespace ulysses::train
