#include "ckpt/output.hpp"

#include <sys/statvfs.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ckpt/dtype.hpp"
#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_dir.hpp"
#include "core/progress.hpp"

namespace fs = std::filesystem;

namespace ulysses::ckpt {

std::uint64_t OutTensor::nbytes() const {
  std::uint64_t n = st::itemsize(dtype);
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

namespace {

// BadInput when tensor t, as written, held `bad` NaN or infinite values (and they are not allowed).
void check_finite(const Weights& from, const OutTensor& t, std::uint64_t bad, std::uint64_t numel, bool allow) {
  if (bad == 0 || allow) return;
  throw BadInput(fmt::format("{}: tensor '{}' written as {} holds {} NaN or infinite value(s) of {}",
                             t.source.empty() ? from.path().string() : from.file_of(t.source).string(), t.name,
                             st::dtype_name(t.dtype), bad, numel),
                 "the run diverged before this checkpoint (or the values overflow the dtype): use an earlier step-* "
                 "directory, or pass --allow-nonfinite to write it anyway");
}

}  // namespace

std::vector<std::string> write_tensors(const fs::path& path, const Weights& from, const std::vector<OutTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata, Progress* progress,
                                       bool allow_nonfinite) {
  std::vector<st::Writer::Decl> decls;
  for (const OutTensor& t : tensors) decls.push_back({t.name, t.dtype, t.shape});
  st::Writer writer(path, decls, metadata);
  std::vector<std::string> hashes;
  std::vector<char> raw, out;
  std::vector<float> f32;
  for (const OutTensor& t : tensors) {
    const std::size_t out_size = st::itemsize(t.dtype);
    const std::uint64_t numel = t.nbytes() / out_size;
    const std::uint64_t chunk = kChunkBytes / 4;   // elements per piece
    Xxh3Stream hash;
    std::uint64_t bad = 0;   // NaN or ±inf among the written values
    if (t.source.empty()) {   // zeros (a fresh optimizer state)
      out.assign(std::min(numel, chunk) * out_size, 0);
      for (std::uint64_t first = 0; first < numel; first += chunk) {
        const std::uint64_t n = std::min(chunk, numel - first) * out_size;
        hash.update(out.data(), n);
        writer.write_part(out.data(), n);
      }
    } else if (t.delta) {   // base + LoRA update, in fp32
      f32.resize(std::min(numel, chunk));
      out.resize(std::min(numel, chunk) * out_size);
      for (std::uint64_t first = 0; first < numel; first += chunk) {
        const std::uint64_t n = std::min(chunk, numel - first);
        from.read_f32(t.source, first, n, f32.data(), raw);
        t.delta->add_to(first, n, f32.data());
        convert(f32.data(), st::DType::kF32, out.data(), t.dtype, n);
        bad += nonfinite_count(out.data(), t.dtype, n);
        hash.update(out.data(), n * out_size);
        writer.write_part(out.data(), n * out_size);
      }
    } else {
      const st::TensorInfo& in = from.info(t.source);
      ULY_CHECK(in.numel() == numel, "'{}' has {} elements, '{}' {}", t.source, in.numel(), t.name, numel);
      const std::size_t in_size = st::itemsize(in.dtype);
      for (std::uint64_t first = 0; first < numel; first += chunk) {
        const std::uint64_t n = std::min(chunk, numel - first);
        raw.resize(n * in_size);
        from.read_range(t.source, first * in_size, n * in_size, raw.data());
        const char* bytes = raw.data();
        if (in.dtype != t.dtype) {
          if (!is_model_float(in.dtype) || !is_model_float(t.dtype))
            throw BadInput(fmt::format("{}: tensor '{}' is {}, which cannot be converted to {}",
                                       from.file_of(t.source).string(), t.source, st::dtype_name(in.dtype),
                                       st::dtype_name(t.dtype)),
                           "only floating-point weights (F32, BF16, F16) convert: export with the source's dtype (--dtype)");
          out.resize(n * out_size);
          convert(raw.data(), in.dtype, out.data(), t.dtype, n);
          bytes = out.data();
        }
        bad += nonfinite_count(bytes, t.dtype, n);
        hash.update(bytes, n * out_size);
        writer.write_part(bytes, n * out_size);
      }
    }
    check_finite(from, t, bad, numel, allow_nonfinite);
    hashes.push_back(hash.hex());
    if (progress) progress->add(1, t.nbytes());
  }
  writer.finish();
  return hashes;
}

void verify_tensors(const fs::path& path, const std::vector<OutTensor>& tensors, const std::vector<std::string>& checksums) {
  const st::Reader r(path);
  if (r.tensors().size() != tensors.size())
    throw std::runtime_error(fmt::format("verify {}: {} tensors read back, {} written", path.string(),
                                         r.tensors().size(), tensors.size()));
  std::uint64_t data_end = 0;
  std::vector<char> buf;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const OutTensor& t = tensors[i];
    const st::TensorInfo* info = r.find(t.name);
    if (!info || info->dtype != t.dtype || info->shape != t.shape)
      throw std::runtime_error(fmt::format("verify {}: tensor '{}' does not read back as {} [{}]", path.string(), t.name,
                                           st::dtype_name(t.dtype), fmt::join(t.shape, ", ")));
    Xxh3Stream hash;
    for (std::uint64_t off = 0; off < info->nbytes(); off += kChunkBytes) {
      const std::uint64_t n = std::min(kChunkBytes, info->nbytes() - off);
      buf.resize(n);
      r.read_range(*info, off, n, buf.data());
      hash.update(buf.data(), n);
    }
    if (hash.hex() != checksums[i])
      throw std::runtime_error(fmt::format("verify {}: tensor '{}' reads back with xxh3 {}, written {}", path.string(),
                                           t.name, hash.hex(), checksums[i]));
    data_end = std::max(data_end, info->end);
  }
  std::uint64_t header = 0;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&header), 8);
  const std::uint64_t expect = 8 + header + data_end, size = fs::file_size(path);
  if (size != expect)
    throw std::runtime_error(fmt::format("verify {}: {} bytes on disk, the header implies {}", path.string(), size, expect));
}

std::uint64_t safetensors_bytes(const std::vector<OutTensor>& tensors) {
  std::uint64_t n = 8 + 64;   // length + metadata
  for (const OutTensor& t : tensors) n += t.nbytes() + t.name.size() + 80;
  return n;
}

void require_free_space(const fs::path& output, std::uint64_t bytes) {
  fs::path probe = fs::absolute(output);
  while (!fs::exists(probe) && probe.has_parent_path() && probe != probe.parent_path()) probe = probe.parent_path();
  struct statvfs s {};
  if (::statvfs(probe.c_str(), &s) != 0) return;   // cannot tell: the writes will say
  const std::uint64_t free = static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
  const std::uint64_t need = bytes + (std::uint64_t{1} << 20);
  if (free < need)
    throw BadInput(fmt::format("the output filesystem of {} is full: the output needs {}, {} are free", output.string(),
                               human_bytes(need), human_bytes(free)),
                   "free some space or write to another filesystem (-o)");
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("{}: short write ({})", path.string(), std::strerror(errno)));
}

void copy_file_checked(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot copy {} to {}: {}", from.string(), to.string(), ec.message()));
}

ExportTensors export_tensors(const Weights& from, const std::vector<std::string>& names, st::DType dtype,
                             const std::string& prefix) {
  ExportTensors out;
  for (const std::string& n : names) {
    out.tensors.push_back({prefix + n, n, from.info(n).shape, dtype});
    out.total += out.tensors.back().nbytes();
  }
  return out;
}

void write_export(const std::filesystem::path& output, bool overwrite, const Checkpoint& c,
                  const std::vector<OutTensor>& tensors, const std::string& progress_name,
                  const std::function<void(const std::filesystem::path& tmp, Progress& progress)>& write) {
  OutputDir out(output, overwrite);
  require_free_space(output, safetensors_bytes(tensors) + (std::uint64_t{1} << 20));
  std::future<void> checksums = std::async(std::launch::async, [&c] {
    verify_checksums(c.dir, c.manifest, c.model_files);
  });
  Progress progress(progress_name, tensors.size(), "tensors", "bytes");
  write(out.tmp(), progress);
  checksums.get();   // BadInput if the checkpoint was corrupt: the output is then removed, never renamed
  out.commit();
}

}  // namespace ulysses::ckpt
