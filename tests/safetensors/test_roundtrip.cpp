// Writer -> Reader round trips (every dtype, scalars, empty tensors, metadata, header layout), concurrent
// reads, a short read, and the Writer's failure guarantees: misuse is a check failure, an existing file is
// refused, and an unfinished or failed file is removed.
#include <sys/resource.h>

#include <csignal>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "st_test_util.hpp"

namespace fs = std::filesystem;
using namespace ulysses::st;
using st_test::read_all;
using st_test::test_bytes;

namespace {

const std::vector<Writer::Decl> kEveryDtype = {
    {"f64", DType::kF64, {2, 3}},    {"f32", DType::kF32, {3, 5}}, {"f16", DType::kF16, {7}},
    {"bf16", DType::kBF16, {4, 4}},  {"i64", DType::kI64, {2, 2}}, {"i32", DType::kI32, {9}},
    {"i16", DType::kI16, {2, 2, 2}}, {"i8", DType::kI8, {11}},     {"u8", DType::kU8, {300}},
    {"bool", DType::kBool, {3, 3}},  {"scalar", DType::kF32, {}},  {"empty", DType::kBF16, {0, 4}},
};

std::string file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// Lowers the file-size limit so the next write past it fails with EFBIG (a stand-in for ENOSPC).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() { ::setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

}  // namespace

using RoundTrip = st_test::ScratchDir;

TEST_F(RoundTrip, EveryDtypeKeepsNameDtypeShapeAndBytes) {
  const fs::path file = root / "all.safetensors";
  st_test::write_test_file(file, kEveryDtype);
  const Reader r(file);
  ASSERT_EQ(r.tensors().size(), kEveryDtype.size());
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < kEveryDtype.size(); ++i) {
    const Writer::Decl& d = kEveryDtype[i];
    const TensorInfo& t = r.tensors()[i];   // sorted by offset = declared order
    SCOPED_TRACE(d.name);
    EXPECT_EQ(t.name, d.name);
    EXPECT_EQ(t.dtype, d.dtype);
    EXPECT_EQ(t.shape, d.shape);
    EXPECT_EQ(t.begin, offset);
    EXPECT_EQ(t.numel(), st_test::numel(d.shape));
    EXPECT_EQ(read_all(r, t), test_bytes(d.dtype, t.numel(), i));
    EXPECT_EQ(r.find(d.name), &t);
    offset = t.end;
  }
  EXPECT_EQ(r.find("absent"), nullptr);
  EXPECT_TRUE(r.metadata().empty());
}

TEST_F(RoundTrip, TestValuesAreTheDocumentedOnes) {   // crosscheck.py mirrors this formula
  EXPECT_EQ(test_bytes(DType::kBF16, 2, 0), (std::vector<std::uint8_t>{0xc8, 0xc1, 0xc4, 0xc1}));   // -25, -24.5
  EXPECT_EQ(test_bytes(DType::kF16, 2, 51), (std::vector<std::uint8_t>{0x00, 0x38, 0x00, 0x3c}));   // 0.5, 1
  EXPECT_EQ(test_bytes(DType::kI8, 2, 100), (std::vector<std::uint8_t>{50, 0xce}));                // 50, -50
  EXPECT_EQ(test_bytes(DType::kBool, 3, 0), (std::vector<std::uint8_t>{1, 0, 0}));
}

TEST_F(RoundTrip, HeaderIsInDeclaredOrderPaddedToEightAndFollowedByTheData) {
  const fs::path file = root / "order.safetensors";
  st_test::write_test_file(file, {{"z", DType::kF32, {1}}, {"a", DType::kBF16, {3}}, {"m", DType::kI8, {5}}},
                           {{"format", "pt"}});
  const std::string bytes = file_text(file);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 4 + 6 + 5);   // contiguous data right after the header
  const std::string header = bytes.substr(8, n);
  const auto json_end = header.find_last_not_of(' ') + 1;
  EXPECT_LT(n - json_end, 8u);
  const auto order = nlohmann::ordered_json::parse(header);
  std::vector<std::string> keys;
  for (const auto& [key, value] : order.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z", "a", "m"}));
  EXPECT_EQ(order["a"].dump(), R"({"dtype":"BF16","shape":[3],"data_offsets":[4,10]})");
}

TEST_F(RoundTrip, MetadataRoundTrips) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"empty", ""}, {"unicode", "ünïcödé ✓"}, {"quote", "a \"b\"\n"}};
  const fs::path file = root / "meta.safetensors";
  st_test::write_test_file(file, {{"w", DType::kF32, {2}}}, metadata);
  EXPECT_EQ(Reader(file).metadata(), metadata);
}

TEST_F(RoundTrip, NoTensorsIsAValidFile) {
  const fs::path file = root / "none.safetensors";
  st_test::write_test_file(file, {});
  EXPECT_TRUE(Reader(file).tensors().empty());
  EXPECT_EQ(fs::file_size(file), 16u);   // 8 + "{}" padded to 8
}

TEST_F(RoundTrip, ConcurrentReadsSeeTheirOwnTensor) {
  const fs::path file = root / "mt.safetensors";
  const std::vector<Writer::Decl> decls = {
      {"t0", DType::kF32, {1000}}, {"t1", DType::kF32, {1000}}, {"t2", DType::kF32, {1000}}, {"t3", DType::kF32, {1000}}};
  st_test::write_test_file(file, decls);
  const Reader r(file);
  std::vector<int> bad(decls.size(), 0);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < decls.size(); ++i)
    threads.emplace_back([&, i] {
      const auto want = test_bytes(DType::kF32, 1000, i);
      for (int rep = 0; rep < 200; ++rep) bad[i] += read_all(r, *r.find(decls[i].name)) != want;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad, std::vector<int>(decls.size(), 0));
}

TEST_F(RoundTrip, ShortReadNamesTheFile) {
  const fs::path file = root / "shrinks.safetensors";
  st_test::write_test_file(file, {{"w", DType::kF32, {64}}});
  const Reader r(file);
  fs::resize_file(file, fs::file_size(file) - 10);
  try {
    read_all(r, r.tensors()[0]);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
  }
}

TEST_F(RoundTrip, MovedReaderKeepsWorking) {
  const fs::path file = root / "move.safetensors";
  st_test::write_test_file(file, {{"w", DType::kI16, {5}}});
  Reader a(file);
  Reader b(std::move(a));
  Reader c(file);
  c = std::move(b);
  EXPECT_EQ(read_all(c, c.tensors()[0]), test_bytes(DType::kI16, 5, 0));
}

using WriterFailure = st_test::ScratchDir;

TEST_F(WriterFailure, ExistingFileIsRefusedAndKept) {
  const fs::path file = root / "exists.safetensors";
  st_test::write_bytes(file, "precious");
  EXPECT_THROW(Writer(file, {{"w", DType::kF32, {1}}}), ulysses::BadInput);
  EXPECT_EQ(file_text(file), "precious");
}

TEST_F(WriterFailure, WrongByteCountIsACheckFailure) {
  const fs::path file = root / "wrong.safetensors";
  Writer w(file, {{"w", DType::kF32, {4}}});
  const std::vector<std::uint8_t> bytes(15);
  EXPECT_THROW(w.write_next(bytes.data(), bytes.size()), std::logic_error);
}

TEST_F(WriterFailure, BadDeclarationsAreCheckFailuresAndCreateNoFile) {
  const fs::path file = root / "decl.safetensors";
  EXPECT_THROW(Writer(file, {{"w", DType::kF32, {-1}}}), std::logic_error);
  EXPECT_THROW(Writer(file, {{"w", DType::kF32, {1}}, {"w", DType::kF32, {1}}}), std::logic_error);
  EXPECT_THROW(Writer(file, {{"__metadata__", DType::kF32, {1}}}), std::logic_error);
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(WriterFailure, FinishWithUnwrittenTensorsFailsAndRemovesTheFile) {
  const fs::path file = root / "partial.safetensors";
  {
    Writer w(file, {{"a", DType::kU8, {2}}, {"b", DType::kU8, {2}}});
    const std::uint8_t two[2] = {1, 2};
    w.write_next(two, 2);
    try {
      w.finish();
      FAIL() << "no error";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("1 of 2 tensors written (next: 'b')"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(WriterFailure, UnfinishedWriterRemovesTheFile) {
  const fs::path file = root / "abandoned.safetensors";
  { Writer w(file, {{"a", DType::kU8, {2}}}); }
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(WriterFailure, ShortWriteNamesTheFileAndRemovesIt) {
  const fs::path file = root / "full.safetensors";
  const std::vector<std::uint8_t> big(1 << 20, 7);
  Writer w(file, {{"big", DType::kU8, {1 << 20}}});
  {
    FileSizeLimit limit(64 * 1024);
    try {
      w.write_next(big.data(), big.size());
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("short write"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_THROW(w.finish(), std::logic_error);   // the failed Writer stays failed
}
