// Fixtures of the trainer's multi-rank tests (test_sp_invariance.cpp, test_sharding.cpp), under mpiexec:
// scratch folders shared by the ranks, a packed dataset whose document boundaries fall inside, on and across
// the SP slices, tiny model configs, and the gradient of one step through the trainer's own code path
// (train/step.hpp, train/model_states.hpp) compared by parameter name.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/mpi_communicator.hpp"
#include "dist/process_groups.hpp"
#include "io/manifest.hpp"
#include "io/shard.hpp"
#include "arch/model_config.hpp"
#include "core/sequence_parallel.hpp"
#include "model/causal_lm.hpp"
#include "model/weights.hpp"
#include "train/model_states.hpp"
#include "train/step.hpp"

namespace ulysses::testing_spmd {

namespace fs = std::filesystem;
using namespace ulysses;


constexpr std::int64_t kVocab = 64;

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Rank 0's pid, so concurrent runs of this test use different scratch folders.
inline int getpid_of_rank0() {
  int pid = static_cast<int>(getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return pid;
}

// Runs fn on rank 0 only; every rank then learns whether it succeeded, so a failure on rank 0 stops
// all ranks together instead of leaving them in a collective.
inline void on_rank0(const std::function<void()>& fn) {
  std::string error;
  if (world_rank() == 0) {
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  int failed = error.empty() ? 0 : 1;
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (failed) throw std::runtime_error("setup failed on rank 0: " + (error.empty() ? "see rank 0" : error));
}

// A scratch directory shared by all ranks (same machine), made by rank 0.
inline fs::path shared_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("uly-spinv-{}-{}", name, getpid_of_rank0());
  on_rank0([&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
  });
  return dir;
}

// Sequence metas with boundaries inside, on, and across the P slices of length L = S / P.
inline std::vector<shard::SequenceMeta> metas_for(std::int64_t S, std::int64_t P) {
  const auto L = static_cast<std::int32_t>(S / P);
  const auto s = static_cast<std::int32_t>(S);
  return {
      {s - 3, {0, 5, L, L + 3, s - L / 2}},                  // inside, on an edge, inside; padding at the end
      {s, {0, L / 2, s - 1}},                                // one document across all slices; last is 1 token
      {L + 2, {0}},                                          // short: slices 2.. hold only padding
      {s, {0}},                                              // one full document
  };
}

inline void write_dataset(const fs::path& dir, std::int64_t S, std::int64_t P) {
  on_rank0([&] {
    auto metas = metas_for(S, P);
    std::mt19937 rng(123);
    std::vector<std::int32_t> ids(metas.size() * static_cast<std::size_t>(S));
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>(rng() % kVocab);
    std::vector<std::uint8_t> mask(ids.size(), 1);
    shard::ShardParams params{S, P, 1, 0, false};
    shard::ShardWriter w(dir / "shard-00000.h5", params, static_cast<std::int64_t>(metas.size()));
    w.append(ids, {}, metas);
    w.close();
    shard::Manifest m;
    m.seq_len = S;
    m.sp = P;
    m.alignment = 1;
    m.vocab_size = kVocab;
    m.max_token_id = kVocab - 1;
    m.policy = "test";
    m.shards.push_back({"shard-00000.h5", "train", static_cast<std::int64_t>(metas.size()), 0, ""});
    m.stats = nlohmann::json::object();
    shard::write_manifest(m, dir / "manifest.json");
  });
}

inline fs::path write_config(const fs::path& dir, const std::string& type, int heads, int kv, bool tied = false) {
  const fs::path path = dir / fmt::format("{}-{}-{}{}.json", type, heads, kv, tied ? "-tied" : "");
  on_rank0([&] {
    nlohmann::json c = {{"architectures", {type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
                        {"model_type", type}, {"vocab_size", kVocab}, {"hidden_size", 32},
                        {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", heads},
                        {"num_key_value_heads", kv}, {"head_dim", 8}, {"hidden_act", "silu"},
                        {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
                        {"tie_word_embeddings", tied}, {"initializer_range", 0.2}};
    std::ofstream(path) << c.dump(2);
  });
  return path;
}

struct Result {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;   // whole, by parameter name
};

// The model runs over lo.sp, the same SP handle as the loader's; its states are sharded as `sharding` says.
// Gradients are gathered whole (sharded) before they are returned.
inline Result gradients(const arch::ModelConfig& cfg, comm::Communicator& world, const fs::path& data,
                        data::LoaderOptions lo, std::int64_t steps_skipped,
                        const model::ModelOptions& options = model::ModelOptions(), const model::StatePlacement& sharding = {}) {
  model::CausalLm m(cfg, lo.sp, options, sharding);
  model::init_weights(m, 7);
  train::ModelStates states(m, world);
  data::DataLoader loader(data, lo);
  for (std::int64_t i = 0; i < steps_skipped; ++i) loader.advance_step();
  Result r;
  r.loss = train::compute_gradients(m, loader, lo.grad_accum, states, torch::kCPU).mean();
  for (auto& [name, g] : states.whole_gradients()) r.grads[name] = g;
  return r;
}

inline void expect_same(const Result& got, const Result& ref, const std::string& what, double tol = 1e-5) {
  EXPECT_NEAR(got.loss, ref.loss, tol * std::abs(ref.loss)) << what;
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  for (const auto& [name, r] : ref.grads) {
    ASSERT_TRUE(got.grads.count(name)) << what << ": no gradient for " << name;
    const torch::Tensor& g = got.grads.at(name);
    const double scale = std::max(r.norm().item<double>(), 1e-12);
    const double rel = (g - r).norm().item<double>() / scale;
    EXPECT_LE(rel, tol) << what << ": " << name << " relative difference " << rel;
    EXPECT_GT(scale, 1e-9) << what << ": " << name << " has no gradient at all";
    EXPECT_EQ(g.scalar_type(), torch::kFloat) << what << ": " << name << " gradient is not float32 (master weights)";
  }
}

}  // namespace ulysses::testing_spmd
