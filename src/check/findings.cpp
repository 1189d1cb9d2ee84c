#include "zeromount/check/findings.h"

#include <algorithm>
#include <cstdio>

#include "zeromount/pt/text.h"

namespace zm::check {

namespace {

// At most this many findings of one check are printed as text: a checkpoint whose every shard is
// damaged says so in a screen, and --json keeps them all.
constexpr size_t kShownPerCheck = 20;

std::string escape_html(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string rate(const Findings& f) {
  char b[96];
  std::snprintf(b, sizeof b, "%.1f MB read in %.3f s (%.2f GB/s)", double(f.bytes_read) / 1e6, f.seconds,
                f.seconds > 0 ? double(f.bytes_read) / f.seconds / 1e9 : 0.0);
  return b;
}

}  // namespace

const char* severity_name(Severity s) {
  return s == Severity::Pass ? "pass" : s == Severity::Warn ? "warn" : "fail";
}

void Findings::ran(const std::string& check, uint64_t n) {
  const auto it = std::find(checks.begin(), checks.end(), check);
  if (it == checks.end()) {
    checks.push_back(check);
    subjects.push_back(n);
  } else {
    subjects[size_t(it - checks.begin())] += n;
  }
}

void Findings::warn(const std::string& check, const std::string& subject, const std::string& message) {
  ran(check, 0);
  findings.push_back({check, Severity::Warn, subject, message});
}

void Findings::fail(const std::string& check, const std::string& subject, const std::string& message) {
  ran(check, 0);
  findings.push_back({check, Severity::Fail, subject, message});
}

Severity Findings::worst() const {
  Severity w = Severity::Pass;
  for (const auto& x : findings) w = std::max(w, x.severity);
  return w;
}

Severity Findings::worst(const std::string& check) const {
  Severity w = Severity::Pass;
  for (const auto& x : findings)
    if (x.check == check) w = std::max(w, x.severity);
  return w;
}

std::string text(const Findings& f) {
  std::string o = f.input + ": " + f.kind + "\n";
  for (size_t k = 0; k < f.checks.size(); ++k) {
    const std::string& c = f.checks[k];
    char head[160];
    std::snprintf(head, sizeof head, "  %-4s  %-24s %llu checked\n", severity_name(f.worst(c)), c.c_str(),
                  (unsigned long long)f.subjects[k]);
    o += head;
    size_t shown = 0, of = 0;
    for (const auto& x : f.findings) {
      if (x.check != c) continue;
      if (shown++ < kShownPerCheck)
        o += std::string("        ") + severity_name(x.severity) + ": " + x.subject + ": " + x.message + "\n";
      ++of;
    }
    if (of > kShownPerCheck)
      o += "        ... and " + std::to_string(of - kShownPerCheck) + " more (--json lists all)\n";
  }
  for (const auto& n : f.notes) o += "  note: " + n + "\n";
  o += "  " + rate(f) + "\n";
  o += std::string("verdict: ") + severity_name(f.worst()) + " (exit " + std::to_string(f.exit_code()) + ")\n";
  return o;
}

std::string json(const Findings& f) {
  std::string o = "{\"input\": " + pt::json_escape(f.input) + ", \"kind\": " + pt::json_escape(f.kind) +
                  ", \"verdict\": \"" + severity_name(f.worst()) + "\", \"exit\": " + std::to_string(f.exit_code()) +
                  ", \"bytes_read\": " + std::to_string(f.bytes_read) + ", \"checks\": [";
  for (size_t k = 0; k < f.checks.size(); ++k)
    o += std::string(k ? ", " : "") + "{\"name\": " + pt::json_escape(f.checks[k]) + ", \"result\": \"" +
         severity_name(f.worst(f.checks[k])) + "\", \"subjects\": " + std::to_string(f.subjects[k]) + "}";
  o += "], \"findings\": [";
  for (size_t k = 0; k < f.findings.size(); ++k) {
    const auto& x = f.findings[k];
    o += std::string(k ? ", " : "") + "{\"check\": " + pt::json_escape(x.check) + ", \"severity\": \"" +
         severity_name(x.severity) + "\", \"subject\": " + pt::json_escape(x.subject) +
         ", \"message\": " + pt::json_escape(x.message) + "}";
  }
  o += "], \"notes\": [";
  for (size_t k = 0; k < f.notes.size(); ++k) o += std::string(k ? ", " : "") + pt::json_escape(f.notes[k]);
  return o + "]}\n";
}

std::string html(const Findings& f) {
  std::string o =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>zeromount verify</title><style>"
      "body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left;vertical-align:top}"
      ".pass{color:#176b2c}.warn{color:#9a6700}.fail{color:#b3261e;font-weight:bold}</style></head><body>";
  o += "<h1>verify: " + escape_html(f.input) + "</h1><p>" + escape_html(f.kind) + " &middot; verdict <span class=\"" +
       severity_name(f.worst()) + "\">" + severity_name(f.worst()) + "</span> (exit " + std::to_string(f.exit_code()) +
       ") &middot; " + escape_html(rate(f)) + "</p>";
  o += "<table><tr><th>check</th><th>result</th><th>checked</th></tr>";
  for (size_t k = 0; k < f.checks.size(); ++k) {
    const char* r = severity_name(f.worst(f.checks[k]));
    o += "<tr><td>" + escape_html(f.checks[k]) + "</td><td class=\"" + r + "\">" + r + "</td><td>" +
         std::to_string(f.subjects[k]) + "</td></tr>";
  }
  o += "</table><h2>findings</h2><table><tr><th>check</th><th></th><th>subject</th><th>message</th></tr>";
  for (const auto& x : f.findings)
    o += "<tr><td>" + escape_html(x.check) + "</td><td class=\"" + severity_name(x.severity) + "\">" +
         severity_name(x.severity) + "</td><td>" + escape_html(x.subject) + "</td><td>" + escape_html(x.message) +
         "</td></tr>";
  o += "</table><h2>notes</h2><ul>";
  for (const auto& n : f.notes) o += "<li>" + escape_html(n) + "</li>";
  return o + "</ul></body></html>\n";
}

}  // namespace zm::check
