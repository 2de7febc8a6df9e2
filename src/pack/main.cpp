// ulysses-pack: tokenized corpus or text (JSONL, plain, parquet) → SP-aligned HDF5 shards (pack), text → ids (tokenize), and
// inspect/verify of a packed dataset.
// One set_up_X per subcommand fills an options struct; the run_X functions (pack.hpp) do the work.
#include <CLI/CLI.hpp>

#include <map>

#include "arch/rope_flags.hpp"
#include "core/cli.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/main_guard.hpp"
#include "pack/pack.hpp"

namespace up = ulysses::pack;

namespace {

const char* kPackExamples = R"(
Examples:
  # JSONL of token ids, 8K sequences for SP=4, checked against the model's config
  ulysses-pack pack data/*.jsonl.zst -o packed/ --seq-len 8192 --sp 4 --model-config llama/config.json
  # a Megatron dataset (prefix of .bin/.idx), concatenate-and-chunk, 1% validation split
  ulysses-pack pack corpus_text_document -o packed/ --seq-len 131072 --sp 8 --policy concat --valid-fraction 0.01
  # nanoGPT's headerless uint16 tokens, documents end at EOS 50256
  ulysses-pack pack train.bin --format flat --flat-dtype uint16 --eos-id 50256 -o packed/ --seq-len 4096
  # SFT: prompt tokens excluded from the loss
  ulysses-pack pack sft.jsonl --loss-mask-key loss_mask -o packed/ --seq-len 16384 --sp 2
  # raw text ({"text": "..."} per line), tokenized with the model's own tokenizer.json, EOS after each document
  ulysses-pack pack corpus.jsonl.zst --tokenizer models/Llama-3.1-8B -o packed/ --seq-len 131072 --sp 8 \
      --model-config models/Llama-3.1-8B/config.json
  # a Hugging Face dataset's parquet files: the "text" column tokenized (or, without --tokenizer, "input_ids")
  ulysses-pack pack data/train-*.parquet --tokenizer models/Qwen3-8B -o packed/ --seq-len 65536 --sp 4)";

const char* kTokenizeExamples = R"(
Example:
  # text → ids ({"input_ids": [...]} per line), then pack the ids as usual
  ulysses-pack tokenize corpus.jsonl.zst -o ids.jsonl --tokenizer models/Llama-3.1-8B
  # the "content" column of parquet files
  ulysses-pack tokenize data/*.parquet --text-key content -o ids.jsonl --tokenizer models/Llama-3.1-8B)";

struct CliState {
  up::PackOptions pack;
  up::TokenizeOptions tokenize;
  std::string text_split = "file";
  std::string format = "auto", policy = "bfd", long_docs, split_at, flat_dtype, on_error = "stop";
  std::filesystem::path dataset;
  std::int64_t sample = 0, max_tokens = 64;
  bool bytes = false, show_mask = false;
  int threads = 0;
};

template <typename T>
T pick(const std::map<std::string, T>& table, const std::string& value) {
  return table.at(value);   // CLI11's IsMember already restricted value to the table's keys
}

// The raw-text options that pack and tokenize share; returns --tokenizer's option.
CLI::Option* add_text_options(CLI::App* cmd, std::filesystem::path& tokenizer, std::string& text_split,
                              up::ReaderOptions& reader) {
  auto* option = cmd->add_option("--tokenizer", tokenizer, "Model folder (or its tokenizer.json / tokenizer.model)");
  cmd->add_option("--text-key", reader.text_key, "JSONL key / parquet column of a document's text (with --tokenizer)")->capture_default_str();
  cmd->add_option("--text-split", text_split,
                  "Plain text inputs (.txt, .md): one document per file, or per block between blank lines")
      ->check(CLI::IsMember({"file", "blank-line"}))->capture_default_str();
  // a flag and its negation each set the value (not CLI11's "--a,!--no-a", whose help reads "--no-a{false}" as if
  // false were the default)
  auto yes_no = [cmd](const std::string& name, bool& value, const std::string& yes, const std::string& no) {
    cmd->add_flag_callback("--" + name, [&value] { value = true; }, yes);
    cmd->add_flag_callback("--no-" + name, [&value] { value = false; }, no);
  };
  yes_no("append-eos", reader.append_eos, "With --tokenizer: end each document with the model's EOS (the default)",
         "With --tokenizer: do not end documents with EOS");
  yes_no("add-special-tokens", reader.add_special_tokens,
         "With --tokenizer: the BOS (template) the tokenizer puts around each document, as Hugging Face's "
         "add_special_tokens (the default)",
         "With --tokenizer: none of it (for text a chat template already rendered)");
  return option;
}

void set_up_pack(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("pack", "Pack tokenized inputs into SP-aligned HDF5 shards");
  cmd->footer(kPackExamples);
  auto& o = st.pack;
  cmd->add_option("inputs", o.inputs, "Input files or glob patterns (JSONL[.gz|.zst], Megatron .bin/.idx, llm.c, flat, text, parquet)")
      ->required();
  cmd->add_option("-o,--output", o.output, "Output dataset directory (written atomically)")->required();
  cmd->add_option("--seq-len", o.seq_len, "Global sequence length S (multiple of --sp × --align)")->required();
  cmd->add_option("--sp", o.sp, "Sequence-parallel degree P the slices align to")->capture_default_str();
  ulysses::add_sp_ring_option(*cmd, o.sp_ring,
                              "the trainer's; each sequence in 2R chunks, so S % (2 × --sp × --align) == 0");
  cmd->add_option("--align", o.alignment, "Per-rank slice alignment in tokens")->capture_default_str();
  cmd->add_option("--policy", st.policy, "Packing policy")
      ->check(CLI::IsMember({"bfd", "concat", "pad"}))->capture_default_str();
  cmd->add_option("--long-docs", st.long_docs,
                  "Documents longer than S: split into S-token pieces (bfd's default), truncate to S (pad's "
                  "default) or drop; counted in the report")
      ->check(CLI::IsMember({"split", "truncate", "drop"}));
  cmd->add_option("--pad-id", o.pad_id, "Token id used for padding (never a label)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the global sequence shuffle")->capture_default_str();
  cmd->add_option("--valid-fraction", o.valid_fraction, "Fraction of sequences split off as validation")
      ->check(CLI::Range(0.0, 0.5))->capture_default_str();
  cmd->add_option("--shard-tokens", o.shard_tokens, "Target tokens per shard file")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))->capture_default_str();
  cmd->add_option("--model-config", o.model_config, "Hugging Face config.json: check heads vs --sp and ids vs vocab");
  ulysses::arch::add_rope_flags(*cmd, o.rope);
  cmd->add_option("--vocab-size", o.vocab_size, "Refuse token ids >= this (instead of --model-config)");
  cmd->add_option("--format", st.format, "Input format (auto: by extension / magic)")
      ->check(CLI::IsMember({"auto", "jsonl", "megatron", "llmc", "flat", "text", "parquet"}))->capture_default_str();
  cmd->add_option("--tokens-key", o.reader.tokens_key, "JSONL key / parquet column of the token ids")->capture_default_str();
  auto* tokenizer = add_text_options(cmd, o.tokenizer, st.text_split, o.reader);
  tokenizer->description("Model folder (or its tokenizer.json / tokenizer.model): the inputs hold text, tokenized here");
  cmd->add_option("--loss-mask-key", o.reader.mask_key, "JSONL key / parquet column of a per-token 0/1 loss mask (SFT)")
      ->excludes(tokenizer);
  cmd->add_option("--eos-id", o.reader.eos_id, "llm.c/flat: split documents at this token id");
  cmd->add_option("--split-at", st.split_at, "llm.c/flat: EOS ends a document (after) or starts one (before)")
      ->check(CLI::IsMember({"after", "before"}));
  cmd->add_option("--flat-dtype", st.flat_dtype, "flat token files: uint16 or uint32")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  cmd->add_option("--on-error", st.on_error, "Bad documents (JSONL lines, text, parquet rows): stop, or skip and count them")
      ->check(CLI::IsMember({"stop", "skip"}))->capture_default_str();
  cmd->add_option("--threads", o.threads, "Worker threads (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_flag("--overwrite", o.overwrite, "Replace an existing output directory");
}

void set_up_inspect(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("inspect", "Print a packed dataset's statistics and a sample sequence");
  cmd->footer("\nExamples:\n  ulysses-pack inspect packed/ --sample 0 --bytes\n  ulysses-pack inspect sft-packed/ "
              "--sample 3 --show-mask   # which tokens are trained on");
  cmd->add_option("dataset", st.dataset, "Packed dataset directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--sample", st.sample, "Index of the train sequence to show (-1: none)")->capture_default_str();
  cmd->add_option("--max-tokens", st.max_tokens, "Tokens shown per document")->check(CLI::Range(0, 1 << 30))->capture_default_str();
  cmd->add_flag("--bytes", st.bytes, "Show ids < 128 as ASCII (byte-level corpora)");
  cmd->add_flag("--show-mask", st.show_mask, "With a loss mask: under each document of the sample, its mask (1: a "
                                             "target token) for the tokens shown");
}

void set_up_tokenize(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("tokenize", "Tokenize text (JSONL, plain text, parquet) into JSONL token ids with the model's tokenizer");
  cmd->footer(kTokenizeExamples);
  auto& o = st.tokenize;
  cmd->add_option("inputs", o.inputs, "JSONL[.gz|.zst], plain text (.txt, .md) or parquet files or globs, in order")
      ->required();
  cmd->add_option("-o,--output", o.output, "Output JSONL file ({\"input_ids\": [...]} per document)")->required();
  add_text_options(cmd, o.tokenizer, st.text_split, o.reader)->required();
  cmd->add_option("--threads", o.threads, "Worker threads (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  cmd->add_flag("--overwrite", o.overwrite, "Replace an existing output file");
}

void set_up_verify(CLI::App& app, CliState& st) {
  auto* cmd = app.add_subcommand("verify", "Check checksums and invariants; exit 1 on any mismatch");
  cmd->footer("\nExample:\n  ulysses-pack verify packed/");
  cmd->add_option("dataset", st.dataset, "Packed dataset directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--threads", st.threads, "Shards checked in parallel")->check(CLI::Range(0, 4096))->capture_default_str();
}

// --long-docs, settled for the policy: bfd splits and pad truncates unless told; concat cuts every document at
// chunk edges, and pad keeps one piece per document, so neither takes what it cannot do.
up::LongDocs long_docs_for(up::Policy policy, const std::string& policy_name, const std::string& given) {
  if (given.empty()) return policy == up::Policy::kPad ? up::LongDocs::kTruncate : up::LongDocs::kSplit;
  if (policy == up::Policy::kConcat || (policy == up::Policy::kPad && given == "split"))
    throw ulysses::BadInput(fmt::format("--long-docs {}: the {} policy does not take it", given, policy_name),
                     policy == up::Policy::kConcat ? "concat cuts every document at chunk edges; use --policy bfd "
                                                     "to split, truncate or drop long documents"
                                                   : "pad keeps one piece per document: truncate or drop");
  return pick<up::LongDocs>({{"split", up::LongDocs::kSplit}, {"truncate", up::LongDocs::kTruncate},
                             {"drop", up::LongDocs::kDrop}}, given);
}

std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}

int run_pack_command(CliState& st, const std::string& cmdline) {
  auto& o = st.pack;
  o.command = cmdline;
  o.policy = pick<up::Policy>({{"bfd", up::Policy::kBfd}, {"concat", up::Policy::kConcat}, {"pad", up::Policy::kPad}},
                              st.policy);
  o.long_docs = long_docs_for(o.policy, st.policy, st.long_docs);
  o.reader.format = pick<up::Format>({{"auto", up::Format::kAuto}, {"jsonl", up::Format::kJsonl},
                                      {"megatron", up::Format::kMegatron}, {"llmc", up::Format::kLlmc},
                                      {"flat", up::Format::kFlat}, {"text", up::Format::kText},
                                      {"parquet", up::Format::kParquet}}, st.format);
  o.reader.text_split = st.text_split == "blank-line" ? up::TextSplit::kBlankLine : up::TextSplit::kFile;
  o.reader.on_error = st.on_error == "skip" ? up::OnError::kSkip : up::OnError::kStop;
  if (!st.split_at.empty()) {
    o.reader.split_at = st.split_at == "before" ? up::SplitAt::kBeforeEos : up::SplitAt::kAfterEos;
    o.reader.split_at_given = true;
  }
  if (!st.flat_dtype.empty()) o.reader.flat_token_bytes = st.flat_dtype == "uint16" ? 2 : 4;
  up::run_pack(o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ulysses::set_log_tag("pack");
  CLI::App app{"ulysses-pack: tokenized corpus or raw text → SP-aligned HDF5 shards for ulysses-train"};
  app.require_subcommand(1);
  CliState st;
  set_up_pack(app, st);
  set_up_inspect(app, st);
  set_up_verify(app, st);
  set_up_tokenize(app, st);
  if (auto code = ulysses::parse_command_line(app, argc, argv)) return *code;
  const std::string cmdline = command_line(argc, argv);
  return ulysses::run_guarded([&] {
    if (app.got_subcommand("pack")) return run_pack_command(st, cmdline);
    if (app.got_subcommand("inspect")) return up::run_inspect(st.dataset, st.sample, st.max_tokens, st.bytes, st.show_mask);
    if (app.got_subcommand("tokenize")) {
      st.tokenize.reader.text_split = st.text_split == "blank-line" ? up::TextSplit::kBlankLine : up::TextSplit::kFile;
      return up::run_tokenize(st.tokenize);
    }
    return up::run_verify(st.dataset, st.threads);
  });
}
