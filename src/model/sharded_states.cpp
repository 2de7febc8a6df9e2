#include "model/sharded_states.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/stack.h>

#include "core/error.hpp"
#include "model/host_buffers.hpp"

namespace ulysses::model {
namespace {

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

void ShardedStates::group_parameters(const StateDtypes& dtypes) {
  const plan::StateLayout layout = plan::state_layout(params_);
  for (const auto& g : layout.groups)
    groups_.push_back({g.name, g.matrix ? dtypes.matrices : dtypes.others, g.decay, g.trained, g.numel, 0, {}, {},
                       g.params});
  for (const auto& u : layout.units) units_.push_back({u.name, u.params, u.groups});
  for (const auto& at : layout.places) places_.push_back({at.group, at.offset});
  for (int i = 0; i < static_cast<int>(params_.size()); ++i) index_[params_[i].name] = i;
}

ShardedStates::ShardedStates(const std::vector<Parameter>& params, const StateDtypes& dtypes,
                             const StatePlacement& sharding, const c10::Device& device, bool prefetch)
    : params_(params), shard_group_(sharding.shard_group), replica_group_(sharding.replica_group),
      gather_group_(sharding.gather_group ? sharding.gather_group : sharding.shard_group), reduce_dtype_(dtypes.reduce),
      device_(device), offload_(sharding.offload_optimizer), offload_params_(sharding.offload_params) {
  ULY_CHECK(shard_group_ != nullptr, "ShardedStates needs a shard group");
  ULY_CHECK(offload_ || !offload_params_, "parameter offload needs optimizer offload (the copies come from its masters)");
  ULY_CHECK(gather_group_->size() == shard_group_->size() && gather_group_->rank() == shard_group_->rank(),
            "the gather group (rank {} of {}) must be the shard group's ranks (rank {} of {})", gather_group_->rank(),
            gather_group_->size(), shard_group_->rank(), shard_group_->size());
  group_parameters(dtypes);
  const std::int64_t W = shard_group_->size();
  // offload: the masters' memory, of exactly their bytes; every copy in or out of it blocks (host_buffers.hpp)
  std::optional<HostBuffers> host;
  if (offload_) host.emplace(device_, /*keep=*/false);
  if (offload_) grad_host_.emplace(HostBuffers::for_copies(device_));
  if (offload_params_) params_host_.emplace(device_, /*keep=*/false);
  for (Group& g : groups_) {
    g.shard_numel = (g.numel + W - 1) / W;
    if (g.trained) {
      g.master = host ? host->take({g.shard_numel}, torch::kFloat).zero_()
                      : torch::zeros({g.shard_numel}, torch::dtype(torch::kFloat).device(device_));
      g.master.requires_grad_(true);
    }
    if (offload_params_) g.compute = params_host_->take({g.shard_numel}, g.gather_dtype).zero_();
    else if (offload_ || !g.trained)
      g.compute = torch::zeros({g.shard_numel}, torch::dtype(g.gather_dtype).device(device_));
  }
  if (offload_ && device_.is_cuda())   // the gradient shards' page-locked buffers, kept for the first backward
    for (const Group& g : groups_)
      if (g.trained) static_cast<void>(grad_host_->take({g.shard_numel}, torch::kFloat));
  if (prefetch) side_ = std::make_unique<SideStream>(device_);
}

void ShardedStates::refresh() {
  drop_prefetched();   // their all-gathers read the device copies about to change
  if (params_host_) params_host_->wait_for_copies();   // copies over of the host copies may still be in flight
  torch::NoGradGuard no_grad;
  if (offload_)
    for (Group& g : groups_)
      if (g.trained) g.compute.copy_(g.master.detach());
  stale_ = false;
}

void ShardedStates::sum_over(comm::Communicator& group, torch::Tensor& t) const {
  if (t.device() == device_) {
    group.all_reduce_sum(t);
    return;
  }
  torch::Tensor on_device = t.to(device_);   // NCCL reduces device memory only
  group.all_reduce_sum(on_device);
  t.copy_(on_device);
}

int ShardedStates::unit(const std::string& name) const {
  for (int u = 0; u < static_cast<int>(units_.size()); ++u)
    if (units_[u].name == name) return u;
  ULY_CHECK(false, "no sharded unit named {}", name);
  return -1;
}

const ShardedStates::Place& ShardedStates::place(const std::string& name) const {
  auto it = index_.find(name);
  ULY_CHECK(it != index_.end(), "{} is not a sharded parameter", name);
  return places_[static_cast<std::size_t>(it->second)];
}

std::vector<torch::Tensor> ShardedStates::gather_groups(int unit, const std::vector<torch::Tensor>& into,
                                                        const std::vector<torch::Tensor>& staged) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;   // per group of the unit: [numel] in its gather dtype
  for (std::size_t k = 0; k < units_[unit].groups.size(); ++k) {
    const Group& g = groups_[units_[unit].groups[k]];
    // [n]: in host memory with offload_params
    const torch::Tensor source = offload_ || !g.trained ? g.compute : g.master.detach();
    torch::Tensor all;                                                       // [W*n]
    if (world() == 1) {   // a copy (a cast, or one over from host memory) into the buffer, else none where it can
      all = into.empty() ? source.to(device_, g.gather_dtype, /*non_blocking=*/true)
                         : into[k].copy_(source, /*non_blocking=*/true);
    } else {
      torch::Tensor shard = source;   // [n] on the device, in the gather dtype
      if (stages()) {
        shard = staged.empty() ? torch::empty({g.shard_numel}, torch::dtype(g.gather_dtype).device(device_))
                               : staged[k];
        shard.copy_(source, /*non_blocking=*/true);
      } else if (!offload_ && g.trained) {
        shard = source.to(g.gather_dtype);
      }
      all = into.empty() ? gather_group_->all_gather(shard) : into[k];
      if (!into.empty()) gather_group_->all_gather_into(shard, all);
    }
    flat.push_back(all.narrow(0, 0, g.numel));
  }
  return flat;
}

void ShardedStates::prefetch(const std::vector<int>& units) {
  if (!side_) return;
  if (stale_) refresh();
  for (int u : units) {
    if (ahead_.count(u) > 0) continue;
    std::vector<torch::Tensor> reads, into, staged;   // the shards the all-gathers send; the buffers [W*n] they fill;
                                                      // the device shards [n] offloaded ones are copied into
    for (int gi : units_[u].groups) {
      const Group& g = groups_[gi];
      reads.push_back(offload_ || !g.trained ? g.compute : g.master);   // host copies: not the allocator's (skipped)
      const auto on_device = torch::dtype(g.gather_dtype).device(device_);
      into.push_back(SideStream::unfilled(torch::empty({g.shard_numel * world()}, on_device)));
      if (stages()) staged.push_back(SideStream::unfilled(torch::empty({g.shard_numel}, on_device)));
    }
    reads.insert(reads.end(), staged.begin(), staged.end());   // not reused before the side stream is done with them
    ahead_[u] = side_->launch([this, u, &into, &staged] { return gather_groups(u, into, staged); }, reads);
  }
}

void ShardedStates::drop_prefetched() {
  for (auto& [unit, ahead] : ahead_) static_cast<void>(ahead.take());
  ahead_.clear();
}

std::vector<torch::Tensor> ShardedStates::gather(int unit) {
  if (stale_) refresh();
  std::vector<torch::Tensor> flat;
  if (auto it = ahead_.find(unit); it != ahead_.end()) {
    flat = it->second.take();
    ahead_.erase(it);
    ++taken_ahead_;
  } else {
    flat = gather_groups(unit);
  }
  std::map<int, torch::Tensor> of_group;   // group -> [numel]
  for (std::size_t k = 0; k < flat.size(); ++k) of_group[units_[unit].groups[k]] = flat[k];
  std::vector<torch::Tensor> out;
  for (int i : units_[unit].params) {
    const Place& at = places_[i];
    out.push_back(of_group[at.group].narrow(0, at.offset, numel_of(params_[i].shape)).view(params_[i].shape));
  }
  return out;
}

std::vector<bool> ShardedStates::trained(int unit) const {
  std::vector<bool> out;
  for (int i : units_[unit].params) out.push_back(groups_[places_[i].group].trained);
  return out;
}

std::vector<torch::Tensor> ShardedStates::placeholders(int unit) const {
  std::vector<torch::Tensor> out;
  for (int i : units_[unit].params)
    out.push_back(torch::zeros({}, torch::dtype(groups_[places_[i].group].gather_dtype).device(device_))
                      .expand(params_[i].shape));
  return out;
}

void ShardedStates::add_gradients(int unit, const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  const Unit& u = units_[unit];
  ULY_CHECK(grads.size() == u.params.size(), "unit {}: {} gradients for {} parameters", u.name, grads.size(),
            u.params.size());
  for (int gi : u.groups) {
    Group& g = groups_[gi];
    if (!g.trained) continue;
    torch::Tensor flat =   // [W*n] in the reduce dtype
        torch::zeros({g.shard_numel * world()}, torch::dtype(reduce_dtype_).device(device_));
    for (std::size_t k = 0; k < grads.size(); ++k) {
      const Place& at = places_[u.params[k]];
      if (at.group == gi && grads[k].defined())
        flat.narrow(0, at.offset, grads[k].numel()).copy_(grads[k].reshape(-1));
    }
    torch::Tensor mine = (world() > 1 ? shard_group_->reduce_scatter_sum(flat) : flat).to(torch::kFloat);   // [n]
    if (offload_ && !g.master.grad().defined()) {   // the step's first: copied (blocking) into page-locked memory
      g.master.mutable_grad() = grad_host_->take({g.shard_numel}, torch::kFloat).copy_(mine);
      continue;
    }
    if (offload_) mine = mine.to(g.master.device());   // a later one (accumulation): summed in host memory
    if (g.master.grad().defined()) g.master.mutable_grad().add_(mine);
    else g.master.mutable_grad() = mine;
  }
}

void ShardedStates::finish_gradients(double global_count) {
  drop_prefetched();   // the optimizer step comes next and changes the shards
  torch::NoGradGuard no_grad;
  for (Group& g : groups_) {
    if (!g.trained) continue;
    if (!g.master.grad().defined()) g.master.mutable_grad() = torch::zeros_like(g.master);
    torch::Tensor& grad = g.master.mutable_grad();
    if (replica_group_ && replica_group_->size() > 1) sum_over(*replica_group_, grad);
    grad.div_(global_count);
  }
}

double ShardedStates::grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const Group& g : groups_)
    if (g.trained && g.master.grad().defined()) grads.push_back(g.master.grad());
  if (grads.empty()) return 0;
  // one fp32 norm per shard (no temporary of the shard's size), their squares summed in float64 over the group
  torch::Tensor squares = torch::stack(at::_foreach_norm(grads, 2)).to(torch::kFloat64).pow(2).sum().reshape({1});
  if (world() > 1) sum_over(*shard_group_, squares);
  const double norm = std::sqrt(squares.item<double>());
  if (max_norm > 0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1)
      for (Group& g : groups_)
        if (g.trained && g.master.grad().defined()) g.master.mutable_grad().mul_(coef);
  }
  return norm;
}

std::pair<std::int64_t, std::int64_t> ShardedStates::overlap(const Place& at, std::int64_t begin,
                                                              std::int64_t count) const {
  const std::int64_t n = groups_[at.group].shard_numel, mine = n * shard_group_->rank();   // this rank's shard
  return {std::max(mine, at.offset + begin), std::min(mine + n, at.offset + begin + count)};
}

std::pair<std::int64_t, std::int64_t> ShardedStates::held(const std::string& name) const {
  const Place& at = place(name);
  const auto [lo, hi] = overlap(at, 0, numel_of(params_[index_.at(name)].shape));
  return lo < hi ? std::pair{lo - at.offset, hi - lo} : std::pair{std::int64_t{0}, std::int64_t{0}};
}

void ShardedStates::load(const std::string& name, std::int64_t first, const torch::Tensor& values,
                         const std::function<torch::Tensor(const Group&)>& shard_of) {
  const Place& at = place(name);
  const std::int64_t numel = numel_of(params_[index_.at(name)].shape);
  ULY_CHECK(first >= 0 && first + values.numel() <= numel, "{}: elements [{}, {}) of a parameter of {}", name, first,
            first + values.numel(), numel);
  const auto [lo, hi] = overlap(at, first, values.numel());
  if (lo >= hi) return;
  const Group& g = groups_[at.group];
  torch::NoGradGuard no_grad;
  shard_of(g).narrow(0, lo - g.shard_numel * shard_group_->rank(), hi - lo)
      .copy_(values.reshape(-1).narrow(0, lo - at.offset - first, hi - lo));
  stale_ = true;
}

void ShardedStates::for_each_whole(const std::function<torch::Tensor(const Group&)>& shard_of,
                                   const std::function<void(const std::string&, const torch::Tensor&)>& fn) const {
  torch::NoGradGuard no_grad;
  for (const Unit& u : units_)
    for (int gi : u.groups) {
      const Group& g = groups_[gi];
      if (!g.trained) continue;
      const torch::Tensor shard = shard_of(g).detach().to(device_, torch::kFloat).contiguous();   // [n] on the device
      const torch::Tensor all = world() > 1 ? gather_group_->all_gather(shard) : shard;   // [W*n]
      for (int i : g.slots)
        fn(params_[i].name, all.narrow(0, places_[i].offset, numel_of(params_[i].shape)).view(params_[i].shape));
    }
}

checkpoint::ShardLayout ShardedStates::layout() const {
  checkpoint::ShardLayout l;
  l.world = world();
  for (const Group& g : groups_) {
    if (!g.trained) continue;
    checkpoint::ShardLayout::Group out{g.name, g.numel, g.shard_numel, {}};
    for (int i : g.slots) out.parameters.push_back({params_[i].name, params_[i].shape, places_[i].offset});
    l.groups.push_back(std::move(out));
  }
  return l;
}

std::vector<ShardedStates::Parameter> ShardedStates::whole_order() const {
  std::vector<Parameter> out;
  for (const Unit& u : units_)
    for (int gi : u.groups)
      if (groups_[gi].trained)
        for (int i : groups_[gi].slots) out.push_back(params_[i]);
  return out;
}

}  // namespace ulysses::model
