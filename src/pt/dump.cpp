#include "zeromount/pt/dump.h"

#include "zeromount/pt/text.h"

#include <charconv>
#include <cmath>
#include <vector>

#include "zeromount/pt/crc32.h"
#include "zeromount/pt/error.h"

namespace zm::pt {

namespace {

std::string class_name(const Node* n) {
  const Node* c = n->callee;
  if (c && c->is_global("builtins", "getattr") && n->args && n->args->items.size() == 2 &&
      n->args->items[0]->kind == Kind::Global)
    c = n->args->items[0];
  return c && c->kind == Kind::Global ? c->s + "." + c->s2 : "?";
}

uint32_t tensor_crc(const PtFile& f, const Tensor& t) {
  std::string buf(size_t(std::min<uint64_t>(t.nbytes(), 1 << 20)), '\0');
  uint32_t crc = 0;
  for (uint64_t at = 0; at < t.nbytes(); at += buf.size()) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), t.nbytes() - at));
    f.file.read_exact(t.byte_offset() + at, buf.data(), n, "tensor data");
    crc = crc32(buf.data(), n, crc);
  }
  return crc;
}

class Json {
 public:
  explicit Json(const PtFile& f) : f_(f) {}
  void value(const Node* n, int depth) {
    if (depth > 100) throw FormatError(where(f_.path(), "value nested too deeply to dump"));
    switch (n->kind) {
      case Kind::None:
        o_ += R"({"t":"none"})";
        return;
      case Kind::Bool:
        o_ += std::string(R"({"t":"bool","v":)") + (n->b ? "true" : "false") + "}";
        return;
      case Kind::Int:
        o_ += R"({"t":"int","v":)" + std::to_string(n->i) + "}";
        return;
      case Kind::BigInt:
        o_ += R"({"t":"int","v":null})";
        return;
      case Kind::Float:
        o_ += R"({"t":"float","v":)" + format_double(n->f) + "}";
        return;
      case Kind::Str:
        o_ += R"({"t":"str","v":)" + json_escape(n->s) + "}";
        return;
      case Kind::Bytes:
        o_ += R"({"t":"bytes","len":)" + std::to_string(n->s.size()) + "}";
        return;
      case Kind::Global:
        o_ += R"({"t":"global","v":)" + json_escape(n->s + "." + n->s2) + "}";
        return;
      case Kind::Object:
        o_ += R"({"t":"object","class":)" + json_escape(class_name(n)) + "}";
        return;
      case Kind::Storage:
        o_ += R"({"t":"storage"})";
        return;
      case Kind::Set:
        o_ += R"({"t":"set","len":)" + std::to_string(n->items.size()) + "}";
        return;
      case Kind::Tensor: {
        const Tensor& t = *n->tensor;
        o_ += R"({"t":"tensor","dtype":")" + std::string(dtype_name(t.dtype)) + R"(","shape":)" + shape_text(t.shape) +
              R"(,"stride":)" + shape_text(t.stride) + R"(,"offset":)" + std::to_string(t.storage_offset) +
              R"(,"crc":)" + (t.contiguous() ? std::to_string(tensor_crc(f_, t)) : "null") + "}";
        return;
      }
      case Kind::List:
      case Kind::Tuple:
        o_ += std::string(R"({"t":")") + (n->kind == Kind::List ? "list" : "tuple") + R"(","items":[)";
        for (size_t k = 0; k < n->items.size(); ++k) {
          if (k) o_ += ",";
          value(n->items[k], depth + 1);
        }
        o_ += "]}";
        return;
      case Kind::Dict:
        o_ += std::string(R"({"t":"dict","ordered":)") + (n->ordered ? "true" : "false") + R"(,"items":[)";
        for (size_t k = 0; k < n->entries.size(); ++k) {
          if (k) o_ += ",";
          o_ += "[";
          value(n->entries[k].first, depth + 1);
          o_ += ",";
          value(n->entries[k].second, depth + 1);
          o_ += "]";
        }
        o_ += "]}";
        return;
    }
  }
  std::string take() { return std::move(o_); }

 private:
  const PtFile& f_;
  std::string o_;
};

void tree(std::string& o, const Node* n, int depth, const std::string& indent) {
  if (depth > 60) {
    o += "...\n";
    return;
  }
  const std::string in = indent + "  ";
  switch (n->kind) {
    case Kind::Tensor: {
      const Tensor& t = *n->tensor;
      o += "tensor " + std::string(dtype_name(t.dtype)) + shape_text(t.shape) + "  @" +
           std::to_string(t.byte_offset()) + " +" + std::to_string(t.nbytes()) + (t.contiguous() ? "" : " (strided)") +
           "\n";
      return;
    }
    case Kind::Dict:
      o += std::string(n->ordered ? "OrderedDict[" : "dict[") + std::to_string(n->entries.size()) + "]\n";
      for (const auto& [k, v] : n->entries) {
        o += in + repr(k, 0) + ": ";
        tree(o, v, depth + 1, in);
      }
      return;
    case Kind::List:
    case Kind::Tuple:
      o += std::string(n->kind == Kind::List ? "list[" : "tuple[") + std::to_string(n->items.size()) + "]\n";
      for (size_t k = 0; k < n->items.size(); ++k) {
        o += in + "[" + std::to_string(k) + "]: ";
        tree(o, n->items[k], depth + 1, in);
      }
      return;
    case Kind::Object:
      o += "<" + class_name(n) + ">";
      if (n->args && !n->args->items.empty()) o += " " + repr(n->args, 1);
      o += "\n";
      if (n->state && n->state->kind == Kind::Dict)
        for (const auto& [k, v] : n->state->entries) {
          o += in + "." + (k->kind == Kind::Str ? k->s : repr(k, 0)) + ": ";
          tree(o, v, depth + 1, in);
        }
      return;
    default:
      o += repr(n, 1) + "\n";
  }
}

}  // namespace

std::string dump_json(const PtFile& f) {
  Json j(f);
  j.value(f.root, 0);
  return R"({"prefix":)" + json_escape(f.prefix) + R"(,"tree":)" + j.take() + "}";
}

std::string dump_tree(const PtFile& f) {
  std::string o;
  tree(o, f.root, 0, "");
  return o;
}

}  // namespace zm::pt
