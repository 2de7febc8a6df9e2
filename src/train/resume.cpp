#include "train/resume.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "core/log.hpp"
#include "io/checkpoint_format.hpp"
#include "io/manifest.hpp"
#include "train/all_ranks.hpp"
#include "train/checkpoint.hpp"

namespace fs = std::filesystem;

namespace ulysses::train {

namespace {

// A LoRA checkpoint holds the adapters only: they continue with the same shape and scale, over the base they were
// trained on (--init-from's folder, or the seed's weights from scratch) — not even --allow-changes changes those.
void check_lora_resume(const nlohmann::json& stored, const nlohmann::json& now, const fs::path& from) {
  const auto value = [](const nlohmann::json& j, const char* key) {   // a checkpoint from before LoRA: rank 0
    if (j.contains(key)) return j.at(key);
    return key == std::string_view("lora_rank") ? nlohmann::json(0) : nlohmann::json();
  };
  if (value(stored, "lora_rank") == 0 && now.at("lora_rank") == 0) return;
  std::vector<std::string> differ;
  const bool scratch = value(stored, "init_from") == "";
  for (const char* key : {"lora_rank", "lora_alpha", "lora_targets", "lora_rslora", "init_from", "seed"}) {
    if (key == std::string_view("seed") && !scratch) continue;   // the seed makes the base only from scratch
    if (value(stored, key) != now.at(key))
      differ.push_back(fmt::format("{} {} → {}", key, value(stored, key).dump(), now.at(key).dump()));
  }
  if (!differ.empty())
    throw BadInput(fmt::format("--resume {}: {}; this run differs: {}", from.string(),
                               value(stored, "lora_rank") == 0
                                   ? "a full fine-tune's checkpoint, and this run trains LoRA adapters"
                                   : "its LoRA adapters were trained over one base with one shape",
                               fmt::join(differ, "; ")),
                   "resume with the checkpoint's --init-from, --seed and --lora-* flags; to start LoRA from a full "
                   "checkpoint, export-hf it and pass --init-from");
}

// How the data would change: by its identity (io/manifest.hpp) where the checkpoint holds one — a copy of the same
// data under another path is the same data, said in a line — else (a checkpoint from before identities) by --data.
std::optional<std::string> changed_data(const TrainerState& stored, const TrainOptions& o, bool speak) {
  const nlohmann::json was_path = stored.options.contains("data") ? stored.options.at("data") : nlohmann::json();
  const nlohmann::json now_path = o.data.string();
  if (stored.data.is_null())
    return was_path.is_null() || was_path == now_path
               ? std::nullopt
               : std::optional(fmt::format("data {} → {}", was_path.dump(), now_path.dump()));
  const nlohmann::json now = shard::data_identity(shard::read_manifest(o.data));
  if (stored.data == now) {
    if (speak && was_path != now_path)
      log_info("resume: the data moved, {} → {}: the same sequences in the same order (its manifest's shard "
               "checksums and counts)", was_path.dump(), now_path.dump());
    return std::nullopt;
  }
  const auto was = [&](const char* key) { return stored.data.contains(key) ? stored.data.at(key).dump() : "?"; };
  return fmt::format("data {}: not the data the checkpoint's run read (train sequences {} → {}, seq_len {} → {}, "
                     "the shards' checksum {} → {})", now_path.dump(), was("train_sequences"),
                     now.at("train_sequences").dump(), was("seq_len"), now.at("seq_len").dump(), was("xxh3"),
                     now.at("xxh3").dump());
}

}  // namespace

void check_resume_changes(const TrainOptions& o, const fs::path& from, std::int64_t dp, bool speak) {
  const fs::path state_path = from / checkpoint::kTrainerState;
  const TrainerState stored_state = read_trainer_state(state_path);   // checked: a damaged file is one line here
  const nlohmann::json& stored = stored_state.options;
  if (stored.empty()) return;   // a checkpoint made by import-hf: no run to continue
  const auto stored_count = [&](const char* key, std::int64_t fallback) {
    return stored.contains(key) ? json_value<std::int64_t>(stored.at(key), fmt::format("{}: options.{}", state_path.string(),
                                                                                       key),
                                                           checkpoint::kDamagedHint)
                                : fallback;
  };
  const nlohmann::json now = to_json(o);
  std::vector<std::string> changes, order;
  const std::optional<std::string> data_change = changed_data(stored_state, o, speak);
  if (data_change) order.push_back(*data_change);
  for (const char* key : {"seed", "lr", "min_lr_ratio", "warmup", "lr_decay", "steps", "weight_decay", "beta1",
                          "beta2", "eps", "clip", "precision", "reduce_dtype"})
    if (stored.contains(key) && stored[key] != now[key]) {
      (std::string_view(key) == "seed" ? order : changes)
          .push_back(fmt::format("{} {} → {}", key, stored[key].dump(), now[key].dump()));
    }
  check_lora_resume(stored, now, from);
  const checkpoint::Manifest m = checkpoint::read_manifest(from);
  const std::int64_t before = m.dp * stored_count("micro_batch", o.micro_batch) * stored_count("grad_accum", o.grad_accum);
  if (const std::int64_t after = dp * o.micro_batch * o.grad_accum; before != after)
    order.push_back(fmt::format("sequences per step {} → {} (dp × micro-batch × grad-accum)", before, after));
  if (!order.empty() && !o.allow_changes)
    throw BadInput(fmt::format("--resume {}: the data each step sees would change: {}", from.string(),
                               fmt::join(order, "; ")),
                   "pass --allow-changes to continue anyway (the run is then no longer an exact continuation)");
  if (speak && !changes.empty()) log_info("resume changes: {}", fmt::join(changes, "; "));
  if (speak && !order.empty()) log_info("resume changes (--allow-changes): {}", fmt::join(order, "; "));
}

std::vector<fs::path> resume_candidates(const TrainOptions& o, bool speak) {
  if (o.resume.empty()) return {};
  if (o.resume != "auto") {
    if (auto dir = checkpoint::find_checkpoint(o.resume)) return {*dir};
    throw BadInput(fmt::format("--resume {} is not a checkpoint: no {} and no {}", o.resume, checkpoint::kManifest,
                               checkpoint::kLatest),
                   "pass auto, a run directory, its checkpoints/ or latest, or a step-NNNNNNN directory");
  }
  const fs::path root = o.output / "checkpoints";
  std::vector<fs::path> out = checkpoint::complete_checkpoints(root);
  std::optional<fs::path> named;
  try {
    named = checkpoint::latest(root);
  } catch (const BadInput& e) {
    if (speak) log_info("warning: --resume auto: {}: trying the newest complete checkpoint instead", one_line(e));
  }
  if (named) {
    std::erase(out, *named);
    out.insert(out.begin(), *named);
  } else if (!out.empty() && speak) {
    log_info("warning: --resume auto: {} names no checkpoint, yet {} complete one(s) are there: trying the newest",
             (root / checkpoint::kLatest).string(), out.size());
  }
  return out;
}

namespace {

// This rank's share of `dir`'s files verified against its manifest: nothing when they match, else why not.
std::optional<BadInput> verify_share(const fs::path& dir, int rank, int world) {
  try {
    const checkpoint::Manifest m = checkpoint::read_manifest(dir);
    std::vector<std::size_t> order(m.files.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return m.files[a].bytes > m.files[b].bytes;
    });
    std::vector<std::int64_t> load(static_cast<std::size_t>(world), 0);
    for (const std::size_t i : order) {
      const auto owner = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[static_cast<std::size_t>(owner)] += std::max<std::int64_t>(m.files[i].bytes, 1);
      if (owner == rank) checkpoint::verify_file(dir, m.files[i]);
    }
    return std::nullopt;
  } catch (const BadInput& e) {
    return e;
  } catch (const std::exception& e) {   // a file system's error while reading
    return BadInput(fmt::format("{}: {}", dir.string(), printable(e.what(), 400)), checkpoint::kDamagedHint);
  }
}

}  // namespace

std::optional<fs::path> verified_checkpoint(const std::vector<fs::path>& candidates, bool fallback,
                                            comm::Communicator& world) {
  for (const fs::path& dir : candidates) {
    const std::optional<BadInput> bad = verify_share(dir, world.rank(), world.size());
    if (!any_rank(bad.has_value(), world)) return dir;   // every rank's share matched
    if (!fallback) {
      if (bad) throw *bad;   // its rank's line names the file; the others exit 2 with it
      return std::nullopt;
    }
    if (bad) log_info("warning: --resume auto: {} does not verify: {}", dir.string(), one_line(*bad));
  }
  if (candidates.empty()) return std::nullopt;
  throw BadInput(fmt::format("--resume auto: none of the {} complete checkpoint(s) under {} matches its manifest",
                             candidates.size(), candidates.front().parent_path().string()),
                 "the warnings above name each damaged file; restore one from a copy, or start over with --overwrite");
}

void check_output(const TrainOptions& o, int rank) {
  const fs::path ckpts = o.output / "checkpoints";
  if (o.resume.empty() && !o.overwrite &&
      (fs::exists(ckpts / checkpoint::kLatest) || !checkpoint::complete_checkpoints(ckpts).empty()))
    throw BadInput(fmt::format("{} already holds checkpoints", o.output.string()),
                   "pass --resume auto to continue that run, --overwrite to start over, or another --output");
  if (rank == 0 && o.overwrite && o.resume.empty() && fs::exists(o.output)) {
    fs::remove_all(ckpts);
    fs::remove(o.output / "metrics.jsonl");
    fs::remove_all(o.output / "tensorboard");   // the default folder only: a --tensorboard elsewhere may be shared
  }
}

void check_output_paths(const TrainOptions& o) {
  const auto must_be = [&](const fs::path& path, bool directory) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (!fs::exists(st) || (directory ? fs::is_directory(st) : fs::is_regular_file(st))) return;
    throw BadInput(fmt::format("--output {}: {} is there and is not a {}", o.output.string(), path.string(),
                               directory ? "directory" : "file"),
                   "move it away, or pass another --output");
  };
  must_be(o.output, true);
  must_be(o.output / "checkpoints", true);
  must_be(o.output / "metrics.jsonl", false);
  if (const auto events = tensorboard_dir(o)) must_be(*events, true);
}

}  // namespace ulysses::train
