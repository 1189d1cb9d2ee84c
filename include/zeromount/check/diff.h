#pragma once
// `zeromount diff A B`: two inputs of any kinds (check/input.h), their items matched by parameter
// and state across known prefixes and DeepSpeed-versus-torch naming, each pair streamed block by
// block (never a whole tensor held): shape, dtype, bit equality, or the largest absolute and
// relative difference and both norms.
#include <cstdint>
#include <string>
#include <vector>

namespace zm::check {

struct DiffOptions {
  std::string tag_a, tag_b;   // --tag (DeepSpeed inputs)
  double atol = 0, rtol = 0;  // numpy.allclose's rule: |a - b| <= atol + rtol * |b|; NaN equals NaN
};

struct DiffRow {
  std::string param, state;        // as matched (prefixes stripped)
  std::string stored_a, stored_b;  // where each side keeps it; empty: absent on that side
  std::string shape_a, shape_b, dtype_a, dtype_b;
  // "equal" (bit for bit), "close" (within tolerance), "differs", "shape", "missing in A",
  // "missing in B", "unread" (values not readable on one side)
  std::string status;
  double max_abs = 0, max_rel = 0, norm_a = 0, norm_b = 0;
  uint64_t differing = 0;  // elements beyond tolerance
  bool counts() const { return status != "equal" && status != "close"; }
};

struct DiffResult {
  std::string a, b, kind_a, kind_b;
  std::vector<DiffRow> rows;
  std::vector<std::string> matches;  // "A 'module.fc1.weight' ~ B 'fc1.weight': prefix 'module.'"
  std::vector<std::string> notes;    // states one side's format cannot hold, and such
  size_t differences() const;
  int exit_code() const { return differences() ? 1 : 0; }
};

// The name a parameter has without the known prefixes (model., module., _orig_mod.,
// optimizer.state.), with what was stripped appended to `stripped`.
std::string canonical_param(const std::string& name, std::string* stripped = nullptr);

DiffResult diff(const std::string& a, const std::string& b, const DiffOptions& o = {});

std::string text(const DiffResult& r);
std::string json(const DiffResult& r);
std::string html(const DiffResult& r);

}  // namespace zm::check
