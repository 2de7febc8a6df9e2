#include "train/all_ranks.hpp"

#include <mpi.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <optional>

#include <torch/csrc/autograd/generated/variable_factories.h>

#include "core/error.hpp"

namespace ulysses::train {

std::vector<std::string> gather_text(comm::Communicator& world, const std::string& mine) {
  constexpr std::int64_t kWidth = MPI_MAX_PROCESSOR_NAME + 1;
  torch::Tensor record = torch::zeros({kWidth}, torch::kUInt8);   // [kWidth] bytes, NUL-terminated
  std::memcpy(record.data_ptr(), mine.data(), std::min<std::size_t>(mine.size(), kWidth - 1));
  const torch::Tensor all = world.size() > 1 ? world.all_gather(record) : record;   // [world * kWidth]
  std::vector<std::string> out;
  for (int r = 0; r < world.size(); ++r) out.emplace_back(static_cast<const char*>(all.data_ptr()) + kWidth * r);
  return out;
}

bool any_rank(bool flag, comm::Communicator& world) {
  torch::Tensor t = torch::tensor({flag ? std::int64_t{1} : std::int64_t{0}});
  if (world.size() > 1) world.all_reduce_sum(t);
  return t.item<std::int64_t>() > 0;
}

double max_over_ranks(double value, comm::Communicator& world) {
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  if (world.size() > 1) t = world.all_gather(t);
  return t.max().item<double>();
}

bool bad_input_on_any_rank(comm::Communicator& world, int rank, const std::function<void()>& check) {
  std::optional<std::string> why;
  try {
    check();
  } catch (const BadInput& e) {
    why = one_line(e);
  }
  if (!any_rank(why.has_value(), world)) return false;   // one number's reduction: it runs before every micro-batch
  torch::Tensor failed = torch::tensor({why ? std::int64_t{1} : std::int64_t{0}});   // [1]
  torch::Tensor all = world.size() > 1 ? world.all_gather(failed) : failed;            // [world]
  const auto first = all.nonzero();                                                    // [failing ranks, 1]
  if (first[0][0].item<std::int64_t>() == rank) fmt::print(stderr, "[rank {}] error: {}\n", rank, *why);
  std::signal(SIGTERM, SIG_IGN);   // exiting 2 anyway, within moments
  return true;
}

}  // namespace ulysses::train
