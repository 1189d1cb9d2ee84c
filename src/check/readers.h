#pragma once
// The readers of each input kind (input.cpp dispatches to them) and what they share: the zip
// record check and the walk that finds steps and tensors in a pickle.
#include <string>

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

// The state a file name or key names, as the checks know it: "fp32" and "param" are kWeight.
std::string state_named(const std::string& s);

}  // namespace zm::check
