// detect_format() and scan_input(): pick the reader for an input and run it.
//
// Guarantee: scan_input either succeeds, appending the input's documents to `docs` and adding its
// counts to `stats` (max_id takes the maximum), or throws leaving both as they were.
#include "pack/corpus.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string_view>

#include "core/error.hpp"
#include "pack/readers/input_file.hpp"
#include "pack/readers/readers.hpp"

namespace ulysses::pack {
namespace {

constexpr const char* kFormatHint =
    "pass --format jsonl|megatron|llmc|flat|text|parquet (flat also needs --flat-dtype uint16|uint32; text, "
    "--tokenizer)";

bool is_jsonl_name(std::string_view name) {
  constexpr std::array<std::string_view, 4> kSuffixes = {".jsonl", ".jsonl.gz", ".jsonl.zst", ".json"};
  return std::any_of(kSuffixes.begin(), kSuffixes.end(),
                     [&](std::string_view s) { return name.ends_with(s); });
}

bool is_text_name(std::string_view name) {
  constexpr std::array<std::string_view, 6> kSuffixes = {".txt", ".txt.gz", ".txt.zst", ".md", ".md.gz", ".md.zst"};
  return std::any_of(kSuffixes.begin(), kSuffixes.end(), [&](std::string_view s) { return name.ends_with(s); });
}

std::int32_t first_int32(const std::filesystem::path& path) {
  const InputFile file(path);
  std::int32_t value = 0;
  if (file.size() >= sizeof(value)) file.read_exact(0, &value, sizeof(value));
  return value;
}

void add_counts(ScanStats& total, const ScanStats& input) {
  total.documents += input.documents;
  total.tokens += input.tokens;
  total.empty_documents += input.empty_documents;
  total.skipped_documents += input.skipped_documents;
  total.max_id = std::max(total.max_id, input.max_id);
  total.input_bytes += input.input_bytes;
}

std::unique_ptr<TokenSource> scan_format(Format format, const std::filesystem::path& path,
                                         const ReaderOptions& options, DocSink& sink) {
  switch (format) {
    case Format::kJsonl: return scan_jsonl(path, options, sink);
    case Format::kMegatron: return scan_megatron(path, options, sink);
    case Format::kLlmc: return scan_llmc(path, options, sink);
    case Format::kFlat: return scan_flat(path, options, sink);
    case Format::kText: return scan_text(path, options, sink);
    case Format::kParquet: return scan_parquet(path, options, sink);
    case Format::kAuto: break;
  }
  check_failed(__FILE__, __LINE__, "format resolved", fmt::format("{}", static_cast<int>(format)));
}

}  // namespace

void DocSink::add(std::uint64_t offset, std::uint64_t length) {
  if (length == 0) {
    ++stats_.empty_documents;
    return;
  }
  if (length > std::numeric_limits<std::uint32_t>::max()) {
    throw BadInput(fmt::format("{}: a document of {} tokens (from token {}) is longer than the 2^32-1 a "
                               "document may have", input_, length, offset),
                   "split the input into documents (--eos-id for flat token files)");
  }
  docs_.push_back(DocRef{source_, static_cast<std::uint32_t>(length), offset});
  ++stats_.documents;
  stats_.tokens += length;
}

Format detect_format(const std::filesystem::path& path) {
  if (is_jsonl_name(path.filename().string())) return Format::kJsonl;
  if (is_text_name(path.filename().string())) return Format::kText;
  if (path.extension() == ".parquet") return Format::kParquet;
  const MegatronPaths megatron = megatron_paths(path);
  const bool has_idx = std::filesystem::exists(megatron.idx);
  const bool has_bin = std::filesystem::exists(megatron.bin);
  if (has_idx && has_bin) return Format::kMegatron;
  if (!std::filesystem::exists(path)) {
    throw BadInput(fmt::format("{}: no such file (nor a {} + {} pair)", path.string(),
                               megatron.idx.string(), megatron.bin.string()),
                   "check the path; a Megatron dataset may be named by its prefix (NAME for NAME.bin + NAME.idx)");
  }
  std::string why = "its name is not *.jsonl, *.jsonl.gz, *.jsonl.zst, *.json, text (*.txt, *.md, .gz/.zst) nor "
                    "*.parquet";
  if (path.extension() == ".bin") {
    const std::int32_t magic = first_int32(path);
    if (magic == kLlmcMagicGpt2 || magic == kLlmcMagicLlama3) return Format::kLlmc;
    why = fmt::format("its first int32 ({}) is not an llm.c magic ({} or {}) and there is no {}", magic,
                      kLlmcMagicGpt2, kLlmcMagicLlama3, megatron.idx.string());
  }
  throw BadInput(fmt::format("{}: cannot tell the input format: {}", path.string(), why), kFormatHint);
}

std::unique_ptr<TokenSource> scan_input(const std::filesystem::path& path, std::uint32_t source_id,
                                        const ReaderOptions& options, std::vector<DocRef>& docs,
                                        ScanStats& stats, std::string* checksum) {
  const Format format = options.format == Format::kAuto ? detect_format(path) : options.format;
  const std::size_t docs_before = docs.size();
  ScanStats input;
  DocSink sink(path.string(), source_id, docs, input);
  try {
    auto source = scan_format(format, path, options, sink);
    add_counts(stats, input);
    if (checksum != nullptr) *checksum = sink.checksum();
    return source;
  } catch (...) {
    docs.resize(docs_before);
    throw;
  }
}

}  // namespace ulysses::pack
