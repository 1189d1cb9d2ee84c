#include "zeromount/check/verify.h"

#include <chrono>

#include "zeromount/check/input.h"
#include "zeromount/check/numbers.h"

namespace zm::check {

Findings verify(const std::string& path, const std::string& tag) {
  const auto t0 = std::chrono::steady_clock::now();
  Findings f;
  const auto in = open_input(path, tag, f);
  const auto figures = item_figures(*in, f);
  check_numbers(*in, figures, f);
  f.notes.insert(f.notes.begin(), std::to_string(in->items.size()) + " tensors and scalars read");
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return f;
}

}  // namespace zm::check
