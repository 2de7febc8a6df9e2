// Writing what ulysses-ckpt produces: tensors streamed from Weights into a safetensors file (converted,
// hashed as written) and verified by reading the file back; small text files checked for short writes;
// free space checked before any work. Outputs go into an OutputDir (core/output_dir.hpp), so a failure
// at any point leaves no complete-looking directory behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/source.hpp"
#include "io/safetensors.hpp"

namespace ulysses {
class Progress;
}

namespace ulysses::ckpt {

// One tensor to write: `name` in the output, read from `source` (a name in `from`, or zeros when empty), plus a
// LoRA update when `delta` is set (export-hf --merge-lora; the sum formed in fp32).
struct OutTensor {
  std::string name, source;
  std::vector<std::int64_t> shape;
  st::DType dtype;
  std::shared_ptr<const LoraDelta> delta = nullptr;
  std::uint64_t nbytes() const;
};

// Streams `tensors` into a new safetensors file at `path`, converting each from its source dtype to
// OutTensor::dtype (adding its LoRA update first) in kChunkBytes pieces. Returns the xxh3 of each tensor's
// written bytes, in order. A tensor holding NaN or ±inf as written (a diverged run, or an fp16 overflow) is a
// BadInput naming it unless allow_nonfinite (--allow-nonfinite).
std::vector<std::string> write_tensors(const std::filesystem::path& path, const Weights& from,
                                       const std::vector<OutTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata, Progress* progress,
                                       bool allow_nonfinite);

// Re-opens `path` and checks it holds exactly `tensors` (names, dtypes, shapes, in order, the file size
// the header implies) with the given per-tensor checksums. std::runtime_error on any difference.
void verify_tensors(const std::filesystem::path& path, const std::vector<OutTensor>& tensors,
                    const std::vector<std::string>& checksums);

// Header + data bytes of a safetensors file holding `tensors` (as our Writer lays it out, ±8 bytes).
std::uint64_t safetensors_bytes(const std::vector<OutTensor>& tensors);

// BadInput when the filesystem that will hold `output` has fewer than `bytes` free (plus 1 MiB).
void require_free_space(const std::filesystem::path& output, std::uint64_t bytes);

void write_text(const std::filesystem::path& path, const std::string& text);   // runtime_error on short write

// ---- What export-hf and export-peft share -------------------------------------------------------------------

// `names` of `from` as tensors to write: each under prefix + its name, cast to `dtype`; and their bytes in all.
struct ExportTensors {
  std::vector<OutTensor> tensors;
  std::uint64_t total = 0;
};
ExportTensors export_tensors(const Weights& from, const std::vector<std::string>& names, st::DType dtype,
                             const std::string& prefix = "");

// An export's frame: `output` made atomically (OutputDir; --overwrite), its free space checked for `tensors`, the
// checkpoint's checksums verified on a second thread while write(tmp, progress) puts the files into the temporary
// directory; renamed into place only when both succeeded (a corrupt checkpoint or a failed write leaves nothing).
void write_export(const std::filesystem::path& output, bool overwrite, const Checkpoint& c,
                  const std::vector<OutTensor>& tensors, const std::string& progress_name,
                  const std::function<void(const std::filesystem::path& tmp, Progress& progress)>& write);
void copy_file_checked(const std::filesystem::path& from, const std::filesystem::path& to);



}  // namespace ulysses::ckpt
