// Test helper: safetensors files as maps of torch::Tensor (F32, F64, I64 on the CPU), through our own
// reader and writer (io/safetensors.hpp), for tests that exchange tensors with a Python reference.
#pragma once

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include "io/safetensors.hpp"

namespace ulysses::testing {

inline std::map<std::string, torch::Tensor> read_tensors(const std::filesystem::path& file) {
  const std::map<st::DType, torch::ScalarType> types = {
      {st::DType::kF32, torch::kFloat}, {st::DType::kF64, torch::kDouble}, {st::DType::kI64, torch::kLong}};
  st::Reader reader(file);
  std::map<std::string, torch::Tensor> out;
  for (const auto& info : reader.tensors()) {
    if (!types.count(info.dtype)) throw std::runtime_error(file.string() + ": " + info.name + " is not F32/F64/I64");
    auto t = torch::empty(info.shape, torch::dtype(types.at(info.dtype)));
    reader.read(info, t.data_ptr());
    out[info.name] = t;
  }
  return out;
}

inline void write_tensors(const std::filesystem::path& file, const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<st::Writer::Decl> decls;
  for (const auto& [name, t] : tensors) {
    const auto type = t.scalar_type() == torch::kDouble ? st::DType::kF64
                      : t.scalar_type() == torch::kLong ? st::DType::kI64
                                                        : st::DType::kF32;
    decls.push_back({name, type, t.sizes().vec()});
  }
  st::Writer w(file, decls);
  for (const auto& [name, t] : tensors) {
    const torch::Tensor c = t.scalar_type() == torch::kDouble || t.scalar_type() == torch::kLong
                                ? t.contiguous() : t.to(torch::kFloat).contiguous();
    w.write_next(c.data_ptr(), c.nbytes());
  }
  w.finish();
}

}  // namespace ulysses::testing
