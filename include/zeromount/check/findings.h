#pragma once
// What `zeromount verify` found: every check that ran, by name, and what it found wrong. The names
// are stable (scripts grep them, docs/zeromount.1 lists them); the exit code is the worst finding.
#include <cstdint>
#include <string>
#include <vector>

namespace zm::check {

enum class Severity : uint8_t { Pass, Warn, Fail };
const char* severity_name(Severity s);  // "pass", "warn", "fail"

// One thing a named check found wrong with one subject (a file, a key, a parameter's state).
struct Finding {
  std::string check;
  Severity severity = Severity::Fail;
  std::string subject;
  std::string message;
};

struct Findings {
  std::string input;                // the path verified
  std::string kind;                 // what it was read as ("deepspeed tag", "dcp", ...)
  std::vector<std::string> checks;  // every check that ran, in the order they first ran
  std::vector<uint64_t> subjects;   // checks[k] looked at this many subjects
  std::vector<Finding> findings;    // what they found wrong
  std::vector<std::string> notes;   // what was read, and what was not looked at and why
  uint64_t bytes_read = 0;          // tensor and record bytes read by the pass
  double seconds = 0;

  // Says that `check` looked at `n` more subjects: it is listed even when it finds nothing.
  void ran(const std::string& check, uint64_t n = 1);
  void warn(const std::string& check, const std::string& subject, const std::string& message);
  void fail(const std::string& check, const std::string& subject, const std::string& message);
  Severity worst() const;
  Severity worst(const std::string& check) const;
  // 0: every check passed; 1: warnings only; 2: a failure.
  int exit_code() const { return int(worst()); }
};

// The report as people read it (one line per check, then each finding), as JSON
// ({"input", "kind", "verdict", "checks": [{"name", "result", "subjects"}], "findings": [...],
// "notes": [...]}), and as a self-contained HTML page.
std::string text(const Findings& f);
std::string json(const Findings& f);
std::string html(const Findings& f);

}  // namespace zm::check
