// ShardedStates: a model's parameters as flat fp32 shards spread over a group of ranks — ZeRO-3 / FSDP
// (FULL_SHARD over every rank; HYBRID_SHARD over the SP group, DP replicas holding the same shards).
//
// Units are what is gathered at once: the embeddings ("model.embed_tokens"), each decoder layer
// ("model.layers.N") and the head ("head": the final norm and lm_head). A unit's parameters fall into at
// most two groups (four with LoRA: frozen ones apart, below), each one flat vector (the parameters in module order,
// padded to a multiple of W):
//   matrices  2-D weights that feed a matmul (the *_proj and lm_head weights): gathered in the compute
//             dtype (bf16 under both bf16 precisions — under amp-bf16 autocast would cast them per use anyway, so
//             the forward is the replicated one bit for bit), weight decay;
//   others    norms, biases and the embedding table: gathered in fp32 (they meet fp32 arithmetic under autocast), or
//             in bf16 under --precision bf16 (the model is bf16: half the gathered bytes); weight decay only for
//             the 2-D embedding (its own unit, so a group never mixes the two).
// Rank r of W holds elements [r·n, (r+1)·n) of each group, n = ceil(numel / W): the fp32 master shard [n],
// its gradient (.grad, fp32) and, in the optimizer, the AdamW moments of the same shape. A frozen group (LoRA's base,
// plan/state_layout.hpp) holds its shard in the gather dtype only (`compute`): no master, gradient or AdamW state;
// its gathered weights need no gradient, it takes none, and checkpoints (for_each_whole, whole_order, layout) leave
// it out.
//
//   gather(unit)          all-gather of each group (in its dtype) → the unit's parameters, in module order,
//                         as views of the gathered buffers; collective over the shard group
//   add_gradients(unit)   the unit's full gradients (any float dtype) → flat in the reduce dtype (fp32, or bf16:
//                         --reduce-dtype) → reduce-scatter over the shard group → added to the master shards'
//                         fp32 .grad; collective
//   finish_gradients      after the last backward of a step: all-reduce over the replica group (hybrid),
//                         divide by the global count (the contract of train/grad_sync.hpp)
//   load / for_each_whole whole named tensors in (this rank keeps its slice) and out (gathered per group)
//
// Optimizer offload (DeepSpeed's offload_optimizer): the masters, their gradients and (so) the AdamW moments
// live in host memory (the masters and the gradient shards page-locked, of exactly their bytes, when the device is
// a GPU: host_buffers.hpp) and AdamW runs there on the CPU; the device keeps one copy of each shard in its gather
// dtype, refreshed from the masters after every change (refresh()). A step's first reduce-scattered gradient of a
// shard is copied straight into its page-locked buffer (kept from step to step on a GPU, as DeepSpeed's pinned
// gradient partitions; taken when the states are built, so that a failure to page-lock them comes at start-up);
// a later one (gradient accumulation) is copied to the host and summed there. On a CPU device the host tensors are
// separate buffers all the same, so CPU runs exercise the same path.
//
// Parameter offload (DeepSpeed's offload_param; needs optimizer offload): those copies live in host memory too
// (page-locked, of exactly their bytes, on a GPU), so the device holds no shard between units; a gather copies the
// unit's shards over (issued without blocking, on the side stream when prefetched) before its all-gather — at one
// rank straight into the gathered buffer. refresh() makes the host wait for the device's copies before it writes
// them. On a CPU device they are separate host buffers all the same, so CPU runs exercise the same path.
//
// Prefetch (FSDP's forward_prefetch + backward_prefetch, DeepSpeed's overlapped all-gathers): prefetch(units)
// issues the all-gathers of the units that run next on a side stream (side_stream.hpp), where they overlap the
// compute of the unit running now; gather() takes them. Their buffers are made on the compute stream before the
// side stream fills them, so the caching allocator frees and reuses them in the compute stream's order, as
// without prefetch: one more unit, never more, however far the host runs ahead. The recomputed units
// (recompute.hpp) name the next ones: forward i+1, backward i-1. Every rank issues the same collectives in the
// same order, as without prefetch. A prefetch not taken by the time the gradients are finished (or the device
// copies refreshed) is dropped, its collectives complete, so no optimizer step changes a shard a side stream still
// reads. On a CPU device the gathers run at once, so CPU runs exercise the same path.
//
// A rank holds at most one unit's parameters whole, or two while the next one is prefetched.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

#include "comm/communicator.hpp"
#include "io/sharded_checkpoint.hpp"
#include "model/host_buffers.hpp"
#include "model/side_stream.hpp"
#include "plan/state_layout.hpp"

namespace ulysses::model {

// Where a model's states live when they are sharded: the groups that split and replicate them, the device and
// whether the optimizer's part is in host memory (train/rank_groups.hpp makes it). The communicators are borrowed
// and must outlive the model. shard_group null = not sharded.
struct StatePlacement {
  comm::Communicator* shard_group = nullptr;     // the ranks that split each unit (world, or the SP group)
  comm::Communicator* replica_group = nullptr;   // ranks that hold the same shard (hybrid: the DP group)
  c10::Device device = c10::kCPU;                // where the gathered units (and the shards, unless offloaded) live
  bool offload_optimizer = false;                // masters, gradients and AdamW state in host memory
  bool offload_params = false;                   // and the gather-dtype copies too (needs offload_optimizer)
  // The units' all-gathers (null: shard_group). Its own communicator where the shard group's also carries other
  // work on the compute stream — hybrid's SP group, whose all-to-alls would queue behind a prefetched gather.
  comm::Communicator* gather_group = nullptr;
  bool enabled() const { return shard_group != nullptr; }
};

// The dtypes of a sharded model's copies: what each group is gathered in and what gradients are reduced in.
struct StateDtypes {
  c10::ScalarType matrices = c10::kFloat;   // the compute dtype
  c10::ScalarType others = c10::kFloat;     // norms, biases, the embedding table
  c10::ScalarType reduce = c10::kFloat;     // the reduce-scatter's
};

class ShardedStates {
 public:
  using Parameter = plan::Parameter;   // name and shape
  struct Group {
    std::string name;                 // "<unit>.matrices" or "<unit>.others"
    c10::ScalarType gather_dtype;
    bool decay;                       // AdamW weight decay applies
    bool trained;                     // false: frozen (no master; `compute` holds the shard)
    std::int64_t numel = 0;           // of its parameters, unpadded
    std::int64_t shard_numel = 0;     // n = ceil(numel / W)
    torch::Tensor master;             // [n] fp32 on `device` (host when offloaded), requires grad; .grad: its gradient
                                      // (trained groups only)
    torch::Tensor compute;            // [n] offloaded or frozen: the copy in gather_dtype that gather() sends (on the
                                      // device; in host memory with offload_params)
    std::vector<int> slots;           // indices into parameters(), in flat order
  };

  // params: every parameter of the model in module order. Masters start at zero (load or init fills them).
  // prefetch: prefetch() issues gathers ahead (otherwise it does nothing).
  ShardedStates(const std::vector<Parameter>& params, const StateDtypes& dtypes, const StatePlacement& sharding,
                const c10::Device& device, bool prefetch = false);

  int unit(const std::string& name) const;   // "model.embed_tokens", "model.layers.N" or "head"
  std::vector<torch::Tensor> gather(int unit);                          // in the unit's parameter order
  std::vector<bool> trained(int unit) const;   // per parameter of gather(unit): false for a frozen one
  void prefetch(const std::vector<int>& units);   // their gathers issued ahead (nothing unless constructed to)
  int prefetched() const { return static_cast<int>(ahead_.size()); }   // issued, not yet taken
  std::int64_t taken_ahead() const { return taken_ahead_; }   // gathers served by a prefetch, since construction
  std::size_t gather_count(int unit) const { return units_[unit].params.size(); }
  // Stand-ins for a unit's parameters where only their shapes matter (a lookup's backward needs no weights):
  // zeros of the gather dtype with every stride 0, one element of storage each.
  std::vector<torch::Tensor> placeholders(int unit) const;
  void add_gradients(int unit, const std::vector<torch::Tensor>& grads);      // the same order; undefined = zero
  void finish_gradients(double global_count);
  void refresh();   // offloaded: the device copies from the masters (after an optimizer step; loads mark it due)
  double grad_norm(double max_norm);   // global L2 norm of the gradient; scales it as clip_grad_norm does

  // The elements [first, first + count) of parameter `name` (flattened) that this rank holds (count 0: none).
  std::pair<std::int64_t, std::int64_t> held(const std::string& name) const;
  // Copies `values`, elements [first, first + values.numel()) of parameter `name` (flattened), into
  // shard_of(its group) where this rank holds them; the rest is ignored.
  void load(const std::string& name, std::int64_t first, const torch::Tensor& values,
            const std::function<torch::Tensor(const Group&)>& shard_of);
  void load(const std::string& name, const torch::Tensor& whole) {   // the whole tensor, into the masters (frozen: the
    load(name, 0, whole, [](const Group& g) { return g.trained ? g.master : g.compute; });   // shard, cast)
  }
  // Collective: gathers shard_of(group) for every trained group in turn (fp32) and calls fn(name, whole tensor) for
  // its parameters, in whole_order(). Every rank gets every tensor.
  void for_each_whole(const std::function<torch::Tensor(const Group&)>& shard_of,
                      const std::function<void(const std::string&, const torch::Tensor&)>& fn) const;
  std::vector<Parameter> whole_order() const;   // the order for_each_whole emits (trained parameters only)
  checkpoint::ShardLayout layout() const;        // what a sharded checkpoint's manifest records
  int shard_rank() const { return shard_group_->rank(); }
  // One copy of each shard is written: by the ranks of the first replica (hybrid), by every rank otherwise.
  bool writes_checkpoint() const { return !replica_group_ || replica_group_->rank() == 0; }

  const std::vector<Group>& groups() const { return groups_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  int world() const { return shard_group_->size(); }
  bool offloaded() const { return offload_; }
  // Host bytes of the gather-dtype copies (--offload-params), or 0: held by their own buffers, so tests can check
  // that every copy is in host memory, and nothing besides
  std::int64_t param_host_bytes() const { return params_host_ ? params_host_->held_bytes() : 0; }

 private:
  struct Unit {
    std::string name;
    std::vector<int> params;   // indices into params_, module order
    std::vector<int> groups;   // indices into groups_
  };
  struct Place {
    int group;
    std::int64_t offset;       // in the group's flat vector
  };
  // Units, groups and places of params_ (plan::state_layout; the tensors are left empty).
  void group_parameters(const StateDtypes& dtypes);
  const Place& place(const std::string& name) const;
  // [lo, hi) in the group of the elements [begin, begin + count) of the parameter at `at` this rank holds
  std::pair<std::int64_t, std::int64_t> overlap(const Place& at, std::int64_t begin, std::int64_t count) const;
  void sum_over(comm::Communicator& group, torch::Tensor& t) const;   // an all-reduce of a host or device tensor
  // Per group of the unit: its whole flat vector [numel]; `into`: buffers [W*n] made beforehand (or none), and
  // `staged`: [n] each, where offloaded parameters are copied over before the all-gather (or none: made here).
  std::vector<torch::Tensor> gather_groups(int unit, const std::vector<torch::Tensor>& into = {},
                                           const std::vector<torch::Tensor>& staged = {});
  bool stages() const { return offload_params_ && world() > 1; }   // gathers copy a shard over first
  void drop_prefetched();                               // waits for (on the device) and frees what was not taken

  std::vector<Parameter> params_;
  std::vector<Place> places_;   // per parameter
  std::map<std::string, int> index_;
  std::vector<Group> groups_;
  std::vector<Unit> units_;
  comm::Communicator* shard_group_ = nullptr;
  comm::Communicator* replica_group_ = nullptr;
  comm::Communicator* gather_group_ = nullptr;
  c10::ScalarType reduce_dtype_ = c10::kFloat;
  c10::Device device_ = c10::kCPU;
  bool offload_ = false;
  bool offload_params_ = false;
  bool stale_ = false;   // offloaded: a load changed masters since the last refresh
  std::optional<HostBuffers> grad_host_;   // offload only: the gradient shards' host memory (for_copies)
  std::optional<HostBuffers> params_host_;   // offload_params only: the gather-dtype copies' host memory
  std::unique_ptr<SideStream> side_;   // prefetch only
  std::map<int, Ahead> ahead_;         // unit -> its gathered groups, issued ahead
  std::int64_t taken_ahead_ = 0;
};

}  // namespace ulysses::model
