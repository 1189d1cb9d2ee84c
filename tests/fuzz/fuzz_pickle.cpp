// libFuzzer: raw pickle bytes through the pickle machine, then the emitter on what it built.
#include <functional>

#include "zeromount/pt/error.h"
#include "zeromount/pt/pickle_reader.h"
#include "zeromount/pt/pickle_writer.h"

namespace {

bool has_tensor(const zm::pt::Node* n, int depth) {
  if (!n || depth > 50) return true;  // too deep to re-emit anyway
  if (n->kind == zm::pt::Kind::Tensor || n->kind == zm::pt::Kind::Storage) return true;
  for (const auto* c : n->items)
    if (has_tensor(c, depth + 1)) return true;
  for (const auto& [k, v] : n->entries)
    if (has_tensor(k, depth + 1) || has_tensor(v, depth + 1)) return true;
  return has_tensor(n->args, depth + 1) || has_tensor(n->state, depth + 1) ||
         (n->callee && has_tensor(n->callee, depth + 1));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zm::pt::Arena arena;
  zm::pt::PickleLimits limits;
  limits.max_nodes = 1u << 20;
  auto resolve = [](const std::string&, uint64_t nbytes) -> uint64_t {
    if (nbytes > (uint64_t(1) << 40)) throw zm::FormatError("too big");
    return 0;
  };
  try {
    const zm::pt::Node* root = zm::pt::decode_pickle(std::string_view(reinterpret_cast<const char*>(data), size), arena,
                                                     "fuzz.pkl", resolve, limits);
    zm::pt::repr(root, 20);
    zm::pt::Arena copy;
    copy.copy(root);
    if (!has_tensor(root, 0)) {
      const auto again = zm::pt::pickle_value(root);
      zm::pt::Arena back;
      zm::pt::decode_pickle(again.pickle, back, "re-emitted.pkl", resolve, limits);
    }
  } catch (const zm::Error&) {
  }
  return 0;
}
