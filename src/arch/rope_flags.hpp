// --rope-scaling and --rope-theta as ulysses-train, ulysses-pack and ulysses-plan take them (arch::RopeOverride).
#pragma once

#include <CLI/CLI.hpp>

#include "arch/rope.hpp"

namespace ulysses::arch {

inline void add_rope_flags(CLI::App& app, RopeOverride& rope) {
  app.add_option("--rope-scaling", rope.scaling,
                 "Context extension: config.json's rope_scaling replaced by this JSON object (null: none), e.g. "
                 "'{\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}'; the "
                 "checkpoint records it, --resume keeps it, export-hf writes it");
  app.add_option("--rope-theta", rope.theta, "RoPE base replacing config.json's rope_theta (0: the config's own)")
      ->capture_default_str();
}

}  // namespace ulysses::arch
