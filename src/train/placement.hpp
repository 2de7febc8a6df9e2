// Where a run's ranks are and what each computes on: the topology (nodes, NVLink islands), this rank's device, the
// collectives' backend and the precision, checked on every rank before any communicator or model is made. A bad one
// ends every rank with exit 2 and the first failing rank's line (all_ranks.hpp), without MPI_Abort (srun shows 2).
#pragma once

#include <optional>

#include <c10/core/Device.h>

#include "comm/backend.hpp"
#include "comm/communicator.hpp"
#include "core/topology.hpp"
#include "dist/process_groups.hpp"
#include "model/precision.hpp"
#include "train/options.hpp"

namespace ulysses::train {

struct Placement {
  Topology topo;
  c10::Device device;                   // this rank's (--device), current for its thread unless a dry run
  comm::Backend backend;                // --comm on that device
  model::Precision precision;
  std::optional<double> peak_tflops;    // per device, for MFU: --peak-tflops or the GPU's known peak
};

// Collective over `world`. Also sets the intra-op threads (--threads, or the cores shared by the node's ranks) and,
// unless --dry-run, makes the device current. nullopt: a rank's input was bad (its line printed; exit 2).
std::optional<Placement> place_ranks(const TrainOptions& o, const dist::ProcessGroups& groups,
                                     comm::Communicator& world);

}  // namespace ulysses::train
