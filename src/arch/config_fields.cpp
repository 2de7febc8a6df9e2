#include "arch/config_fields.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace ulysses::arch::config_fields {

const Json* field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

void bad_field(const std::string& file, const char* key, const std::string& why) {
  throw BadInput(fmt::format("{}: field \"{}\" {}", file, key, why), kConfigHint);
}

std::int64_t positive_int(const Json& v, const std::string& file, const char* key, std::int64_t max) {
  if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
    bad_field(file, key, fmt::format("must be a positive integer (got {})", v.dump()));
  if (v.get<std::int64_t>() > max)
    bad_field(file, key, fmt::format("is {}, more than the {} this toolkit accepts", v.get<std::int64_t>(), max));
  return v.get<std::int64_t>();
}

std::int64_t required_int(const Json& j, const std::string& file, const char* key, std::int64_t max) {
  const Json* v = field(j, key);
  if (!v) bad_field(file, key, "is required but missing");
  return positive_int(*v, file, key, max);
}

double number_or(const Json& j, const std::string& file, const char* key, double fallback) {
  const Json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) bad_field(file, key, fmt::format("must be a number (got {})", v->dump()));
  return v->get<double>();
}

bool bool_or(const Json& j, const std::string& file, const char* key, bool fallback) {
  const Json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_field(file, key, fmt::format("must be true or false (got {})", v->dump()));
  return v->get<bool>();
}

}  // namespace ulysses::arch::config_fields
