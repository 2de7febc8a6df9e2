// parquet.hpp for a build without pyarrow (meson option parquet): every parquet input is refused in one line.
#include <fmt/format.h>

#include "core/error.hpp"
#include "pack/readers/parquet.hpp"
#include "pack/readers/readers.hpp"

namespace ulysses::pack {
namespace {

[[noreturn]] void refuse(const std::filesystem::path& path) {
  throw BadInput(fmt::format("{}: this ulysses-pack was built without a parquet reader", path.string()),
                 "run tools/bootstrap.sh (it installs pyarrow, whose libparquet the build links) and build again, or "
                 "write the rows as JSONL");
}

}  // namespace

std::unique_ptr<RecordSource> parquet_text_records(const std::filesystem::path& path, const std::string&) {
  refuse(path);
}

std::unique_ptr<TokenSource> scan_parquet(const std::filesystem::path& path, const ReaderOptions&, DocSink&) {
  refuse(path);
}

}  // namespace ulysses::pack
