// Content checksums for manifests: XXH3-64 of a file's bytes, as 16 lowercase hex digits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace ulysses {

std::string xxh3_file_hex(const std::filesystem::path& path);   // throws BadInput if unreadable
std::string xxh3_hex(const void* data, std::size_t size);

}  // namespace ulysses
