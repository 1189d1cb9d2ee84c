#include "zeromount/pt/safetensors_read.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <memory>

#include "zeromount/pt/error.h"

namespace zm::pt::st {

namespace {

// A JSON value as a checker needs it. Numbers keep their text: offsets may pass 2^53.
struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  std::string text;  // String: the decoded string; Number: the token
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;
  const Json* get(const std::string& key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
};

class Parser {
 public:
  Parser(std::string_view s, const std::string& path) : s_(s), path_(path) {}
  Json document() {
    Json v = value(0);
    space();
    if (at_ != s_.size()) fail("bytes after the JSON value");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(where(path_, "JSON: " + what, (long long)at_));
  }
  void space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t')) ++at_;
  }
  char peek() {
    space();
    if (at_ >= s_.size()) fail("ends early");
    return s_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  Json value(int depth) {
    if (depth > kMaxDepth) fail("nested too deep");
    const char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::Object;
      ++at_;
      if (peek() == '}') return ++at_, v;
      for (;;) {
        if (peek() != '"') fail("expected a key");
        std::string k = string();
        expect(':');
        v.members.emplace_back(std::move(k), value(depth + 1));
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++at_;
      if (peek() == ']') return ++at_, v;
      for (;;) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.text = string();
      return v;
    }
    for (const char* word : {"null", "true", "false"})
      if (s_.substr(at_, std::char_traits<char>::length(word)) == word) {
        at_ += std::char_traits<char>::length(word);
        v.kind = word[0] == 'n' ? Json::Null : Json::Bool;
        v.text = word;
        return v;
      }
    const size_t from = at_;
    while (at_ < s_.size() &&
           (std::isdigit((unsigned char)s_[at_]) || std::string_view("+-.eE").find(s_[at_]) != std::string_view::npos))
      ++at_;
    if (from == at_) fail("unexpected character");
    v.kind = Json::Number;
    v.text = std::string(s_.substr(from, at_ - from));
    return v;
  }
  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      char c = s_[at_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("ends inside an escape");
      c = s_[at_++];
      if (c == 'u') {
        if (at_ + 4 > s_.size()) fail("short \\u escape");
        unsigned cp = 0;
        if (std::from_chars(s_.data() + at_, s_.data() + at_ + 4, cp, 16).ptr != s_.data() + at_ + 4)
          fail("bad \\u escape");
        at_ += 4;
        // UTF-8 of the code point (surrogate pairs are kept as two: names are compared, not shown).
        if (cp < 0x80) {
          out += char(cp);
        } else if (cp < 0x800) {
          out += char(0xC0 | cp >> 6);
          out += char(0x80 | (cp & 0x3F));
        } else {
          out += char(0xE0 | cp >> 12);
          out += char(0x80 | ((cp >> 6) & 0x3F));
          out += char(0x80 | (cp & 0x3F));
        }
        continue;
      }
      const std::string_view from = "\"\\/bfnrt", to = "\"\\/\b\f\n\r\t";
      const size_t k = from.find(c);
      if (k == std::string_view::npos) fail("bad escape");
      out += to[k];
    }
    if (at_ >= s_.size()) fail("unterminated string");
    ++at_;
    return out;
  }
  std::string_view s_;
  const std::string& path_;
  size_t at_ = 0;
};

uint64_t whole(const Json& v, const std::string& what) {
  uint64_t x = 0;
  const auto r = std::from_chars(v.text.data(), v.text.data() + v.text.size(), x);
  if (v.kind != Json::Number || r.ec != std::errc() || r.ptr != v.text.data() + v.text.size())
    throw FormatError(what + " is not a whole number");
  return x;
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
  const Json doc = Parser(text, h.path).document();
  if (doc.kind != Json::Object) throw FormatError(where(h.path, "header is not a JSON object"));
  for (const auto& [name, v] : doc.members) {
    if (name == "__metadata__") continue;
    const std::string key = h.path + ": key '" + name + "'";
    const Json* dt = v.get("dtype");
    const Json* shape = v.get("shape");
    const Json* offs = v.get("data_offsets");
    if (!dt || dt->kind != Json::String || !shape || shape->kind != Json::Array || !offs || offs->kind != Json::Array ||
        offs->items.size() != 2)
      throw FormatError(key + ": not a tensor entry (dtype, shape, data_offsets)");
    Entry e;
    e.name = name;
    e.dtype = dtype_named(dt->text, key);
    uint64_t n = 1;
    for (const auto& d : shape->items) {
      const uint64_t x = whole(d, key + " shape");
      if (x && n > UINT64_MAX / x) throw FormatError(key + ": shape overflows");
      n *= x;
      e.shape.push_back(int64_t(x));
    }
    e.begin = whole(offs->items[0], key + " data_offsets") + h.data_start;
    e.end = whole(offs->items[1], key + " data_offsets") + h.data_start;
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
  const Json doc = Parser(text, path).document();
  const Json* map = doc.kind == Json::Object ? doc.get("weight_map") : nullptr;
  if (!map || map->kind != Json::Object) throw FormatError(path + ": no weight_map object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, file] : map->members) {
    if (file.kind != Json::String) throw FormatError(path + ": weight_map key '" + name + "' names no file");
    if (file.text.empty() || file.text.find('/') != std::string::npos || file.text == "..")
      throw FormatError(path + ": weight_map key '" + name + "' names '" + file.text + "', not a file of the folder");
    out.emplace_back(name, file.text);
  }
  return out;
}

}  // namespace zm::pt::st
