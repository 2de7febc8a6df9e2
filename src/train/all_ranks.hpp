// Decisions every rank of a run takes together, over the world's MPI communicator (CPU tensors): each function is a
// collective, so every rank calls it at the same point, and all of them get the same answer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace ulysses::train {

// Every rank's `mine` (at most MPI_MAX_PROCESSOR_NAME bytes kept), in rank order.
std::vector<std::string> gather_text(comm::Communicator& world, const std::string& mine);

// True when any rank passes true (one signalled rank stops all).
bool any_rank(bool flag, comm::Communicator& world);

double max_over_ranks(double value, comm::Communicator& world);

// Runs check on every rank; when it throws BadInput on any rank, the lowest such rank prints its line and every rank
// learns of it (true): they all exit 2 together instead of aborting or waiting in a collective. From then on a rank
// ignores SIGTERM: under `srun --kill-on-bad-exit` the first rank to exit makes srun terminate the others, which would
// turn their exit 2 into 143 (and the job's code with it).
bool bad_input_on_any_rank(comm::Communicator& world, int rank, const std::function<void()>& check);

}  // namespace ulysses::train
