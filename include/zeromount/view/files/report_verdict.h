#pragma once
// The verify verdict a tag's report page shows: the checks of `zeromount verify` that the page's
// own pass can answer (every fp32 weight, exp_avg through the update sizes, exp_avg_sq), applied
// to its figures with verify's names and rules (number_rules.h): no byte is read for it. The
// checks that need other bytes (zip CRCs, the 16-bit module against its masters, the steps each
// rank saved, `latest`) are left to `zeromount verify`, and the page says so.
#include <cstdint>
#include <string>
#include <vector>

#include "zeromount/ds/tag_index.h"

namespace zm::view {

struct TagFigures;

struct PageCheck {
  const char* name = "";  // verify's name: "finite", "exp_avg_sq-nonnegative", ...
  uint8_t result = 0;     // 0 pass, 1 warn, 2 fail (check::Severity's order)
  uint64_t subjects = 0, findings = 0;
  std::string first;  // the first subject found wrong: "fc1.bias exp_avg_sq"
};

struct Verdict {
  std::vector<PageCheck> checks;  // always the same checks, in the same order
  uint8_t worst() const;
};

// The checks the page shows, in order (kPageChecks of them).
inline constexpr const char* kPageChecks[] = {"finite", "exp_avg_sq-nonnegative", "moments-not-reset", "norm-outlier"};
const char* result_name(uint8_t result);  // "pass", "warn", "fail"

// From the figures of one pass (TagFigures::params filled).
Verdict tag_verdict(const ds::TagIndex& ix, const TagFigures& f);

}  // namespace zm::view
