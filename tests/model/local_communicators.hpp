// Test doubles of comm::Communicator that need no MPI.
//
// SoloCommunicator: a group of one (every collective is the identity), to run the SP code path at P = 1.
// ThreadGroup: P ranks as P threads of one process; ThreadGroup::rank(r) is rank r's communicator. Each
// collective publishes this rank's tensor, waits for all P, then reads the others', exactly as the real
// backends define the result. Every rank must call the same collectives in the same order (a rank that
// throws leaves its peers waiting: the test's timeout ends it), send_recv included.
#pragma once

#include <barrier>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "comm/communicator.hpp"
#include "core/sequence_parallel.hpp"

namespace ulysses::model::testing {

// The SequenceParallel handle of rank c.rank() in a group of c.size() ranks (one SP group, no DP).
inline SequenceParallel sp_of(comm::Communicator& c) { return SequenceParallel(RankLayout(c.size(), c.size()), c.rank(), &c); }

class SoloCommunicator : public comm::Communicator {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  torch::Tensor all_to_all(const torch::Tensor& x) override { return x.clone(); }
  void all_reduce_sum(torch::Tensor&) override {}
  torch::Tensor all_gather(const torch::Tensor& x) override { return x.clone(); }
  torch::Tensor reduce_scatter_sum(const torch::Tensor& x) override { return x.clone(); }
  void broadcast(torch::Tensor&, int) override {}
  void barrier() override {}
  torch::Tensor send_recv(const torch::Tensor& x, int, int) override { return x.clone(); }
};

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : slots_(size), sync_(size) {
    for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  comm::Communicator& rank(int r) { return *ranks_[r]; }

 private:
  class Rank : public comm::Communicator {
   public:
    Rank(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
    int size() const override { return static_cast<int>(g_.slots_.size()); }
    int rank() const override { return rank_; }

    // out chunk j = rank j's chunk rank()
    torch::Tensor all_to_all(const torch::Tensor& x) override {
      return exchange(x, [&](const std::vector<torch::Tensor>& all) {
        std::vector<torch::Tensor> chunks;
        for (const auto& t : all) chunks.push_back(t.chunk(size())[rank_]);
        return at::cat(chunks);
      });
    }
    void all_reduce_sum(torch::Tensor& x) override {
      x.copy_(exchange(x, [](const std::vector<torch::Tensor>& all) { return at::stack(all).sum(0); }));
    }
    torch::Tensor all_gather(const torch::Tensor& x) override {
      return exchange(x, [](const std::vector<torch::Tensor>& all) { return at::cat(all); });
    }
    torch::Tensor reduce_scatter_sum(const torch::Tensor& x) override {
      return exchange(x, [&](const std::vector<torch::Tensor>& all) { return at::stack(all).sum(0).chunk(size())[rank_]; });
    }
    void broadcast(torch::Tensor& x, int root) override {
      x.copy_(exchange(x, [root](const std::vector<torch::Tensor>& all) { return all[root].clone(); }));
    }
    void barrier() override { g_.sync_.arrive_and_wait(); }
    // every rank of the group calls it at once here (a ring), unlike the real backends' pairs
    torch::Tensor send_recv(const torch::Tensor& x, int /*to*/, int from) override {
      return exchange(x, [from](const std::vector<torch::Tensor>& all) { return all[from].clone(); });
    }

   private:
    template <typename Combine>
    torch::Tensor exchange(const torch::Tensor& x, Combine combine) {
      g_.slots_[rank_] = x.detach().clone();
      g_.sync_.arrive_and_wait();   // every rank has published
      auto out = combine(g_.slots_);
      g_.sync_.arrive_and_wait();   // every rank has read before the slots are reused
      return out;
    }

    ThreadGroup& g_;
    int rank_;
  };

  std::vector<torch::Tensor> slots_;
  std::barrier<> sync_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// An SP group of U × R ranks as threads, Ulysses fastest (RankLayout): U consecutive ranks share a Ulysses group,
// ranks with the same Ulysses rank a ring group. sp(s) is rank s's handle.
class RingThreads {
 public:
  RingThreads(int ulysses, int ring) : U_(ulysses), R_(ring) {
    for (int r = 0; r < ring; ++r) ulysses_.push_back(std::make_unique<ThreadGroup>(ulysses));
    for (int u = 0; u < ulysses; ++u) rings_.push_back(std::make_unique<ThreadGroup>(ring));
  }
  int size() const { return U_ * R_; }
  SequenceParallel sp(int s) {
    const int u = s % U_, r = s / U_;
    return SequenceParallel(RankLayout(size(), size(), R_), s, &ulysses_[r]->rank(u), &rings_[u]->rank(r));
  }

 private:
  int U_, R_;
  std::vector<std::unique_ptr<ThreadGroup>> ulysses_, rings_;
};

}  // namespace ulysses::model::testing
