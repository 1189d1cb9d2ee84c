#pragma once
// The readers of each input kind (input.cpp dispatches to them) and what they share: the zip
// record check and the walk that finds steps and tensors in a pickle.
#include <map>
#include <string>
#include <vector>

#include "zeromount/check/input.h"
#include "zeromount/pt/pt_file.h"

namespace zm::check {

// Checks that every record of the zip that is bytes [base, base + size) of file `id` (a whole .pt,
// or a DCP item) lies inside it, and has `files` expect the CRC-32 its directory records: the pass
// computes it from the bytes it reads (FileSet::settle_crcs). `name` names it. A CRC of 0 over
// non-empty bytes is "not recorded" (zeromount's made-up files without -o crc): a note.
void check_zip(FileSet& files, uint32_t id, uint64_t base, uint64_t size, const std::string& name, Findings& f);

// Opens a .pt file as verify does: its zip records (check_zip, into in.files) and its pickle
// (decoded, never run). nullptr, with the failure recorded, when it does not open.
std::unique_ptr<pt::PtFile> open_pt(const std::string& path, const std::string& name, Input& in, Findings& f);

// Every 'step' and 'global_steps' value of a decoded pickle (an int, a float or a one-element
// tensor), each with where it is ("name: key a.b.step"), into in.steps.
void collect_steps(const pt::PtFile& pt, const std::string& name, Input& in);

// Every contiguous tensor of a decoded pickle as an item named by its key path ("module.fc1.weight",
// "state.0.exp_avg": a last component that is an optimizer key becomes the state), into in.items.
// `param` and `state`, when given, name a file's one tensor (a universal zero/<param>/<state>.pt).
void collect_tensors(const pt::PtFile& pt, uint32_t file_id, const std::string& name, Input& in,
                     const std::string& param = {}, const std::string& state = {});

// The readers of each kind; each fills `in` and runs its structure checks.
void read_deepspeed(const std::string& path, const std::string& tag, Input& in, Findings& f);
void read_dcp(const std::string& folder, Input& in, Findings& f);
void read_safetensors(const std::string& path, const std::string& name, Input& in, Findings& f);
void read_safetensors_index(const std::string& path, Input& in, Findings& f);
// Any folder or file: each file by what it is (zip, safetensors, an index); a universal folder's
// zero/<param>/<state>.pt files as their parameter's states.
void read_files(const std::string& path, Input& in, Findings& f);

// A torch optimizer's state_dict ({'state': ..., 'param_groups': [...]}, an optimizer.pt): its
// ids named by the groups' `param_names` (torch >= 2.6 with named parameters), else "param <id>"
// (Input::unnamed_ids); each state, 'step' and hyper-parameter as items; ids a group lists twice,
// or state no group lists, fail check torch-ids.
bool is_torch_optimizer(const pt::Node* root);
void read_torch_optimizer(const pt::PtFile& pt, uint32_t file_id, const std::string& name, Input& in, Findings& f);

// Whether a param group's key lists its parameters rather than being a hyper-parameter.
bool is_group_list_key(const std::string& key);
// A group's hyper-parameters (numbers, bools, tuples of numbers as "betas[0]", ...) as items
// naming `where`[group]; returns how many values were neither numbers nor None (not compared).
size_t add_hypers(const std::vector<std::pair<std::string, const pt::Node*>>& hypers, int group, const Members& members,
                  const std::string& where, Input& in);
// A DeepSpeed or DCP source's param groups as hyper-parameter items, and its torch numbering
// (Input::torch_order, from ds::torch_groups); a source it refuses is a note.
void add_index_hypers(const ds::TagIndex& ix, const std::string& where, Input& in, Findings& f);

// The first node found under dict key `key` below `root` (breadth of the walk: dicts and lists).
const pt::Node* find_key(const pt::Node* root, const std::string& key);

// Check ranks-agree (ranks_agree.cpp): each rank file's param groups, compared with the first's.
class RankGroups {
 public:
  void add(const pt::PtFile& pt, const std::string& name);
  void check(Findings& f) const;

 private:
  // Per file, per group: each hyper-parameter's value as text.
  std::vector<std::pair<std::string, std::vector<std::map<std::string, std::string>>>> files_;
};
// Muon's whole-buffer copies were compared by the index: counted as ranks-agree run.
void muon_copies_agree(const ds::TagIndex& ix, Findings& f);
// Whether ds::index_tag refused the tag because two ranks' copies of a Muon buffer differ.
bool muon_copy_differs(const std::string& index_error);

// The state a file name or key names, as the checks know it: "fp32" and "param" are kWeight.
std::string state_named(const std::string& s);

}  // namespace zm::check
