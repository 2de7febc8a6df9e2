#include "pack/scan.hpp"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::pack {
namespace {

const char* format_name(Format f) {
  switch (f) {
    case Format::kJsonl: return "jsonl";
    case Format::kMegatron: return "megatron";
    case Format::kLlmc: return "llmc";
    case Format::kFlat: return "flat";
    case Format::kAuto: break;
  }
  return "auto";
}

// Megatron inputs name a pair; both .bin and .idx globs must not count the same dataset twice.
std::string dataset_key(const std::string& path) {
  fs::path p(path);
  auto ext = p.extension();
  if ((ext == ".bin" || ext == ".idx") && fs::exists(fs::path(p).replace_extension(".idx")) &&
      fs::exists(fs::path(p).replace_extension(".bin")))
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
      if (!fs::exists(m))
        throw BadInput(fmt::format("input {} does not exist", m), "check the path or quote the glob pattern");
      if (seen.insert(dataset_key(m)).second) out.push_back(m);
    }
  }
  if (out.empty()) throw BadInput("no input files given", "pass one or more files or glob patterns");
  return out;
}

// The files an input names: a Megatron dataset is its .bin and .idx, anything else the file itself.
std::vector<fs::path> files_of(const std::string& path, Format format) {
  if (format != Format::kMegatron) return {path};
  fs::path prefix(path);
  if (prefix.extension() == ".bin" || prefix.extension() == ".idx") prefix.replace_extension("");
  return {fs::path(prefix).concat(".bin"), fs::path(prefix).concat(".idx")};
}

Corpus scan_corpus(const std::vector<std::string>& paths, const ReaderOptions& options, int threads) {
  const std::size_t n = paths.size();
  std::vector<std::vector<DocRef>> docs(n);
  std::vector<ScanStats> stats(n);
  Corpus corpus;
  corpus.sources.resize(n);
  corpus.inputs.resize(n);
  std::vector<Format> formats(n);
  for (std::size_t i = 0; i < n; ++i)
    formats[i] = options.format == Format::kAuto ? detect_format(paths[i]) : options.format;
  Progress progress("scan", n, "files", "tokens");
  // Tasks [0, n) scan the inputs, [n, 2n) checksum them: with one large input both cores still work.
  parallel_for(2 * n, threads, [&](std::size_t task) {
    const std::size_t i = task % n;
    auto& in = corpus.inputs[i];
    if (task >= n) {
      std::vector<std::string> sums;
      for (const auto& f : files_of(paths[i], formats[i])) sums.push_back(xxh3_file_hex(f));
      in.xxh3 = fmt::format("{}", fmt::join(sums, "+"));
      return;
    }
    corpus.sources[i] = scan_input(paths[i], static_cast<std::uint32_t>(i), options, docs[i], stats[i]);
    in.path = paths[i];
    in.format = format_name(formats[i]);
    in.bytes = static_cast<std::int64_t>(stats[i].input_bytes);
    in.documents = static_cast<std::int64_t>(stats[i].documents);
    in.tokens = static_cast<std::int64_t>(stats[i].tokens);
    progress.add(1, stats[i].tokens);
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
