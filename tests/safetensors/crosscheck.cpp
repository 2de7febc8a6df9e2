// The C++ half of crosscheck.py (the official safetensors library and transformers are the reference):
//   st_crosscheck write PLAN.json OUT.safetensors
//       PLAN = {"metadata": {str: str}, "tensors": [{"name", "dtype", "shape"}]}; tensor i holds
//       st_test::test_bytes(dtype, numel, salt = i), written with st::Writer.
//   st_crosscheck read EXPECTED.json
//       EXPECTED = {"cases": [{"dir", "tensors": {name: {"dtype", "shape", "crc32"}}, "metadata"?}]};
//       opens each dir with st::HfWeights and compares the sorted names, each dtype, shape and the CRC32
//       of its bytes, and (single-file dirs) the metadata of model.safetensors.
// Exit 0 when everything matches; 1 with one stderr line per mismatch; 2 for a BadInput.
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/main_guard.hpp"
#include "io/safetensors.hpp"
#include "test_values.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ulysses::st;

namespace {

json load_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw ulysses::BadInput(fmt::format("cannot open {}", path.string()));
  return json::parse(in);
}

int write_plan(const fs::path& plan_path, const fs::path& out) {
  const json plan = load_json(plan_path);
  std::vector<Writer::Decl> decls;
  for (const json& t : plan.at("tensors"))
    decls.push_back({t.at("name"), dtype_from_name(t.at("dtype"), plan_path.string()), t.at("shape")});
  Writer w(out, decls, plan.at("metadata").get<std::map<std::string, std::string>>());
  for (std::size_t i = 0; i < decls.size(); ++i) {
    const auto bytes = st_test::test_bytes(decls[i].dtype, st_test::numel(decls[i].shape), i);
    w.write_next(bytes.data(), bytes.size());
  }
  w.finish();
  fmt::print("wrote {} tensors to {}\n", decls.size(), out.string());
  return 0;
}

// Compares one directory with its expectation; returns the number of mismatches.
int check_case(const json& c) {
  const fs::path dir = c.at("dir").get<std::string>();
  int mismatches = 0;
  auto mismatch = [&](const std::string& what) {
    fmt::print(stderr, "MISMATCH {}: {}\n", dir.string(), what);
    ++mismatches;
  };
  const HfWeights w(dir);
  std::vector<std::string> want_names;   // json objects iterate in sorted order, as names() returns
  for (const auto& [name, _] : c.at("tensors").items()) want_names.push_back(name);
  if (w.names() != want_names)
    mismatch(fmt::format("names [{}] != expected [{}]", fmt::join(w.names(), ", "), fmt::join(want_names, ", ")));
  std::uint64_t total = 0;
  for (const auto& [name, want] : c.at("tensors").items()) {
    if (!w.contains(name)) continue;   // reported above
    const TensorInfo& t = w.info(name);
    std::vector<unsigned char> bytes(t.nbytes());
    w.read(name, bytes.data());
    total += bytes.size();
    const auto crc = crc32_z(0, bytes.data(), bytes.size());
    if (want.at("dtype").get<std::string>() != dtype_name(t.dtype))
      mismatch(fmt::format("{} dtype {} != {}", name, dtype_name(t.dtype), want.at("dtype").dump()));
    if (want.at("shape").get<std::vector<std::int64_t>>() != t.shape)
      mismatch(fmt::format("{} shape [{}] != {}", name, fmt::join(t.shape, ", "), want.at("shape").dump()));
    if (want.at("crc32").get<unsigned long>() != crc)
      mismatch(fmt::format("{} crc32 {} != {}", name, crc, want.at("crc32").dump()));
  }
  if (c.contains("metadata") &&
      Reader(dir / "model.safetensors").metadata() != c.at("metadata").get<std::map<std::string, std::string>>())
    mismatch("metadata differs");
  fmt::print("{} {}: {} tensors, {} bytes\n", mismatches ? "FAIL" : "ok", dir.string(), want_names.size(), total);
  return mismatches;
}

int check_expected(const fs::path& expected_path) {
  const json expected = load_json(expected_path);
  int mismatches = 0;
  for (const json& c : expected.at("cases")) mismatches += check_case(c);
  return mismatches ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ulysses::run_guarded([&] {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 3 && args[0] == "write") return write_plan(args[1], args[2]);
    if (args.size() == 2 && args[0] == "read") return check_expected(args[1]);
    throw ulysses::BadInput("usage: st_crosscheck write PLAN.json OUT.safetensors | st_crosscheck read EXPECTED.json");
  });
}
