#include "zeromount/pt/safetensors_read.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <memory>

#include "zeromount/pt/error.h"

namespace zm::pt::st {

namespace {

// Headers and indexes are parsed by nlohmann::json, keys in file order; a document that does not
// parse is refused by name, never read in part.
using Json = nlohmann::ordered_json;

Json parse(const std::string& text, const std::string& path) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw FormatError(where(path, "not valid JSON"));
  return doc;
}

uint64_t whole(const Json& v, const std::string& what) {
  if (!v.is_number_unsigned()) throw FormatError(what + " is not a whole number");
  return v.get<uint64_t>();
}

// A header is at most 100 MB, as the safetensors crate allows.
constexpr uint64_t kMaxHeader = 100'000'000;

}  // namespace

DType dtype_named(const std::string& name, const std::string& where_) {
  static const std::pair<const char*, DType> kNames[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"F64", DType::F64}, {"I64", DType::I64},
      {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},     {"U8", DType::U8},   {"BOOL", DType::Bool}};
  for (const auto& [n, d] : kNames)
    if (name == n) return d;
  throw FormatError(where_ + ": dtype '" + name + "' is not one zeromount reads");
}

Header read_header(const File& f) {
  Header h;
  h.path = f.path();
  if (f.size() < 8) throw FormatError(where(h.path, "shorter than the 8-byte header length of a safetensors file"));
  unsigned char len_bytes[8];
  f.read_exact(0, len_bytes, 8, "safetensors header length");
  uint64_t len = 0;
  for (int k = 7; k >= 0; --k) len = len << 8 | len_bytes[k];
  if (len > kMaxHeader || len > f.size() - 8)
    throw FormatError(where(h.path, "header length " + std::to_string(len) + " runs past the file (" +
                                        std::to_string(f.size()) + " bytes)"));
  h.data_start = 8 + len;
  const std::string text = f.read_string(8, size_t(len), "safetensors header");
  const Json doc = parse(text, h.path);
  if (!doc.is_object()) throw FormatError(where(h.path, "header is not a JSON object"));
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") continue;
    const std::string key = h.path + ": key '" + name + "'";
    const Json& entry = v;  // clang 14 cannot capture a structured binding
    const auto field = [&](const char* k) { return entry.is_object() && entry.contains(k) ? &entry.at(k) : nullptr; };
    const Json* dt = field("dtype");
    const Json* shape = field("shape");
    const Json* offs = field("data_offsets");
    if (!dt || !dt->is_string() || !shape || !shape->is_array() || !offs || !offs->is_array() || offs->size() != 2)
      throw FormatError(key + ": not a tensor entry (dtype, shape, data_offsets)");
    Entry e;
    e.name = name;
    e.dtype = dtype_named(dt->get<std::string>(), key);
    uint64_t n = 1;
    for (const auto& d : *shape) {
      const uint64_t x = whole(d, key + " shape");
      if (x && n > UINT64_MAX / x) throw FormatError(key + ": shape overflows");
      n *= x;
      e.shape.push_back(int64_t(x));
    }
    e.begin = whole((*offs)[0], key + " data_offsets") + h.data_start;
    e.end = whole((*offs)[1], key + " data_offsets") + h.data_start;
    if (e.end < e.begin || e.end - e.begin != n * element_size(e.dtype))
      throw FormatError(key + ": data_offsets hold " + std::to_string(e.end - e.begin) + " bytes, its shape needs " +
                        std::to_string(n * element_size(e.dtype)));
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  // Tiling: each tensor starts where the one before ended, and the last ends at the file's end.
  uint64_t at = h.data_start;
  for (const auto& e : h.tensors) {
    if (e.begin != at)
      throw FormatError(h.path + ": key '" + e.name + "' starts at byte " + std::to_string(e.begin) + ", not at " +
                        std::to_string(at) + (e.begin < at ? " (overlaps the tensor before)" : " (a gap before it)"));
    at = e.end;
  }
  if (at != f.size())
    throw FormatError(h.path + ": the tensors end at byte " + std::to_string(at) + " but the file has " +
                      std::to_string(f.size()) + (at > f.size() ? " (cut short)" : " (bytes after the last tensor)"));
  return h;
}

std::vector<std::pair<std::string, std::string>> read_index(const std::string& text, const std::string& path) {
  const Json doc = parse(text, path);
  if (!doc.is_object() || !doc.contains("weight_map") || !doc.at("weight_map").is_object())
    throw FormatError(path + ": no weight_map object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, file] : doc.at("weight_map").items()) {
    if (!file.is_string()) throw FormatError(path + ": weight_map key '" + name + "' names no file");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "..")
      throw FormatError(path + ": weight_map key '" + name + "' names '" + f + "', not a file of the folder");
    out.emplace_back(name, f);
  }
  return out;
}

}  // namespace zm::pt::st
