// run_pack: inputs → scan (pass 1) → plan → seeded shuffle → train/valid split → shards (pass 2) →
// manifest, all inside an OutputDir so a failed run leaves nothing that looks complete.
#include "pack/pack.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "arch/model_config.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_dir.hpp"
#include "core/sequence_parallel.hpp"
#include "core/shuffle.hpp"
#include "io/manifest.hpp"
#include "pack/phase_timer.hpp"
#include "pack/scan.hpp"
#include "pack/write_shards.hpp"

namespace fs = std::filesystem;

namespace ulysses::pack {
namespace {

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::kBfd: return "bfd";
    case Policy::kConcat: return "concat";
    case Policy::kPad: return "pad";
  }
  return "?";
}

int thread_count(int requested) {
  return requested > 0 ? requested : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Vocabulary and heads from --model-config / --vocab-size; returns the vocabulary size (0 = unknown).
std::int64_t check_model(const PackOptions& o) {
  std::int64_t vocab = o.vocab_size;
  if (!o.model_config.empty()) {
    const arch::ModelConfig cfg = arch::read_model_config(o.model_config, o.rope);
    arch::check_heads_for_sp(cfg, o.sp, o.model_config.string(), o.sp_ring);   // checked: sp_ring divides sp
    if (vocab > 0 && vocab != cfg.vocab_size)
      throw BadInput(fmt::format("--vocab-size ({}) disagrees with {} (vocab_size {})", vocab,
                                 o.model_config.string(), cfg.vocab_size), "give one of the two");
    vocab = cfg.vocab_size;
  }
  if (vocab > 0 && (o.pad_id < 0 || o.pad_id >= vocab))
    throw BadInput(fmt::format("--pad-id ({}) is outside the vocabulary [0, {})", o.pad_id, vocab),
                   "pass a --pad-id below the vocabulary size (--vocab-size, or the model config's vocab_size)");
  return vocab;
}

}  // namespace

tokenize::Tokenizer load_tokenizer(const fs::path& path, std::int64_t vocab_size, bool append_eos,
                                   bool add_special_tokens) {
  tokenize::Tokenizer t = tokenize::Tokenizer::load(path);
  if (vocab_size > 0 && t.vocab_size() > vocab_size)
    throw BadInput(fmt::format("--tokenizer {} has ids up to {} but the model's vocab_size is {}", t.file().string(),
                               t.vocab_size() - 1, vocab_size),
                   "use the tokenizer of the model you train: the tokenizer.json in its folder");
  if (append_eos && !t.eos_id())
    throw BadInput(fmt::format("--tokenizer {}: no end-of-document token (no eos_token in tokenizer_config.json, no "
                               "eos_token_id in generation_config.json)", path.string()),
                   "copy the model's tokenizer_config.json beside its tokenizer.json, or pass --no-append-eos");
  log_info("tokenizer {}", t.describe(add_special_tokens, append_eos));
  return t;
}

namespace {

PackPlan make_plan(const PackOptions& o, const Corpus& corpus) {
  std::vector<std::uint32_t> lengths(corpus.docs.size());
  std::transform(corpus.docs.begin(), corpus.docs.end(), lengths.begin(), [](const DocRef& d) { return d.length; });
  const auto S = static_cast<std::uint32_t>(o.seq_len);
  switch (o.policy) {
    case Policy::kBfd: return plan_bfd(lengths, S, o.long_docs);
    case Policy::kConcat: return plan_concat(lengths, S);
    case Policy::kPad: return plan_pad(lengths, S, o.long_docs);
  }
  ULY_CHECK(false, "unknown policy");
}

std::uint64_t valid_count(double fraction, std::uint64_t sequences) {
  if (fraction <= 0 || sequences == 0) return 0;
  auto n = static_cast<std::uint64_t>(std::llround(fraction * static_cast<double>(sequences)));
  return std::clamp<std::uint64_t>(n, 1, sequences - 1);
}

nlohmann::json stats_json(const Corpus& c, const PackPlan& plan, std::int64_t seq_len) {
  const double slots = static_cast<double>(plan.num_sequences()) * static_cast<double>(seq_len);
  return {
      {"documents", c.totals.documents},
      {"tokens", c.totals.tokens},
      {"empty_documents", c.totals.empty_documents},
      {"skipped_documents", c.totals.skipped_documents},
      {"sequences", plan.num_sequences()},
      {"split_documents", plan.stats.split_documents},
      {"truncated_tokens", plan.stats.truncated_tokens},
      {"dropped_tokens", plan.stats.dropped_tokens},
      {"dropped_documents", plan.stats.dropped_documents},
      {"padding_tokens", plan.stats.padding_tokens},
      {"padding_fraction", slots > 0 ? static_cast<double>(plan.stats.padding_tokens) / slots : 0.0},
  };
}

void print_summary(const PackSummary& s, const fs::path& out) {
  log_info("wrote {} ({:.1f} s)", out.string(), s.seconds);
  log_info("  documents        {:>14}", s.documents);
  log_info("  tokens           {:>14}", s.tokens);
  if (s.target_tokens) log_info("  target tokens    {:>14}  (loss mask 1)", *s.target_tokens);
  log_info("  sequences        {:>14}  (train {}, valid {})", s.sequences, s.train_sequences, s.valid_sequences);
  log_info("  shards           {:>14}", s.shards);
  log_info("  split documents  {:>14}", s.plan.split_documents);
  log_info("  truncated tokens {:>14}", s.plan.truncated_tokens);
  log_info("  dropped tokens   {:>14}  ({} documents)", s.plan.dropped_tokens, s.plan.dropped_documents);
  log_info("  padding tokens   {:>14}", s.plan.padding_tokens);
  if (s.skipped_documents) log_info("  skipped (bad)    {:>14}", s.skipped_documents);
  log_info("  tokens/s         {:>14.0f}", s.seconds > 0 ? static_cast<double>(s.tokens) / s.seconds : 0.0);
  if (s.target_tokens && s.plan.split_documents > 0)   // fine-tuning records (a loss mask) cut apart
    log_line(fmt::format("warning: {} record{} longer than --seq-len split mid-record (--long-docs split): a piece after "
                         "the first trains on its answers without the prompt before them; --long-docs truncate or drop "
                         "keeps every record whole", s.plan.split_documents, s.plan.split_documents > 1 ? "s" : ""));
}

// Refuses up front (exit 2) when the shards cannot fit on the output's filesystem. A shard's bytes (no filter, every
// chunk allocated: io/shard_writer.cpp) are its tokens (int32, and a byte each with a loss mask), per sequence its
// length and document offset (4 + 8 B) and one chunk address per chunk (8 B), per document piece its start (4 B),
// and HDF5's superblock and object headers (a few KiB a file): 1.015x the 299 KB of the sample corpus at S = 256.
void check_free_space(const fs::path& dir, const PackPlan& plan, const shard::ShardParams& params,
                      std::size_t shards) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return;
  constexpr double kPerFile = 4096;
  const auto S = static_cast<double>(params.seq_len);
  const double chunks = S / static_cast<double>(shard::chunk_len_for(params.seq_len, params.sp)) *
                        (params.has_loss_mask ? 2.0 : 1.0);   // per sequence
  const double per_sequence = S * (params.has_loss_mask ? 5.0 : 4.0) + 12.0 + 8.0 * chunks;
  const double need = static_cast<double>(plan.num_sequences()) * per_sequence +
                      4.0 * static_cast<double>(plan.pieces.size()) + kPerFile * static_cast<double>(shards + 1);
  const double avail = static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize);
  if (need > avail)
    throw BadInput(fmt::format("the output filesystem of {} is full: the shards need {:.1f} MiB, {:.1f} MiB are free",
                               dir.parent_path().string(), need / (1 << 20), avail / (1 << 20)),
                   "free space there or choose another --output");
}

}  // namespace

void check_seq_len(std::int64_t seq_len, std::int64_t sp, std::int64_t sp_ring, std::int64_t alignment) {
  check_ring_degree(sp, sp_ring);
  // the trainer's rule, one for both: every SP slice aligned (S % (sp × align)), and for a ring, S in 2R chunks of
  // sp/R pieces (S % (2 × sp)), as ulysses-train checks data it trains under --sp-ring
  check_ring_split(seq_len, sp, 1, "--seq-len", alignment);
  if (sp_ring > 1) check_ring_split(seq_len, sp, sp_ring, "--seq-len");
  if (seq_len > (std::int64_t{1} << 31) - 1)
    throw BadInput(fmt::format("--seq-len {} exceeds the format's limit of 2^31-1 tokens", seq_len),
                   "pass a --seq-len of at most 2147483647");
}

PackSummary run_pack(const PackOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  PhaseTimer phases;
  check_seq_len(o.seq_len, o.sp, o.sp_ring, o.alignment);
  const int threads = thread_count(o.threads);
  ReaderOptions reader = o.reader;
  reader.vocab_size = check_model(o);
  const std::vector<std::string> paths = expand_inputs(o.inputs);
  std::optional<tokenize::Tokenizer> tokenizer;
  if (!o.tokenizer.empty()) {
    if (!reader.mask_key.empty())
      throw BadInput("--loss-mask-key cannot be used with --tokenizer: text has no per-token loss mask",
                     "pack SFT data as token ids with their mask (--tokens-key, --loss-mask-key)");
    tokenizer.emplace(load_tokenizer(o.tokenizer, reader.vocab_size, reader.append_eos, reader.add_special_tokens));
    reader.tokenizer = &*tokenizer;
  }

  OutputDir out(o.output, o.overwrite);
  reader.scratch_dir = out.tmp() / ".scratch";
  fs::create_directories(reader.scratch_dir);

  phases.mark("setup");
  Corpus corpus = scan_corpus(paths, reader, threads);
  phases.mark("scan");
  if (corpus.docs.empty())
    throw BadInput(fmt::format("the corpus is empty: {} input(s) hold no documents with tokens", paths.size()),
                   "check --format, the token key (--tokens-key) and the inputs");
  PackPlan plan = make_plan(o, corpus);
  if (plan.num_sequences() == 0)
    throw BadInput(fmt::format("no sequence could be made: {} tokens with --policy {} and --seq-len {}",
                               corpus.totals.tokens, policy_name(o.policy), o.seq_len),
                   "use a shorter --seq-len or --policy bfd");

  std::vector<std::uint64_t> order = shuffled_order(plan.num_sequences(), o.seed);
  const std::uint64_t n_valid = valid_count(o.valid_fraction, order.size());
  const auto per_shard = static_cast<std::uint64_t>(std::max<std::int64_t>(1, o.shard_tokens / o.seq_len));
  std::span<const std::uint64_t> all(order);
  std::vector<ShardJob> jobs = make_jobs(all.subspan(n_valid), per_shard, "shard", "train");
  std::vector<ShardJob> valid_jobs = make_jobs(all.first(n_valid), per_shard, "valid", "valid");
  jobs.insert(jobs.end(), valid_jobs.begin(), valid_jobs.end());

  phases.mark("plan");
  shard::ShardParams params{o.seq_len, o.sp, o.alignment, o.pad_id, corpus.has_loss_mask};
  check_free_space(out.tmp(), plan, params, jobs.size());
  shard::Manifest m;
  const WrittenShards written = write_shards(jobs, plan, corpus, params, out.tmp(), threads);
  m.shards = written.entries;
  fs::remove_all(reader.scratch_dir);
  phases.mark("write");
  if (corpus.has_loss_mask && written.target_tokens == 0)   // nothing published: the folder is not committed
    throw BadInput(fmt::format("every loss-mask value under \"{}\" is 0 ({} tokens, {} documents): no token would be "
                               "trained", o.reader.mask_key, corpus.totals.tokens, corpus.totals.documents),
                   "mark the tokens to train on with 1 (an answer's, a completion's), or pack without "
                   "--loss-mask-key to train on every token");

  m.seq_len = o.seq_len;
  m.sp = o.sp;
  m.sp_ring = o.sp_ring;
  m.alignment = o.alignment;
  m.pad_id = o.pad_id;
  m.vocab_size = reader.vocab_size;
  m.max_token_id = corpus.totals.max_id;
  m.has_loss_mask = corpus.has_loss_mask;
  m.policy = policy_name(o.policy);
  m.seed = o.seed;
  m.command = o.command;
  m.created_by = "ulysses-pack 0.1.0";
  m.inputs = corpus.inputs;
  if (tokenizer)
    m.tokenizer = {tokenizer->file().string(), tokenizer->file_hash(),
                   reader.append_eos ? std::int64_t{*tokenizer->eos_id()} : -1, reader.add_special_tokens};
  m.stats = stats_json(corpus, plan, o.seq_len);
  if (corpus.has_loss_mask) m.stats["target_tokens"] = written.target_tokens;
  shard::write_manifest(m, out.tmp() / "manifest.json");
  out.commit();
  phases.mark("manifest");

  PackSummary s;
  s.documents = corpus.totals.documents;
  s.tokens = corpus.totals.tokens;
  s.sequences = plan.num_sequences();
  s.valid_sequences = n_valid;
  s.train_sequences = s.sequences - n_valid;
  s.shards = jobs.size();
  s.skipped_documents = corpus.totals.skipped_documents;
  s.empty_documents = corpus.totals.empty_documents;
  s.plan = plan.stats;
  s.target_tokens = corpus.has_loss_mask ? std::optional(written.target_tokens) : std::nullopt;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_summary(s, o.output);
  return s;
}

}  // namespace ulysses::pack
