// ulysses-plan: how long a sequence fits, where the bytes go and which flags to use — before anything is queued.
// Torch-free and instant: the arithmetic of plan/memory_model.hpp over a Hugging Face config.json, with the
// constants of a memory profile (built-in, or measured by ulysses-train --calibrate-memory).
// Exit codes: 0 the plan fits (or, without --seq-len, the longest length was found), 2 it does not / bad input.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "arch/model_config.hpp"
#include "arch/rope_flags.hpp"
#include "arch/parameters.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/main_guard.hpp"
#include "core/rank_layout.hpp"
#include "plan/advice.hpp"
#include "plan/host_memory.hpp"
#include "plan/memory_model.hpp"
#include "plan/plan_report.hpp"
#include "plan/tensor_limit.hpp"

namespace up = ulysses::plan;
namespace fs = std::filesystem;

namespace {

const char* kExamples = R"(
Examples:
  # Llama-3.1-8B at 1M tokens on 4 nodes of 8 H100 with the flags of slurm/train_1m.sbatch: fits?
  ulysses-plan --model /models/Llama-3.1-8B --nodes 4 --gpus-per-node 8 --sp 8 --seq-len 1M --precision bf16 \
      --offload-optimizer --offload-checkpoints -1 --tiled-mlp --tiled-logits
  # the longest sequence one node reaches (no --seq-len), on H200s with 2 TiB of host memory
  ulysses-plan --model config.json --gpus-per-node 8 --sp 8 --gpu-memory 141GB --host-memory 2TiB --profile h200
  # which SP degree, ring degree and how many nodes reach 4M tokens with the fewest GPUs (past a node: Ulysses
  # inside each node × a ring across them; with --allow-sp-across-islands pure Ulysses may span nodes too)
  ulysses-plan --model config.json --nodes 8 --sp choose --seq-len 4M --precision bf16 --offload-optimizer \
      --offload-checkpoints -1 --tiled-mlp --tiled-logits
  # the memory flags that make 1M fit one node of 8 H100 (printed as MEMORY_ARGS for slurm/train_1m.sbatch)
  ulysses-plan --model config.json --gpus-per-node 8 --sp 8 --seq-len 1M --precision bf16 --choose-memory-flags
  # ranks on this CPU machine (its memory), with the profile measured here by ulysses-train --calibrate-memory
  ulysses-plan --model config.json --device cpu --gpus-per-node 4 --sp 4 --profile cpu-profile.json
  # SP 32 on 4 nodes as Ulysses 8 inside each node × a ring of 4 across them
  ulysses-plan --model config.json --nodes 4 --sp 32 --sp-ring 4 --seq-len 4M --precision bf16 --tiled-mlp --tiled-logits

Sizes: 80GB (10^9), 80GiB (2^30); lengths: 1048576, 1M (2^20), 128K (2^17).
Exit codes: 0 fits (or the longest length was found), 2 does not fit (one line with the flag that would) or bad input.)";

struct Cli {
  fs::path model;
  ulysses::arch::RopeOverride rope;   // checked and applied as ulysses-train applies it (the plan does not depend on it)
  int nodes = 1, gpus_per_node = 8;
  std::string sp = "1", seq_len, device = "cuda", gpu_memory = "80GiB", host_memory, profile, objective = "fewest-gpus";
  std::int64_t sp_ring = 1;
  std::int64_t micro_batch = 1;
  int island_size = 0;
  bool across_islands = false;
  std::string corpus = "CORPUS", data = "DATA", headroom = "auto";
  bool json = false, choose_flags = false;
  up::MemoryFlags flags;
};

std::int64_t parse_length(const std::string& text, const std::string& flag) {   // 1048576, 1M, 128K
  if (text.empty()) return 0;
  const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  const std::int64_t scale = unit == 'K' ? 1 << 10 : unit == 'M' ? 1 << 20 : unit == 'G' ? 1 << 30 : 1;
  try {
    std::size_t used = 0;
    const std::string digits = scale == 1 ? text : text.substr(0, text.size() - 1);
    const double v = std::stod(digits, &used);
    if (used == digits.size() && v > 0) return static_cast<std::int64_t>(v * static_cast<double>(scale));
  } catch (const std::exception&) {
  }
  throw ulysses::BadInput(fmt::format("{} \"{}\" is not a sequence length", flag, text), "write e.g. 1048576, 1M or 128K");
}

void set_up(CLI::App& app, Cli& o) {
  app.footer(kExamples);
  app.add_option("--model,--model-config,--init-from", o.model,
                 "Hugging Face config.json, or a model directory holding one (ulysses-train's --model-config and "
                 "--init-from name the same)")
      ->required();
  ulysses::arch::add_rope_flags(app, o.rope);
  app.add_option("--nodes", o.nodes, "Nodes")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--gpus-per-node", o.gpus_per_node, "Ranks per node (one per GPU)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--sp", o.sp, "Sequence-parallel degree, or 'choose' (needs --seq-len: the layout that reaches it)")
      ->capture_default_str();
  ulysses::add_sp_ring_option(app, o.sp_ring, "as ulysses-train's, with a numeric --sp");
  app.add_option("--objective", o.objective,
                 "For --sp choose: fewest-gpus (the fewest whole nodes, then the smallest SP, then ring) or "
                 "throughput (all nodes, the smallest SP that fits)")
      ->check(CLI::IsMember({"fewest-gpus", "throughput"}))->capture_default_str();
  app.add_option("--seq-len", o.seq_len, "Check this sequence length (exit 2 when it does not fit); also the target "
                                         "of --sp choose. Without it: the longest length that fits");
  app.add_option("--micro-batch", o.micro_batch, "Sequences per micro-batch per DP rank")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--island-size", o.island_size,
                 "Ranks per NVLink island, as ulysses-train's (0: a node; GB200 NVL72: 72). SP groups stay inside one "
                 "unless --allow-sp-across-islands")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--allow-sp-across-islands", o.across_islands,
               "Let SP groups span islands (their all-to-alls cross the inter-node network), as ulysses-train's flag");
  app.add_option("--device", o.device, "cuda (GPU ranks) or cpu (the ranks' memory is the node's)")
      ->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--gpu-memory", o.gpu_memory, "One GPU's memory (H100: 80GiB, H200: 141GB)")->capture_default_str();
  app.add_option("--host-memory", o.host_memory, "One node's host memory (default: 2TiB on cuda, this machine's on cpu)");
  app.add_option("--profile,--memory-profile", o.profile,
                 "Memory profile: a file from ulysses-train --calibrate-memory, or built-in cpu, h100, h200, alst-h100 "
                 "(default: cpu or h100 by --device)");
  app.add_option("--headroom", o.headroom,
                 "Percent of the usable memory the plan keeps free in its verdict, longest length and choices, for "
                 "what the profile may miss (auto: 5 on a counted profile, h100/h200 until calibrated; 0 on a "
                 "measured one). ulysses-train's own refusal keeps none")
      ->capture_default_str();
  app.add_option("--corpus", o.corpus, "Tokenized corpus named in the printed ulysses-pack command")->capture_default_str();
  app.add_option("--data", o.data, "Packed dataset directory named in the printed commands")->capture_default_str();
  app.add_flag("--json", o.json, "Print the plan as one JSON object (bytes per category, per rank and node) instead");
  app.add_flag("--choose-memory-flags", o.choose_flags,
               "Add memory flags to the given ones, in the advice's order (shard, offload the optimizer, checkpoint, "
               "TiledMLP, tiled logits, offload every layer input, head groups, offload the parameters), until "
               "--seq-len fits, and plan with those (its MEMORY_ARGS line: what slurm/train_1m.sbatch runs with)");
  up::add_memory_flags(app, o.flags);
}

nlohmann::json plan_json(const up::Breakdown& b, const up::Layout& l, const up::Machine& m, std::int64_t S,
                         std::int64_t longest) {
  nlohmann::json device = nlohmann::json::object(), host = nlohmann::json::object();
  for (const auto& [label, bytes] : b.device_lines()) device[label] = bytes;
  for (const auto& [label, bytes] : b.host_lines()) host[label] = bytes;
  const std::int64_t rank = m.cuda ? b.host() : b.host() + b.device();
  return {{"seq_len", S}, {"sp", l.sp}, {"nodes", l.nodes}, {"ranks_per_node", l.ranks_per_node},
          {"device_per_rank", b.device()}, {"host_per_rank", b.host()}, {"memory_per_rank", m.cuda ? b.device() : rank},
          {"host_per_node", rank * l.ranks_per_node}, {"fits", S > 0 && S <= longest}, {"longest", longest},
          {"device", device}, {"host", host}};
}

up::Machine machine_of(const Cli& o, std::string& host_source) {   // one node, from the flags (cpu: this one)
  const bool cuda = o.device == "cuda";
  up::Machine m{cuda, cuda ? static_cast<std::int64_t>(ulysses::parse_size(o.gpu_memory, "--gpu-memory")) : 0, 0};
  host_source = "--host-memory";
  if (!o.host_memory.empty()) {
    m.host_bytes = static_cast<std::int64_t>(ulysses::parse_size(o.host_memory, "--host-memory"));
  } else if (cuda) {
    m.host_bytes = std::int64_t{2} << 40, host_source = "default 2 TiB";
  } else {
    const up::HostMemory here = up::host_memory();
    m.host_bytes = here.bytes, host_source = here.source;
  }
  return m;
}

// --sp N (checked against the ranks and the heads) or --sp choose (the layout that reaches `target`; `why` says why;
// with --choose-memory-flags, o.flags become the ones chosen for that layout).
up::Layout layout_of(Cli& o, const ulysses::arch::ModelConfig& c, const fs::path& config_json,
                     const up::Profile& profile, const up::Machine& m, std::int64_t target, std::string& why) {
  up::Layout l{o.nodes, o.gpus_per_node, 1, o.micro_batch, o.island_size, o.across_islands};
  if (o.sp == "choose") {
    if (o.sp_ring != 1)
      throw ulysses::BadInput(fmt::format("--sp choose picks the ring degree too (--sp-ring {} given)", o.sp_ring),
                              "drop --sp-ring, or pass a numeric --sp with it");
    if (target == 0) throw ulysses::BadInput("--sp choose needs a target", "add --seq-len, e.g. --seq-len 1M");
    const auto choice = up::choose_layout(c, l, o.flags, profile, m, target, o.objective == "fewest-gpus",
                                          o.choose_flags);
    if (!choice) {
      const auto layouts = up::sp_ring_degrees(c, l);   // by SP, then ring: the widest last
      up::Layout widest = l;
      widest.sp = layouts.back().sp, widest.ring = layouts.back().ring;
      const auto fix = up::suggest_fix(c, widest, o.flags, profile, m, target);
      int ulysses = 1;   // the largest Ulysses degree inside the islands
      for (const up::SpRing& d : layouts) ulysses = std::max(ulysses, d.sp / d.ring);
      const bool crossing = !o.across_islands && up::valid_sp_degrees(c, l.world()).back() > ulysses;
      throw ulysses::BadInput(fmt::format("no layout on up to {} node{} of {} GPUs reaches {} tokens{}", o.nodes,
                                          o.nodes == 1 ? "" : "s", o.gpus_per_node, target,
                                          crossing ? fmt::format(" with Ulysses groups inside NVLink islands of {} "
                                                                 "ranks", l.island_ranks())
                                                   : ""),
                              fix ? *fix
                                  : crossing ? "add --allow-sp-across-islands (all-to-alls over the inter-node network; "
                                               "the trainer needs it too), more nodes, or a smaller model"
                                             : "more nodes, or a smaller model");
    }
    why = choice->why;
    o.flags = choice->flags;
    return choice->layout;
  }
  try {
    l.sp = std::stoi(o.sp);
  } catch (const std::exception&) {
    throw ulysses::BadInput(fmt::format("--sp \"{}\" is neither a degree nor 'choose'", o.sp), "write e.g. --sp 8");
  }
  if (l.sp < 1 || l.world() % l.sp != 0)
    throw ulysses::BadInput(fmt::format("--sp {} does not divide the {} ranks", l.sp, l.world()),
                            fmt::format("valid here: {}", fmt::join(up::valid_sp_degrees(c, l.world()), ", ")));
  l.ring = static_cast<int>(o.sp_ring);
  const ulysses::RankLayout ranks(l.world(), l.sp, l.ring);   // --sp-ring divides --sp
  ulysses::arch::check_heads_for_sp(c, l.sp, config_json.string(), l.ring);
  if (!l.sp_within_islands(l.sp)) {   // the trainer's refusal, said before anything is queued
    const auto rings = up::sp_ring_degrees(c, l);
    const auto ring = std::find_if(rings.begin(), rings.end(), [&](const up::SpRing& d) { return d.sp == l.sp; });
    throw ulysses::BadInput(
        fmt::format("--sp {} spans NVLink islands of {} ranks: its all-to-alls would cross the inter-node network",
                    l.sp, l.island_ranks()),
        fmt::format("use --sp {}{}, or --allow-sp-across-islands (ulysses-train needs it too)",
                    fmt::join(up::sp_degrees(c, l), ", "),
                    ring == rings.end() ? ""
                                        : fmt::format(", or --sp {} --sp-ring {} (Ulysses inside each island × a ring "
                                                      "across them)", l.sp, ring->ring)));
  }
  return l;
}

// --choose-memory-flags: o.flags become the chosen ones (BadInput when none fit, or without --seq-len).
void choose_flags(Cli& o, const ulysses::arch::ModelConfig& c, const up::Layout& l, const up::Profile& profile,
                  const up::Machine& m, std::int64_t target) {
  if (target == 0)
    throw ulysses::BadInput("--choose-memory-flags needs the length to fit", "add --seq-len, e.g. --seq-len 1M");
  const std::int64_t unit = up::sequence_unit(l.sp, l.ring), S = (target + unit - 1) / unit * unit;
  const auto chosen = up::choose_memory_flags(c, l, o.flags, profile, m, S);
  if (!chosen)
    throw ulysses::BadInput(fmt::format("--choose-memory-flags: no memory flags make S = {} fit SP {} on {} node{} of "
                                        "{} (every one of them on: see the plan without it)",
                                        S, l.sp, l.nodes, l.nodes == 1 ? "" : "s", l.ranks_per_node),
                            "more nodes, a larger SP degree, or a shorter --seq-len");
  o.flags = *chosen;
}

// --headroom: auto (5% on a counted profile, none on a measured one) or a percent in [0, 50].
double headroom_of(const std::string& text, const up::Profile& p) {
  if (text == "auto") return p.counted ? 0.05 : 0.0;
  try {
    std::size_t used = 0;
    const double percent = std::stod(text, &used);
    if (used == text.size() && percent >= 0 && percent <= 50) return percent / 100;
  } catch (const std::exception&) {
  }
  throw ulysses::BadInput(fmt::format("--headroom \"{}\" is not a percent from 0 to 50", text),
                          "write e.g. --headroom 5, or auto");
}

int run(Cli& o) {
  const fs::path config_json = fs::is_directory(o.model) ? o.model / "config.json" : o.model;
  const ulysses::arch::ModelConfig c = ulysses::arch::read_model_config(config_json, o.rope);
  const bool cuda = o.device == "cuda";
  up::settle_precision(o.flags, cuda);
  const up::Profile profile = up::load_profile(o.profile.empty() ? up::default_profile_name(cuda, "") : o.profile);
  std::string host_source, why;
  up::Machine m = machine_of(o, host_source);
  m.headroom = headroom_of(o.headroom, profile);
  const std::int64_t target = parse_length(o.seq_len, "--seq-len");
  const up::Layout l = layout_of(o, c, config_json, profile, m, target, why);
  if (o.choose_flags) choose_flags(o, c, l, profile, m, target);
  // --attention-head-groups auto: the largest G for the longest length, the least that fits at --seq-len
  const std::int64_t longest = up::longest_sequence(
      c, l, up::resolve(up::settle_head_groups(c, l, o.flags, profile, m, 0), c, l.world(), l.ulysses()), profile, m);
  const std::int64_t unit = up::sequence_unit(l.sp, l.ring);
  const std::int64_t S = target > 0 ? (target + unit - 1) / unit * unit : longest;
  const up::Features f = up::resolve(up::settle_head_groups(c, l, o.flags, profile, m, S), c, l.world(), l.ulysses());
  if (o.json) {
    const up::Breakdown b = up::predict(c, l, f, profile, S);
    nlohmann::json out = plan_json(b, l, m, S, longest);
    out["attention_head_groups"] = f.attention_head_groups;
    out["heads_ahead"] = f.issues_heads_ahead(profile.cuda);   // the next head group issued ahead (--prefetch)
    out["headroom"] = m.headroom;
    out["parameters"] = ulysses::arch::parameter_count(c);   // as transformers counts them for this config.json
    out["active_parameters"] = ulysses::arch::active_parameter_count(c);   // a token's: k of each layer's E experts
    fmt::print("{}\n", out.dump());
    return target > 0 && S > longest ? ulysses::kExitBadInput : 0;
  }
  fmt::print("model {} ({}): {} parameters{}, {} layers, hidden {}, {} heads ({} KV), vocab {}\n",
             config_json.string(), c.architecture,
             ulysses::human_count(static_cast<std::uint64_t>(ulysses::arch::parameter_count(c))),
             c.moe.enabled() ? fmt::format(" ({} active: {} of {} experts)",
                                           ulysses::human_count(static_cast<std::uint64_t>(
                                               ulysses::arch::active_parameter_count(c))),
                                           c.moe.top_k, c.moe.experts)
                             : "",
             c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size);
  fmt::print("cluster: {} node{} × {} {}; {}host {} per node ({})\n", l.nodes, l.nodes == 1 ? "" : "s",
             l.ranks_per_node, cuda ? "GPUs" : "CPU ranks",
             cuda ? fmt::format("{} per GPU; ", ulysses::human_bytes(static_cast<std::uint64_t>(m.device_bytes))) : "",
             ulysses::human_bytes(static_cast<std::uint64_t>(m.host_bytes)), host_source);
  fmt::print("profile {}: {}{}\n", profile.name, profile.source,
             m.headroom > 0 ? fmt::format("; planned with {:.0f}% of the usable memory kept free (--headroom)",
                                          100 * m.headroom)
                            : "");
  fmt::print("layout: SP {}{} × DP {}; micro-batch {}; {}\n", l.sp,
             l.ring > 1 ? fmt::format(" (Ulysses {} × ring {})", l.ulysses(), l.ring) : "", l.world() / l.sp,
             l.micro_batch,
             up::features_line(f, c, l));
  if (!why.empty()) fmt::print("chosen: {}\n", why);
  if (S > 0) {
    const up::Breakdown b = up::predict(c, l, f, profile, S);
    const double step_tokens = static_cast<double>(S) * static_cast<double>(l.micro_batch * (l.world() / l.sp));
    fmt::print("\nat S = {} tokens ({} per rank):\n", S, S / l.sp * l.micro_batch);
    for (const auto& line : up::breakdown_lines(b, l, m)) fmt::print("  {}\n", line);
    fmt::print("  step: {:.3g} PFLOP of model FLOPs ({} sequences of {} tokens, one document each)\n",
               up::step_flops(c, step_tokens, step_tokens * static_cast<double>(S)) / 1e15,
               l.micro_batch * (l.world() / l.sp), S);
  }
  fmt::print("\nlongest sequence that fits: {} tokens ({} per rank; multiples of {})\n", longest, longest / l.sp,
             up::sequence_unit(l.sp, l.ring));
  if (S > 0 && (target == 0 || S <= longest)) {
    const std::string ring_flag = l.ring > 1 ? fmt::format(" --sp-ring {}", l.ring) : "";
    fmt::print("\ncommands:\n  ulysses-pack pack {} -o {} --seq-len {} --sp {}{} --model-config {}\n", o.corpus, o.data, S,
               l.sp, ring_flag, config_json.string());
    up::Layout inside = l;   // the trainer's opt-in where the SP groups span islands
    inside.across_islands = false;
    const std::string islands = (o.island_size > 0 ? fmt::format(" ISLAND_SIZE={}", o.island_size) : "") +
                                (inside.sp_within_islands(l.sp) ? "" : " EXTRA_ARGS=\"--allow-sp-across-islands\"");
    const std::string rope = (o.rope.scaling.empty() ? "" : fmt::format(" ROPE_SCALING='{}'", o.rope.scaling)) +
                             (o.rope.theta == 0 ? "" : fmt::format(" ROPE_THETA={}", o.rope.theta));
    // the model as the sbatch takes it: a model directory to fine-tune, or a config.json to train from scratch
    const std::string model = fs::is_directory(o.model) ? fmt::format("INIT_FROM={}", o.model.string())
                                                        : fmt::format("MODEL_CONFIG={}", o.model.string());
    fmt::print("  NODES={} GPUS_PER_NODE={} SP={}{} SEQ_LEN={} DATA={} {} PRECISION={} MEMORY_ARGS=\"{}\"{}{} bash "
               "slurm/train_1m.sbatch\n",
               l.nodes, l.ranks_per_node, l.sp, l.ring > 1 ? fmt::format(" SP_RING={}", l.ring) : "", S, o.data, model,
               o.flags.precision, up::memory_args(o.flags), islands, rope);
  }
  if (target > 0 && S > longest) {
    const up::Fit fit = up::check_fit(up::predict(c, l, f, profile, S), l, m);
    if (fit.fits && profile.limits_tensors) up::check_tensor_limit(c, l, f, S);   // a tensor past 2^31 elements
    const auto fix = up::suggest_fix(c, l, o.flags, profile, m, S);
    throw ulysses::BadInput(
        fmt::format("--seq-len {} does not fit: {} memory needs {} of {} usable; the longest that fits is {}", S,
                    fit.limit == "device" ? "GPU" : "host", ulysses::human_bytes(static_cast<std::uint64_t>(fit.need)),
                    ulysses::human_bytes(static_cast<std::uint64_t>(fit.have)), longest),
        fix ? *fix : "more nodes, a larger SP degree, or a shorter --seq-len");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ulysses-plan: the memory of a training run before it is queued — longest sequence, bytes, flags"};
  Cli o;
  set_up(app, o);
  if (auto code = ulysses::parse_command_line(app, argc, argv)) return *code;
  return ulysses::run_guarded([&] { return run(o); });
}
