// The DCP `.metadata` reader against torch: every folder torch 2.14 wrote (tests/fixtures/dcp)
// reads as torch's own dumps of it say (meta/metadata_dump.txt, meta/train.json); what the writer
// (dcp.h) writes reads back as written; damaged folders are refused by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "helpers.h"
#include "zeromount/pt/dcp.h"
#include "zeromount/pt/dcp_item.h"
#include "zeromount/pt/dcp_keys.h"
#include "zeromount/pt/dcp_read.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"
#include "zeromount/pt/zip_reader.h"

namespace zm::test {
namespace {

namespace fs = std::filesystem;
namespace dcp = pt::dcp;

struct Folder {
  std::string fixture, dir;  // tests/fixtures/dcp/<fixture>/<dir> holds `.metadata`
  dcp::Style style;
  std::string path() const { return kFixtures + "/dcp/" + fixture + "/" + dir; }
};

const std::vector<Folder> kFolders = {
    {"fsdp2_ws2_fp32", "checkpoint/step-3", dcp::Style::Fsdp2},
    {"fsdp2_ws3_fp32", "checkpoint/step-3", dcp::Style::Fsdp2},
    {"fsdp2_ws2_bf16mixed", "checkpoint/step-3", dcp::Style::Fsdp2},
    {"torchtitan_ws2_fp32", "checkpoint/step-3", dcp::Style::Torchtitan},
    {"hf_fsdp_ws2_fp32", "checkpoint/checkpoint-3/pytorch_model_fsdp_0", dcp::Style::ModelOnly},
    {"hf_fsdp_ws2_fp32", "checkpoint/checkpoint-3/optimizer_0", dcp::Style::OptimizerOnly},
    {"fsdp2_ws2_model_only", "checkpoint/step-3", dcp::Style::ModelOnly},
};

dcp::ReadMetadata read(const std::string& folder) {
  return dcp::read_metadata(pt::File(folder + "/.metadata"));
}

// Python's repr of a tuple of ints, as torch's dump prints a torch.Size: "(30,)", "(37, 12)", "()".
std::string py_tuple(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// The same as JSON writes a list: "[37, 12]".
std::string json_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

std::string where_of(const dcp::StorageInfo& s) {
  return s.relative_path + " @" + std::to_string(s.offset) + " +" + std::to_string(s.length);
}

// The key lines of metadata_dump.txt, rendered from what we read.
std::vector<std::string> dump_keys(const dcp::ReadMetadata& md) {
  std::vector<std::string> out;
  for (const auto& k : md.keys) {
    if (!k.tensor) {
      out.push_back("  " + k.fqn + "  bytes  -> " + where_of(k.chunks.at(0).storage));
      continue;
    }
    out.push_back("  " + k.fqn + "  tensor torch." + std::string(pt::dtype_name(k.dtype)) +
                  " size=" + py_tuple(k.size) + "  " + std::to_string(k.chunks.size()) + " chunk(s)");
    for (const auto& c : k.chunks)
      out.push_back("      offsets=" + py_tuple(c.offsets) + " sizes=" + py_tuple(c.sizes) + "  -> " +
                    where_of(c.storage));
  }
  return out;
}

// Its planner_data lines ("  model.fc1.weight: ('model', 'fc1.weight')"), sorted: the dump lists
// them in planner_data's order, which is not state_dict_metadata's.
std::vector<std::string> dump_planner(const dcp::ReadMetadata& md) {
  std::vector<std::string> out;
  for (const auto& k : md.keys) {
    std::string s = "  " + k.fqn + ": (";
    for (size_t i = 0; i < k.path.size(); ++i) {
      if (i) s += ", ";
      const auto& p = k.path[i];
      s += std::holds_alternative<int64_t>(p) ? std::to_string(std::get<int64_t>(p))
                                              : "'" + std::get<std::string>(p) + "'";
    }
    out.push_back(s + (k.path.size() == 1 ? ",)" : ")"));
  }
  std::ranges::sort(out);
  return out;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::istringstream in(read_file(path));
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// metadata_dump.txt's section for one folder: its lines from "=== <dir>/.metadata" to the next "===".
std::vector<std::string> dump_section(const Folder& f) {
  const auto all = lines_of(kFixtures + "/dcp/" + f.fixture + "/meta/metadata_dump.txt");
  auto first = std::ranges::find_if(all, [&](const std::string& l) { return l.starts_with("=== " + f.dir + "/"); });
  auto last = std::find_if(first == all.end() ? first : first + 1, all.end(),
                           [](const std::string& l) { return l.starts_with("==="); });
  while (last != first && (last - 1)->empty()) --last;  // the blank line between two folders
  return {first, last};
}

TEST(DcpRead, EveryFolderReadsAsTorchsDumpOfIt) {
  for (const Folder& f : kFolders) {
    SCOPED_TRACE(f.path());
    const auto md = read(f.path());
    const auto section = dump_section(f);
    ASSERT_GT(section.size(), 4u);
    EXPECT_EQ(section[0], "=== " + f.dir + "/.metadata  (version '" + md.version + "')");
    EXPECT_EQ(md.version, "1.0.0");
    // The folder as copied: the sizes torch's dump saw.
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(f.path())) names.push_back(e.path().filename().string());
    std::ranges::sort(names);
    std::string files = "files: ";
    for (const auto& n : names)
      files += (n == names[0] ? "" : ", ") + n + " (" + std::to_string(fs::file_size(f.path() + "/" + n)) + " B)";
    EXPECT_EQ(section[1], files);
    ASSERT_TRUE(md.checkpoint_id);
    EXPECT_EQ(*md.checkpoint_id, "/oracle/out/fsdp2/fx/" + f.fixture + "/" + f.dir);
    EXPECT_TRUE(section[2].starts_with("storage_meta: checkpoint_id=" + *md.checkpoint_id + " modules=")) << section[2];
    EXPECT_EQ(section[3], std::to_string(md.keys.size()) + " keys:");
    const auto planner_at = std::ranges::find(section, "planner_data (flattened key -> path):");
    ASSERT_NE(planner_at, section.end());
    EXPECT_EQ(dump_keys(md), std::vector<std::string>(section.begin() + 4, planner_at));
    std::vector<std::string> planner(planner_at + 1, section.end());
    std::ranges::sort(planner);
    EXPECT_EQ(dump_planner(md), planner);
    EXPECT_NO_THROW(dcp::check_folder(md, f.path()));
  }
}

// train.json's dcp_keys for one folder: {fqn: "tensor float32 [37, 12] chunks=[0, 0]+[19, 12],..."}.
std::map<std::string, std::string> train_json_keys(const Folder& f) {
  const auto all = lines_of(kFixtures + "/dcp/" + f.fixture + "/meta/train.json");
  std::map<std::string, std::string> out;
  auto at = std::ranges::find(all, "  \"" + f.dir + "\": {");
  if (at == all.end()) return out;
  for (++at; at != all.end() && !at->starts_with("  }"); ++at) {
    const size_t k0 = at->find('"'), k1 = at->find("\": \""), v1 = at->rfind('"');
    if (k0 == std::string::npos || k1 == std::string::npos) break;
    out[at->substr(k0 + 1, k1 - k0 - 1)] = at->substr(k1 + 4, v1 - k1 - 4);
  }
  return out;
}

TEST(DcpRead, EveryFolderHasTheKeysTrainJsonLists) {
  for (const Folder& f : kFolders) {
    SCOPED_TRACE(f.path());
    std::map<std::string, std::string> ours;
    for (const auto& k : read(f.path()).keys) {
      if (!k.tensor) {
        ours[k.fqn] = "bytes";
        continue;
      }
      std::string s = "tensor " + std::string(pt::dtype_name(k.dtype)) + " " + json_list(k.size) + " chunks=";
      for (const auto& c : k.chunks)
        s += (&c == &k.chunks[0] ? "" : ",") + json_list(c.offsets) + "+" + json_list(c.sizes);
      ours[k.fqn] = s;
    }
    const auto theirs = train_json_keys(f);
    EXPECT_GT(theirs.size(), 10u);
    EXPECT_EQ(ours, theirs);
  }
}

TEST(DcpKeys, EveryFixtureKeyHasItsRole) {
  const std::set<std::string> model = {"frozen_scale", "running_mean", "embed.weight", "fc1.weight",
                                       "fc1.bias",     "norm.weight",  "norm.bias",    "fc2.weight",
                                       "fc2.bias",     "head.weight",  "head.bias"};
  const std::set<std::string> hypers = {"lr",
                                        "betas",
                                        "eps",
                                        "weight_decay",
                                        "amsgrad",
                                        "maximize",
                                        "foreach",
                                        "capturable",
                                        "fused",
                                        "differentiable",
                                        "decoupled_weight_decay",
                                        "initial_lr",
                                        "params"};
  const std::set<std::string> states = {"exp_avg", "exp_avg_sq", "step"};
  for (const Folder& f : kFolders) {
    SCOPED_TRACE(f.path());
    const auto md = read(f.path());
    EXPECT_EQ(dcp::style_of(md), f.style) << dcp::style_name(dcp::style_of(md));
    std::map<dcp::Family, int> n;
    for (const auto& k : md.keys) {
      SCOPED_TRACE(k.fqn);
      const dcp::KeyRole r = dcp::key_role(k);
      ++n[r.family];
      switch (r.family) {
        case dcp::Family::Model:
          EXPECT_TRUE(model.contains(r.param)) << r.param;
          EXPECT_TRUE(k.fqn == r.param || k.fqn == "model." + r.param);
          break;
        case dcp::Family::OptimizerState:
          EXPECT_TRUE(model.contains(r.param) && r.param != "frozen_scale" && r.param != "running_mean") << r.param;
          EXPECT_TRUE(states.contains(r.name)) << r.name;
          EXPECT_EQ(k.fqn, "optimizer.state." + r.param + "." + r.name);
          break;
        case dcp::Family::ParamGroup:
          EXPECT_TRUE(hypers.contains(r.name)) << r.name;
          if (f.style == dcp::Style::Torchtitan) {
            EXPECT_FALSE(r.group);
            EXPECT_EQ(k.fqn, "optimizer.param_groups." + r.param + "." + r.name);
          } else {
            ASSERT_TRUE(r.group);
            EXPECT_TRUE(*r.group == 0 || *r.group == 1);
            EXPECT_EQ(k.fqn, "optimizer.param_groups." + std::to_string(*r.group) + "." + r.name);
          }
          break;
        case dcp::Family::Other:
          EXPECT_EQ(f.style, dcp::Style::Torchtitan);
          EXPECT_TRUE(k.fqn.starts_with("train_state.") || k.fqn.starts_with("dataloader.") ||
                      k.fqn.starts_with("lr_scheduler."));
          break;
      }
    }
    const bool has_model = f.style != dcp::Style::OptimizerOnly, has_optim = f.style != dcp::Style::ModelOnly;
    EXPECT_EQ(n[dcp::Family::Model], has_model ? 11 : 0);
    EXPECT_EQ(n[dcp::Family::OptimizerState], has_optim ? 27 : 0);
    // 2 groups x 12 (11 hyper-parameters + params); a LambdaLR adds initial_lr; torchtitan: 9 x 12.
    const int groups = f.style == dcp::Style::Torchtitan      ? 9 * 12
                       : f.style == dcp::Style::OptimizerOnly ? 2 * 13
                       : has_optim                            ? 2 * 12
                                                              : 0;
    EXPECT_EQ(n[dcp::Family::ParamGroup], groups);
    EXPECT_EQ(n[dcp::Family::Other], f.style == dcp::Style::Torchtitan ? 6 : 0);
  }
}

TEST(DcpKeys, ThePlannerPathDecidesNotTheDots) {
  auto role = [](std::string fqn, std::vector<std::variant<std::string, int64_t>> path, bool tensor = true) {
    dcp::StoredKey k;
    k.fqn = std::move(fqn);
    k.path = std::move(path);
    k.tensor = tensor;
    return dcp::key_role(k);
  };
  // A Hugging Face model's own `model.` prefix at torchtitan's top level is part of the name.
  auto r = role("model.layers.0.weight", {"model.layers.0.weight"});
  EXPECT_EQ(r.family, dcp::Family::Model);
  EXPECT_EQ(r.param, "model.layers.0.weight");
  r = role("model.layers.0.weight", {"model", "layers.0.weight"});
  EXPECT_EQ(r.param, "layers.0.weight");
  // nn.Sequential's parameter "0.weight" in torchtitan's groups is not group 0.
  r = role("optimizer.param_groups.0.weight.lr", {"optimizer", "param_groups.0.weight.lr"});
  EXPECT_EQ(r.family, dcp::Family::ParamGroup);
  EXPECT_EQ(r.param, "0.weight");
  EXPECT_FALSE(r.group);
  r = role("optimizer.param_groups.0.lr", {"optimizer", "param_groups", int64_t(0), "lr"});
  EXPECT_EQ(r.group, 0);
  EXPECT_EQ(r.name, "lr");
  // Without planner_data: torch's default names.
  r = role("optimizer.param_groups.1.params", {}, false);
  EXPECT_EQ(r.family, dcp::Family::ParamGroup);
  EXPECT_EQ(r.group, 1);
  EXPECT_EQ(r.name, "params");
  r = role("optimizer.state.layers.0.w.exp_avg", {});
  EXPECT_EQ(r.family, dcp::Family::OptimizerState);
  EXPECT_EQ(r.param, "layers.0.w");
  EXPECT_EQ(role("model.x", {}).param, "x");
  EXPECT_EQ(role("train_state.step", {"train_state", "step"}, false).family, dcp::Family::Other);
  EXPECT_EQ(role("step", {"step"}, false).family, dcp::Family::Other) << "a top-level object is no parameter";
}

// Each chunk's values: the storage record of the item's own zip, read through the zip reader on
// the item's byte range. Checked against the item extracted to a file of its own (the whole-file
// reader), and across the four folders that saved the same live state (fixtures README: the fp32
// W=2 runs are one training), matched by role: a wrong offset would read other bytes.
TEST(DcpItem, ChunkBytesAreTheItemsStorageRecord) {
  const std::string tmp = temp_dir();
  std::map<std::string, std::string> by_role;  // "<family>|<param>|<name>|<offsets>" -> bytes
  size_t compared = 0;
  for (const Folder& f : kFolders) {
    if (f.fixture == "fsdp2_ws3_fp32" || f.fixture == "fsdp2_ws2_bf16mixed") continue;  // other trainings
    SCOPED_TRACE(f.path());
    const auto md = read(f.path());
    std::map<std::string, pt::File> files;
    for (const auto& k : md.keys) {
      for (const auto& c : k.chunks) {
        auto [it, fresh] = files.try_emplace(c.storage.relative_path);
        if (fresh) it->second = pt::File(f.path() + "/" + c.storage.relative_path);
        const pt::File& file = it->second;
        if (!k.tensor) {
          EXPECT_THROW(dcp::chunk_bytes(file, k, c), FormatError);
          continue;
        }
        const dcp::ChunkBytes b = dcp::chunk_bytes(file, k, c);
        EXPECT_EQ(b.length, pt::numel(c.sizes) * pt::element_size(k.dtype)) << k.fqn;
        EXPECT_GE(b.offset, c.storage.offset);
        EXPECT_LE(b.offset + b.length, c.storage.offset + c.storage.length);
        write_file(tmp + "/item.pt", file.read_string(c.storage.offset, c.storage.length, "item"));
        const auto alone = pt::load_pt(tmp + "/item.pt");
        ASSERT_TRUE(alone->root->is(pt::Kind::Tensor));
        EXPECT_EQ(alone->root->tensor->byte_offset() + c.storage.offset, b.offset) << k.fqn;
        const std::string bytes = file.read_string(b.offset, b.length, "chunk");
        EXPECT_EQ(bytes, tensor_bytes(*alone, *alone->root->tensor));
        const dcp::KeyRole r = dcp::key_role(k);
        const std::string role =
            std::to_string(int(r.family)) + "|" + r.param + "|" + r.name + "|" + py_tuple(c.offsets);
        if (auto [seen, first] = by_role.try_emplace(role, bytes); !first) {
          EXPECT_EQ(seen->second, bytes) << role;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(by_role.size(), (11 + 27) * 2 - 9 /* the 0-d steps */ - 1 /* running_mean */);
  EXPECT_EQ(compared, by_role.size() * 2 + 21) << "fsdp2 is read first; torchtitan, hf-fsdp, model-only agree";
  fs::remove_all(tmp);
}

TEST(DcpItem, AChunkOfAnotherDtypeOrShapeIsRefusedByKey) {
  const std::string dir = kFolders[0].path();
  const auto md = read(dir);
  dcp::StoredKey k = md.keys.at(1);  // model.embed.weight
  ASSERT_EQ(k.fqn, "model.embed.weight");
  const pt::File file(dir + "/" + k.chunks[0].storage.relative_path);
  k.dtype = pt::DType::BF16;
  try {
    dcp::chunk_bytes(file, k, k.chunks[0]);
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("key 'model.embed.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
  }
  k.dtype = pt::DType::F32;
  dcp::StoredChunk c = k.chunks[0];
  c.sizes = {18, 12};
  EXPECT_THROW(dcp::chunk_bytes(file, k, c), FormatError);
  c = k.chunks[0];
  c.storage.length -= 1;  // the archive's end record is no longer where the range ends
  EXPECT_THROW(dcp::chunk_bytes(file, k, c), FormatError);
}

// The zip reader on a byte range: an archive between other bytes reads as on its own, and its
// data offsets are the file's.
TEST(ZipWindow, AnArchiveInsideAFileReadsAsItself) {
  const std::string tmp = temp_dir();
  const std::string item = read_file(kFolders[0].path() + "/__0_0.distcp").substr(1577, 2473);
  write_file(tmp + "/alone.pt", item);
  write_file(tmp + "/framed.bin", std::string(1000, 'x') + item + std::string(77, 'y'));
  const pt::File alone(tmp + "/alone.pt"), framed(tmp + "/framed.bin");
  const pt::ZipReader a(alone), w(framed, 1000, item.size());
  ASSERT_EQ(a.entries().size(), w.entries().size());
  for (size_t k = 0; k < a.entries().size(); ++k) {
    EXPECT_EQ(a.entries()[k].name, w.entries()[k].name);
    EXPECT_EQ(a.data_offset(a.entries()[k]) + 1000, w.data_offset(w.entries()[k]));
  }
  EXPECT_EQ(w.read(*w.find("data.pkl"), 1 << 20), a.read(*a.find("data.pkl"), 1 << 20));
  EXPECT_THROW(pt::ZipReader(framed, 1000, item.size() + 78), FormatError) << "past the file's end";
  // As over a whole file, bytes after the end record are let be (they could be its comment).
  EXPECT_EQ(pt::ZipReader(framed, 1000, item.size() + 77).entries().size(), a.entries().size());
  EXPECT_THROW(pt::ZipReader(framed, 1000, item.size() - 1), FormatError) << "the end record cut";
  EXPECT_THROW(pt::ZipReader(framed, 999, item.size()), FormatError) << "not a zip where the range starts";
  fs::remove_all(tmp);
}

// --- what the writer writes reads back --------------------------------------------------------

const std::vector<std::string> kFiles = {"__0_0.distcp", "__1_0.distcp"};

std::vector<dcp::Item> writer_items() {
  using P = std::vector<std::variant<std::string, int64_t>>;
  return {
      {"model.w",
       P{"model", "w"},
       true,
       pt::DType::F32,
       {10, 4},
       {{{0, 0}, {6, 4}, 0, 0, 100}, {{6, 0}, {4, 4}, 1, 0, 90}}},
      {"model.grid",
       P{"model", "grid"},
       true,
       pt::DType::BF16,
       {3, 5},  // a column split: two boxes per row band
       {{{0, 0}, {3, 2}, 0, 100, 40}, {{0, 2}, {3, 3}, 1, 90, 50}}},
      {"optimizer.state.w.step",
       P{"optimizer", "state", "w", "step"},
       true,
       pt::DType::F32,
       {},
       {{{}, {}, 1, 140, 30}}},
      {"optimizer.param_groups.0.lr",
       P{"optimizer", "param_groups", int64_t(0), "lr"},
       false,
       pt::DType::F32,
       {},
       {{{}, {}, 0, 140, 20}}},
  };
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string refusal_of(const std::vector<dcp::Item>& items, const std::vector<std::string>& files = kFiles) {
  return refusal([&] { dcp::read_metadata(dcp::metadata(items, files), "/ckpt/.metadata"); });
}

TEST(DcpRead, WhatTheWriterWritesReadsBack) {
  const auto items = writer_items();
  const auto md = dcp::read_metadata(dcp::metadata(items, kFiles), "/ckpt/.metadata");
  EXPECT_EQ(md.path, "/ckpt/.metadata");
  EXPECT_EQ(md.version, "1.0.0");
  EXPECT_FALSE(md.checkpoint_id) << "the writer writes storage_meta None";
  ASSERT_EQ(md.keys.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const dcp::Item& in = items[i];
    const dcp::StoredKey& out = md.keys[i];
    SCOPED_TRACE(in.fqn);
    EXPECT_EQ(out.fqn, in.fqn);
    EXPECT_EQ(out.path, in.path);
    EXPECT_EQ(out.tensor, in.tensor);
    if (in.tensor) {
      EXPECT_EQ(out.dtype, in.dtype);
      EXPECT_EQ(out.size, in.size);
    }
    ASSERT_EQ(out.chunks.size(), in.chunks.size());
    for (size_t c = 0; c < in.chunks.size(); ++c) {
      EXPECT_EQ(out.chunks[c].offsets, in.chunks[c].offsets);
      EXPECT_EQ(out.chunks[c].sizes, in.chunks[c].sizes);
      EXPECT_EQ(out.chunks[c].storage.relative_path, kFiles.at(in.chunks[c].file));
      EXPECT_EQ(out.chunks[c].storage.offset, in.chunks[c].offset);
      EXPECT_EQ(out.chunks[c].storage.length, in.chunks[c].length);
    }
  }
  EXPECT_NO_THROW(dcp::check_against_files(md, [](const std::string&) { return std::optional<uint64_t>(200); }));
}

void expect_refused(const std::string& why, const std::string& key, const std::string& says) {
  EXPECT_NE(why.find("/ckpt/.metadata: key '" + key + "': "), std::string::npos) << why;
  EXPECT_NE(why.find(says), std::string::npos) << why;
}

TEST(DcpRead, ChunksThatDoNotCoverTheirTensorOnceAreRefusedByKey) {
  auto items = writer_items();
  items[0].chunks[1].offsets = {7, 0};  // rows 6..7 in no chunk
  items[0].chunks[1].sizes = {3, 4};
  expect_refused(refusal_of(items), "model.w", "hole: they cover 36 of 40 elements");
  items[0].chunks[1].offsets = {5, 0};  // row 5 twice
  items[0].chunks[1].sizes = {5, 4};
  expect_refused(refusal_of(items), "model.w", "chunks at offsets (0, 0) and (5, 0) overlap");
  items[0].chunks[1].offsets = {6, 0};  // rows 10.. outside
  items[0].chunks[1].sizes = {5, 4};
  expect_refused(refusal_of(items), "model.w", "lies outside the tensor (10, 4)");
  items[0].chunks[1].offsets = {6};
  items[0].chunks[1].sizes = {4};
  expect_refused(refusal_of(items), "model.w", "another rank");

  items = writer_items();
  items[1].chunks[1].offsets = {0, 1};  // column 1 in both boxes
  items[1].chunks[1].sizes = {3, 4};
  expect_refused(refusal_of(items), "model.grid", "overlap");
  items[1].chunks[1].offsets = {1, 2};  // row 0 of the right box missing
  items[1].chunks[1].sizes = {2, 3};
  expect_refused(refusal_of(items), "model.grid", "hole");

  items = writer_items();
  items[2].chunks.push_back(items[2].chunks[0]);  // a 0-d tensor saved twice
  expect_refused(refusal_of(items), "optimizer.state.w.step", "overlap");
  items[2].chunks.clear();
  expect_refused(refusal_of(items), "optimizer.state.w.step", "hole: they cover 0 of 1 elements");
}

// The overlap check meets only chunks that start before another ends: 20,000 one-row chunks in
// any order read at once, and one row left out is found.
TEST(DcpRead, ManyRowChunksAreCheckedInAnyOrder) {
  dcp::Item it{"model.big", {std::string("model"), std::string("big")}, true, pt::DType::F32, {20000, 3}, {}};
  for (int64_t r = 0; r < 20000; ++r) it.chunks.push_back({{r, 0}, {1, 3}, uint32_t(r % 2), uint64_t(r) * 12, 12});
  std::shuffle(it.chunks.begin(), it.chunks.end(), std::mt19937(7));
  const auto md = dcp::read_metadata(dcp::metadata({it}, kFiles), "/ckpt/.metadata");
  EXPECT_EQ(md.keys.at(0).chunks.size(), 20000u);
  it.chunks.erase(it.chunks.begin() + 1234);
  expect_refused(refusal_of({it}), "model.big", "cover 59997 of 60000");
}

// A column split sweeps along columns: every chunk starts at row 0.
TEST(DcpRead, ManyColumnChunksAreCheckedAlongColumns) {
  dcp::Item it{"model.wide", {std::string("model"), std::string("wide")}, true, pt::DType::F32, {2, 5000}, {}};
  for (int64_t c = 0; c < 5000; ++c) it.chunks.push_back({{0, c}, {2, 1}, 0, uint64_t(c) * 8, 8});
  std::shuffle(it.chunks.begin(), it.chunks.end(), std::mt19937(8));
  EXPECT_EQ(refusal_of({it}), "(accepted)");
  it.chunks[10].sizes = {2, 2};  // one column twice, unless it was the last
  const std::string why = refusal_of({it});
  EXPECT_TRUE(why.find("overlap") != std::string::npos || why.find("outside") != std::string::npos) << why;
}

TEST(DcpRead, RelativePathsThatLeaveTheFolderAreRefusedByKey) {
  for (const std::string bad : {"../__0_0.distcp", "/etc/passwd", "a/../../b", ""}) {
    SCOPED_TRACE(bad);
    expect_refused(refusal_of(writer_items(), {bad, "__1_0.distcp"}), "model.w", "relative_path '" + bad + "'");
  }
  EXPECT_EQ(refusal_of(writer_items(), {"sub/__0_0.distcp", "__1_0.distcp"}), "(accepted)");
}

// --- damaged copies of torch's own files ------------------------------------------------------

// The real file with every occurrence of `from` replaced by `to` (same length: no offset moves).
std::string patched(const std::string& bytes, const std::string& from, const std::string& to, bool last_only = false) {
  EXPECT_EQ(from.size(), to.size());
  std::string out = bytes;
  if (last_only) {
    const size_t at = out.rfind(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) out.replace(at, from.size(), to);
    return out;
  }
  size_t n = 0;
  for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + 1), ++n)
    out.replace(at, from.size(), to);
  EXPECT_GT(n, 0u) << from;
  return out;
}

TEST(DcpRead, DamagedTorchFilesAreRefusedByKey) {
  const std::string dir = kFolders[0].path();
  const std::string real = read_file(dir + "/.metadata");
  // storage_data names each item by its own copy of the key's string, after every other copy:
  // renaming the last one leaves that item (a bytes item; fc2.weight's rank-1 chunk) without bytes.
  std::string why = refusal([&] {
    dcp::read_metadata(patched(real, "optimizer.param_groups.1.lr", "optimizer.param_groups.1.LR", true),
                       "/ckpt/.metadata");
  });
  expect_refused(why, "optimizer.param_groups.1.lr", "no storage_data entry for its bytes");
  why = refusal(
      [&] { dcp::read_metadata(patched(real, "model.fc2.weight", "model.fc2.weighT", true), "/ckpt/.metadata"); });
  expect_refused(why, "model.fc2.weight", "no storage_data entry for its chunk at offsets (15, 0)");
  // The data file's name is pickled once and memoized: every item of rank 0 leaves the folder.
  why = refusal([&] { dcp::read_metadata(patched(real, "__0_0.distcp", "../_0.distcp"), "/ckpt/.metadata"); });
  expect_refused(why, "model.frozen_scale", "relative_path '../_0.distcp' leaves the folder");
  // Every cut of the file is refused, never read as something else.
  for (size_t n = 0; n < real.size(); n += 37)
    EXPECT_THROW(dcp::read_metadata(std::string_view(real).substr(0, n), "/ckpt/.metadata"), FormatError) << n;
  // Flipped bytes: refused or read, never anything but a zm::Error.
  std::mt19937 rng(41);
  for (int k = 0; k < 300; ++k) {
    std::string b = real;
    b[rng() % b.size()] ^= char(1 + rng() % 255);
    try {
      dcp::read_metadata(b, "/ckpt/.metadata");
    } catch (const Error&) {
    }
  }
}

TEST(DcpRead, MissingOrShortDataFilesAreRefusedByKey) {
  const Folder& f = kFolders[0];
  const auto md = read(f.path());
  // The item that ends where __1_0.distcp ends, with that file one byte short.
  const uint64_t size1 = fs::file_size(f.path() + "/__1_0.distcp");
  std::string last;
  for (const auto& k : md.keys)
    for (const auto& c : k.chunks)
      if (c.storage.relative_path == "__1_0.distcp" && c.storage.offset + c.storage.length == size1) last = k.fqn;
  ASSERT_FALSE(last.empty());
  const std::string why = refusal([&] {
    dcp::check_against_files(md, [&](const std::string& rel) -> std::optional<uint64_t> {
      return fs::file_size(f.path() + "/" + rel) - (rel == "__1_0.distcp");
    });
  });
  EXPECT_NE(why.find(md.path + ": key '" + last + "': item @"), std::string::npos) << why;
  EXPECT_NE(why.find("ends past the end of '__1_0.distcp' (" + std::to_string(size1 - 1) + " bytes)"),
            std::string::npos)
      << why;

  const std::string tmp = temp_dir();
  copy_fixture("dcp/" + f.fixture + "/" + f.dir, tmp + "/step-3");
  fs::remove(tmp + "/step-3/__0_0.distcp");
  const auto copy = read(tmp + "/step-3");
  const std::string missing = refusal([&] { dcp::check_folder(copy, tmp + "/step-3"); });
  EXPECT_NE(missing.find("/step-3/.metadata: key 'model.frozen_scale': data file '__0_0.distcp' does not exist"),
            std::string::npos)
      << missing;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace zm::test
