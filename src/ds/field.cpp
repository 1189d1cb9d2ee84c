#include "zeromount/ds/field.h"

#include "zeromount/pt/error.h"

namespace zm::ds {

using pt::Kind;

void Field::fail(const std::string& what) const {
  throw FormatError(where(*file_, (path_.empty() ? std::string("top level") : "key '" + path_ + "'") + ": " + what));
}

Field Field::operator[](std::string_view key) const {
  if (n_->kind != Kind::Dict) fail("expected a dict, found " + std::string(n_->kind_name()));
  const pt::Node* v = n_->get(key);
  const std::string p = path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  if (!v) Field(n_, *file_, p).fail("missing");
  return child(v, p);
}

Field Field::operator[](size_t i) const {
  if (n_->kind != Kind::List && n_->kind != Kind::Tuple) fail("expected a list, found " + std::string(n_->kind_name()));
  if (i >= n_->items.size())
    fail("has " + std::to_string(n_->items.size()) + " items, needs index " + std::to_string(i));
  return child(n_->items[i], path_ + "[" + std::to_string(i) + "]");
}

Field Field::at(int64_t key) const {
  if (n_->kind != Kind::Dict) fail("expected a dict, found " + std::string(n_->kind_name()));
  const pt::Node* v = n_->get(key);
  const std::string p = path_ + "[" + std::to_string(key) + "]";
  if (!v) Field(n_, *file_, p).fail("missing");
  return child(v, p);
}

std::optional<Field> Field::find(std::string_view key) const {
  if (n_->kind != Kind::Dict) return std::nullopt;
  const pt::Node* v = n_->get(key);
  if (!v) return std::nullopt;
  return child(v, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
}

size_t Field::size() const {
  if (n_->kind == Kind::Dict) return n_->entries.size();
  if (n_->kind == Kind::List || n_->kind == Kind::Tuple) return n_->items.size();
  fail("expected a container, found " + std::string(n_->kind_name()));
}

int64_t Field::as_int() const {
  if (n_->kind == Kind::Int) return n_->i;
  if (n_->kind == Kind::Bool) return n_->b;
  // ZeroStageEnum pickles as ZeroStageEnum(2) or getattr(ZeroStageEnum, 'gradients'), by Python version.
  if (n_->kind == Kind::Object && n_->args && n_->args->kind == Kind::Tuple) {
    const auto& a = n_->args->items;
    if (n_->callee && n_->callee->kind == Kind::Global && n_->callee->s2 != "getattr" && a.size() == 1 &&
        a[0]->kind == Kind::Int)
      return a[0]->i;
    if (n_->callee && n_->callee->is_global("builtins", "getattr") && a.size() == 2 && a[1]->kind == Kind::Str) {
      static const std::pair<const char*, int> kStages[] = {
          {"disabled", 0}, {"optimizer_states", 1}, {"gradients", 2}, {"weights", 3}};
      for (const auto& [name, v] : kStages)
        if (a[1]->s == name) return v;
      fail("unknown enum member '" + a[1]->s + "'");
    }
  }
  fail("expected an int, found " + pt::repr(n_));
}

std::string Field::as_str() const {
  if (n_->kind != Kind::Str) fail("expected a str, found " + std::string(n_->kind_name()));
  return n_->s;
}

const pt::Tensor& Field::as_tensor() const {
  if (n_->kind != Kind::Tensor) fail("expected a tensor, found " + std::string(n_->kind_name()));
  return *n_->tensor;
}

std::vector<int64_t> Field::as_shape() const {
  if (n_->kind != Kind::Tuple && n_->kind != Kind::List) fail("expected a shape, found " + pt::repr(n_));
  std::vector<int64_t> s;
  for (size_t k = 0; k < n_->items.size(); ++k) {
    const int64_t d = (*this)[k].as_int();
    if (d < 0) fail("negative dimension in shape");
    s.push_back(d);
  }
  return s;
}

std::vector<std::pair<std::string, Field>> Field::items() const {
  if (n_->kind != Kind::Dict) fail("expected a dict, found " + std::string(n_->kind_name()));
  std::vector<std::pair<std::string, Field>> out;
  out.reserve(n_->entries.size());
  for (const auto& [k, v] : n_->entries) {
    if (k->kind != Kind::Str) fail("expected str keys, found " + std::string(k->kind_name()));
    out.emplace_back(k->s, child(v, path_ + "['" + k->s + "']"));
  }
  return out;
}

std::vector<std::pair<int64_t, Field>> Field::int_items() const {
  if (n_->kind != Kind::Dict) fail("expected a dict, found " + std::string(n_->kind_name()));
  std::vector<std::pair<int64_t, Field>> out;
  for (const auto& [k, v] : n_->entries) {
    if (k->kind != Kind::Int) fail("expected int keys, found " + std::string(k->kind_name()));
    out.emplace_back(k->i, child(v, path_ + "[" + std::to_string(k->i) + "]"));
  }
  return out;
}

Field Field::attr(std::string_view name) const {
  if (n_->kind != Kind::Object || !n_->state) fail("expected an object with state, found " + pt::repr(n_));
  const pt::Node* st = n_->state;
  // A (dict, slots) pair when the class has __slots__.
  if (st->kind == Kind::Tuple && st->items.size() == 2)
    st = st->items[0]->kind == Kind::Dict ? st->items[0] : st->items[1];
  const pt::Node* v = st->get(name);
  const std::string p = path_ + "." + std::string(name);
  if (!v) Field(n_, *file_, p).fail("missing attribute");
  return child(v, p);
}

}  // namespace zm::ds
