// DCP's `.metadata` written as a stream (pt/dcp.h): cut into blocks that are made again when read,
// it reads as the whole file made in one go, at any range; and it decodes as torch's Metadata.
#include <gtest/gtest.h>

#include <random>

#include "dcp_synthetic.h"
#include "helpers.h"
#include "zeromount/pt/dcp.h"
#include "zeromount/pt/pickle_reader.h"

namespace zm::pt::dcp {
namespace {

// An FSDP2 save of `tensors` parameters of `rows` x 3 at `world` ranks, and one bytes item.
test::RowChunks synthetic(size_t tensors, int64_t rows, int world) {
  return test::RowChunks({.tensors = tensors, .rows = rows, .cols = 3, .world = world, .lr_item = true});
}

class NoFiles final : public ExtentReader {
 public:
  void pread(uint32_t, uint64_t, void*, size_t) const override { throw std::runtime_error("no file is read"); }
};

TEST(FsdpRows, RanksWithRowsAreTorchChunks) {
  // torch.chunk(torch.arange(rows), world): 37 rows at 3 ranks are 13/13/11 and 7 are 3/3/1 (the
  // DCP fixtures' README); 5 at 4 are 2/2/1 and a fourth rank gets none; 10 at 8 are five chunks of 2.
  EXPECT_EQ(fsdp_ranks_with_rows(37, 3), 3);
  EXPECT_EQ(fsdp_ranks_with_rows(7, 3), 3);
  EXPECT_EQ(fsdp_ranks_with_rows(5, 4), 3);
  EXPECT_EQ(fsdp_ranks_with_rows(10, 8), 5);
  EXPECT_EQ(fsdp_ranks_with_rows(1, 64), 1);
  EXPECT_EQ(fsdp_ranks_with_rows(0, 4), 1) << "a tensor of no rows is one empty chunk";
  for (const auto& [rows, world] : {std::pair{5, 4}, {10, 8}, {37, 3}}) {
    const int n = fsdp_ranks_with_rows(rows, world);
    EXPECT_GT(fsdp_rows(rows, world, n - 1).n, 0);
    if (n < world) {
      EXPECT_EQ(fsdp_rows(rows, world, n).n, 0);
    }
  }
}

TEST(DcpMetadata, BlocksReadAsTheWholeFileAtAnyRange) {
  auto src = std::make_shared<test::RowChunks>(synthetic(300, 64, 16));  // 4,800 chunks: about 20 blocks
  const std::string whole = metadata(src->held(), src->names());
  const MetadataLayout layout = layout_metadata(*src);
  ASSERT_EQ(layout.size, whole.size());
  EXPECT_GT(layout.blocks.size(), 10u);
  EXPECT_LE(layout.blocks.size(), whole.size() / kMetadataBlock + 1);
  const VirtualFile f = metadata_file(src, layout);
  ASSERT_EQ(f.size(), whole.size());
  const NoFiles none;
  EXPECT_EQ(test::read_all(f, none), whole);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 300; ++k) {
    const uint64_t at = rng() % whole.size();
    const size_t n = size_t(std::min<uint64_t>(rng() % (3 * kMetadataBlock), whole.size() - at));
    std::string got(n, '\0');
    ASSERT_EQ(f.read(at, got.data(), n, none), n);
    ASSERT_EQ(got, whole.substr(at, n)) << "range " << at << " + " << n;
  }
}

TEST(DcpMetadata, DecodesAsTorchsMetadataWithEveryChunkStored) {
  const test::RowChunks src = synthetic(5, 10, 3);
  const std::string bytes = metadata(src.held(), src.names());
  Arena a;
  const Node* root = decode_pickle(bytes, a, ".metadata", nullptr);
  ASSERT_TRUE(root && root->is(Kind::Object));
  ASSERT_TRUE(root->callee->is_global("torch.distributed.checkpoint.metadata", "Metadata"));
  const Node* state = root->state;
  ASSERT_TRUE(state && state->is(Kind::Dict));
  const Node* sd = state->get("state_dict_metadata");
  const Node* planner = state->get("planner_data");
  const Node* storage = state->get("storage_data");
  ASSERT_TRUE(sd && planner && storage);
  EXPECT_EQ(sd->entries.size(), 6u);
  EXPECT_EQ(planner->entries.size(), 6u);
  EXPECT_EQ(storage->entries.size(), 5u * 3 + 1);
  const Node* t = sd->get("optimizer.state.layers.2.weight.exp_avg");
  ASSERT_TRUE(t && t->state);
  const Node* chunks = t->state->get("chunks");
  ASSERT_TRUE(chunks && chunks->is(Kind::List));
  ASSERT_EQ(chunks->items.size(), 3u);                        // 10 rows at 3 ranks: 4, 4, 2
  const Node* sizes = chunks->items[2]->state->get("sizes");  // torch.Size, read as its tuple
  ASSERT_TRUE(sizes && sizes->is(Kind::Tuple) && sizes->items.size() == 2);
  EXPECT_EQ(sizes->items[0]->i, 2);
  EXPECT_EQ(chunks->items[2]->state->get("offsets")->items[0]->i, 8);
  // Each data file's name is one memo entry, shared by every chunk that names it.
  const Node* info = storage->entries.back().second;
  ASSERT_TRUE(info && info->state);
  EXPECT_EQ(info->state->get("relative_path")->s, "__0_0.distcp");
  EXPECT_EQ(storage->entries[3].second->state->get("relative_path"),
            storage->entries[0].second->state->get("relative_path"))
      << "chunk 0 of items 0 and 1 are both in file 0";
}

TEST(DcpMetadata, DataFileNamesAndTheirRanks) {
  for (int r : {0, 7, 65535}) EXPECT_EQ(data_file_rank(data_file_name(r)), r);
  for (const char* bad : {"__07_0.distcp", "__0_1.distcp", "__-1_0.distcp", "__x_0.distcp", "___0.distcp", ".metadata",
                          "__1234567890_0.distcp"})
    EXPECT_FALSE(data_file_rank(bad)) << bad;
}

}  // namespace
}  // namespace zm::pt::dcp
