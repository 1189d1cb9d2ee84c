// Test tool: loads a .pt file and lays it out again through the lazy writer, with each tensor's
// bytes served from the input. For a simple state dict saved by torch 1.13, `--torch113` must
// reproduce torch.save's bytes exactly (tests/mount/test_format.py checks it).
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/pt_writer.h"

namespace {

void attach(const zm::pt::Node* n, int depth) {
  if (!n || depth > 200) return;
  if (n->kind == zm::pt::Kind::Tensor) {
    zm::pt::Tensor& t = *n->tensor;
    if (!t.contiguous()) throw zm::Error("strided tensors are not supported by this tool");
    const zm::pt::Extent e{0, t.byte_offset(), t.nbytes()};
    t.storage = zm::pt::MadeStorage{};
    t.bytes().append_extent(e);
  }
  for (const auto* c : n->items) attach(c, depth + 1);
  for (const auto& [k, v] : n->entries) attach(v, depth + 1);
  attach(n->args, depth + 1);
  attach(n->state, depth + 1);
}

class One : public zm::pt::ExtentReader {
 public:
  explicit One(const zm::pt::File& f) : f_(f) {}
  void pread(uint32_t, uint64_t off, void* buf, size_t n) const override { f_.read_exact(off, buf, n, "input"); }

 private:
  const zm::pt::File& f_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: pt_resave IN.pt OUT.pt [--torch113] [--crc]\n";
    return 2;
  }
  try {
    auto f = zm::pt::load_pt(argv[1]);
    attach(f->root, 0);
    One src(f->file);
    zm::pt::PtOptions o;
    std::string out = argv[2];
    std::string stem = out.substr(out.find_last_of('/') + 1);
    o.prefix = stem.substr(0, stem.rfind('.'));
    for (int k = 3; k < argc; ++k) {
      if (!strcmp(argv[k], "--torch113")) {
        o.byteorder = false;
        o.legacy_key_order = true;
      }
      if (!strcmp(argv[k], "--crc")) o.crc_source = &src;
    }
    const zm::pt::VirtualFile vf = zm::pt::build_pt(f->root, o);
    std::string bytes(vf.size(), '\0');
    vf.read(0, bytes.data(), bytes.size(), src);
    std::ofstream(out, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "pt_resave: " << e.what() << "\n";
    return 1;
  }
}
