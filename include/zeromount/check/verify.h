#pragma once
// `zeromount verify PATH`: opens the input (its structure checks) and runs the number checks in
// one streaming pass. Nothing is written; a pickle is decoded, never run.
#include <string>

#include "zeromount/check/findings.h"

namespace zm::check {

// Throws zm::Error only when `path` cannot be read at all (missing, an unknown --tag); everything
// else is a finding.
Findings verify(const std::string& path, const std::string& tag = {});

}  // namespace zm::check
