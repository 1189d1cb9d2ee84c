#pragma once
// A pickle value plus where it came from (file and key path), so that every refusal names both:
// "/ckpt/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt: key 'optimizer_state_dict.zero_stage': ..."
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zeromount/pt/value.h"

namespace zm::ds {

class Field {
 public:
  Field(const pt::Node* n, const std::string& file, std::string path = {})
      : n_(n), file_(&file), path_(std::move(path)) {}

  Field operator[](std::string_view key) const;  // required dict key
  Field operator[](size_t i) const;              // list or tuple element
  Field at(int64_t key) const;                   // required int dict key
  std::optional<Field> find(std::string_view key) const;

  bool is_none() const { return n_->kind == pt::Kind::None; }
  bool is(pt::Kind k) const { return n_->kind == k; }
  size_t size() const;     // list, tuple or dict length
  int64_t as_int() const;  // also accepts a bool and a ZeroStageEnum
  std::string as_str() const;
  const pt::Tensor& as_tensor() const;
  std::vector<int64_t> as_shape() const;                     // tuple/list of ints (torch.Size decodes to a tuple)
  std::vector<std::pair<std::string, Field>> items() const;  // dict with str keys, in order
  std::vector<std::pair<int64_t, Field>> int_items() const;  // dict with int keys, in order
  // Attribute of an object built by NEWOBJ+BUILD (a dataclass such as fragment_address).
  Field attr(std::string_view name) const;

  const pt::Node* node() const { return n_; }
  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& what) const;

 private:
  Field child(const pt::Node* n, std::string path) const { return Field(n, *file_, std::move(path)); }
  const pt::Node* n_;
  const std::string* file_;
  std::string path_;
};

}  // namespace zm::ds
