// LibTorch as an independent reader (the only test file that links it: it costs ~1.4 s to start).
// PyTorchStreamReader must open every file the view synthesizes and read every record, and its
// record offsets must agree with ours, for synthesized files and for DeepSpeed's own.
#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "../unit/helpers.h"
#include "zeromount/view/view.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;

void expect_torch_agrees(const std::string& path) {
  SCOPED_TRACE(path);
  caffe2::serialize::PyTorchStreamReader reader(path);
  auto records = reader.getAllRecords();
  ASSERT_TRUE(reader.hasRecord("data.pkl"));
  for (const auto& r : records) {
    auto [ptr, size] = reader.getRecord(r);
    EXPECT_TRUE(size == 0 || ptr.get() != nullptr) << r;
  }
  auto ours = pt::load_pt(path);
  std::function<void(const pt::Node*, int)> walk = [&](const pt::Node* n, int depth) {
    if (!n || depth > 64) return;
    if (n->kind == pt::Kind::Tensor) {
      EXPECT_EQ(reader.getRecordOffset("data/" + n->tensor->record().key), n->tensor->record().offset);
    }
    for (const auto* c : n->items) walk(c, depth + 1);
    for (const auto& [k, v] : n->entries) walk(v, depth + 1);
    walk(n->args, depth + 1);
    walk(n->state, depth + 1);
  };
  walk(ours->root, 0);
}

TEST(LibTorch, OpensEverySynthesizedFile) {
  size_t files = 0;
  for (const auto& name : kFixtureNames) {
    auto v = view::View::load(kFixtures + "/" + name + "/checkpoint");
    const std::string dir = temp_dir();
    for (uint64_t i = 1; i <= v->tree().size(); ++i) {
      const view::Inode& n = *v->tree().get(i);
      if (n.is_dir() || n.name.size() < 3 || n.name.substr(n.name.size() - 3) != ".pt") continue;
      const auto c = v->open(n, O_RDONLY);
      std::string bytes(c.size(), '\0');
      ASSERT_EQ(c.read(0, bytes.data(), bytes.size()), bytes.size());
      const std::string path = dir + "/" + std::to_string(i) + "_" + n.name;
      write_file(path, bytes);
      expect_torch_agrees(path);
      ++files;
    }
  }
  EXPECT_GT(files, 150u);
}

TEST(LibTorch, AgreesOnDeepSpeedsOwnFiles) {
  for (const auto& name : kFixtureNames)
    for (const auto& path : pt_files(kFixtures + "/" + name + "/checkpoint")) expect_torch_agrees(path);
}

}  // namespace
}  // namespace zm::test
