#include "pack/scan.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"
#include "pack/readers/readers.hpp"

namespace fs = std::filesystem;

namespace ulysses::pack {
namespace {

const char* format_name(Format f) {
  switch (f) {
    case Format::kJsonl: return "jsonl";
    case Format::kMegatron: return "megatron";
    case Format::kLlmc: return "llmc";
    case Format::kFlat: return "flat";
    case Format::kText: return "text";
    case Format::kParquet: return "parquet";
    case Format::kAuto: break;
  }
  return "auto";
}


// fs::exists without its filesystem_error: a name too long for the filesystem (ENAMETOOLONG) does not exist.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Megatron inputs name a pair; both .bin and .idx globs must not count the same dataset twice.
std::string dataset_key(const std::string& path) {
  fs::path p(path);
  auto ext = p.extension();
  if ((ext == ".bin" || ext == ".idx") && path_exists(fs::path(p).replace_extension(".idx")) &&
      path_exists(fs::path(p).replace_extension(".bin")))
    return fs::path(p).replace_extension("").string();
  return path;
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& pattern : patterns) {
    glob_t g{};
    int rc = glob(pattern.c_str(), GLOB_NOCHECK, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    std::sort(matches.begin(), matches.end());
    for (const auto& m : matches) {
      const MegatronPaths pair = megatron_paths(m);   // Megatron's own convention: the prefix of a .bin/.idx pair
      if (!path_exists(m) && !(path_exists(pair.bin) && path_exists(pair.idx)))
        throw BadInput(fmt::format("input {} does not exist (nor {} + {})", printable(m, 200), printable(pair.bin.string(), 200),
                                   printable(pair.idx.string(), 200)),
                       "check the path or quote the glob pattern");
      if (seen.insert(dataset_key(m)).second) out.push_back(m);
    }
  }
  if (out.empty()) throw BadInput("no input files given", "pass one or more files or glob patterns");
  return out;
}

Corpus scan_corpus(const std::vector<std::string>& paths, const ReaderOptions& options, int threads) {
  const std::size_t n = paths.size();
  std::vector<std::vector<DocRef>> docs(n);
  std::vector<ScanStats> stats(n);
  Corpus corpus;
  corpus.sources.resize(n);
  corpus.inputs.resize(n);
  std::vector<Format> formats(n);
  for (std::size_t i = 0; i < n; ++i) {
    formats[i] = options.format == Format::kAuto ? detect_format(paths[i]) : options.format;
    if (options.tokenizer != nullptr && !holds_text(formats[i]))
      throw BadInput(fmt::format("input {} is {}, but --tokenizer reads text (JSONL, plain or parquet)", paths[i],
                                 format_name(formats[i])),
                     "pass JSONL[.gz|.zst] or parquet files with the text under --text-key, or .txt files, or drop "
                     "--tokenizer for token ids");
  }
  // Binary readers hash their input while scanning it; the others (holds_text) are hashed by tasks of their own
  // (tasks [n, ...)), in parallel with the parsing. Spare threads go to the blocks of binary inputs.
  std::vector<std::size_t> hash_tasks;
  for (std::size_t i = 0; i < n; ++i)
    if (holds_text(formats[i])) hash_tasks.push_back(i);
  ReaderOptions reader = options;
  reader.threads = static_cast<int>(std::max<std::size_t>(1, static_cast<std::size_t>(threads) / n));
  Progress progress("scan", n, "files", "tokens");
  reader.progress = &progress;   // text being tokenized reports its tokens batch by batch; the rest, a file at a time
  parallel_for(n + hash_tasks.size(), threads, [&](std::size_t task) {
    if (task >= n) {
      const std::size_t i = hash_tasks[task - n];
      corpus.inputs[i].xxh3 = xxh3_file_hex(paths[i]);
      return;
    }
    const std::size_t i = task;
    auto& in = corpus.inputs[i];
    std::string checksum;
    corpus.sources[i] = scan_input(paths[i], static_cast<std::uint32_t>(i), reader, docs[i], stats[i], &checksum);
    if (!holds_text(formats[i])) in.xxh3 = checksum;
    in.path = paths[i];
    in.format = format_name(formats[i]);
    in.bytes = static_cast<std::int64_t>(stats[i].input_bytes);
    in.documents = static_cast<std::int64_t>(stats[i].documents);
    in.tokens = static_cast<std::int64_t>(stats[i].tokens);
    progress.add(1, options.tokenizer != nullptr ? 0 : stats[i].tokens);
  });
  progress.finish();
  for (std::size_t i = 0; i < n; ++i) {
    corpus.docs.insert(corpus.docs.end(), docs[i].begin(), docs[i].end());
    auto& t = corpus.totals;
    t.documents += stats[i].documents;
    t.tokens += stats[i].tokens;
    t.empty_documents += stats[i].empty_documents;
    t.skipped_documents += stats[i].skipped_documents;
    t.input_bytes += stats[i].input_bytes;
    t.max_id = std::max(t.max_id, stats[i].max_id);
    corpus.has_loss_mask = corpus.has_loss_mask || corpus.sources[i]->has_loss_mask();
  }
  return corpus;
}

}  // namespace ulysses::pack
