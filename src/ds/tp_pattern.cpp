// A Thompson-style simulation over a flat list of atoms: patterns have no groups or alternation,
// so a set of positions in that list is the whole state and a match is linear in the name
// (no backtracking blow-up on `.*.*x`), with no std::regex and its ECMAScript semantics.
#include "zeromount/ds/tp_pattern.h"

#include "zeromount/pt/error.h"

namespace zm::ds {

namespace {

// Python matches str by code point, so both the pattern and the name are decoded first.
std::u32string decode_utf8(std::string_view s, const std::string& what) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + size_t(len) > s.size()) throw FormatError(what + ": not valid UTF-8");
    char32_t c = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + size_t(k)]);
      if ((cb >> 6) != 0x2) throw FormatError(what + ": not valid UTF-8");
      c = (c << 6) | (cb & 0x3F);
    }
    out.push_back(c);
    i += size_t(len);
  }
  return out;
}

bool ascii_alnum(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

[[noreturn]] void refuse_feature(const std::string& pattern, const std::string& feature) {
  throw FormatError("pattern '" + pattern + "': " + feature +
                    " is not supported (zeromount matches only the regex subset that DeepSpeed, AutoTP and "
                    "Megatron-DeepSpeed patterns use)");
}

}  // namespace

TpPattern::TpPattern(std::string_view pattern) : source_(pattern) {
  const std::u32string p = decode_utf8(pattern, "pattern '" + source_ + "'");
  auto refuse = [&](const std::string& feature) { refuse_feature(source_, feature); };
  size_t i = 0;
  if (!p.empty() && p[0] == U'^') ++i;  // re.match is anchored at the start anyway
  // One escaped character: a literal or \d; the escape letters Python gives other meanings are refused.
  auto escape = [&](Atom& a, bool in_class) {
    if (i + 1 >= p.size()) refuse("a trailing '\\'");
    const char32_t e = p[i + 1];
    i += 2;
    if (e == U'd') {
      if (!in_class) a.kind = Atom::Class;
      a.digits = true;
      return false;
    }
    if (ascii_alnum(e)) refuse(std::string("the escape '\\") + char(e) + "'");
    if (in_class)
      a.ranges.emplace_back(e, e);
    else
      a.ch = e;
    return true;
  };
  while (i < p.size()) {
    const char32_t c = p[i];
    Atom a;
    switch (c) {
      case U'$':
        if (i + 1 != p.size()) refuse("'$' before the end");
        anchored_end_ = true;
        ++i;
        continue;
      case U'^':
        refuse_feature(source_, "'^' after the start");
      case U'*':
      case U'+':
      case U'?':
        refuse_feature(source_, std::string("'") + char(c) + "' with nothing to repeat");
      case U'(':
      case U')':
      case U'|':
      case U'{':
      case U'}':
        refuse_feature(source_, std::string("'") + char(c) + "' (groups, alternation and counted repeats)");
      case U'\\':
        escape(a, false);
        break;
      case U'.':
        a.kind = Atom::Any;
        ++i;
        break;
      case U'[': {
        a.kind = Atom::Class;
        ++i;
        if (i < p.size() && p[i] == U'^') a.negated = true, ++i;
        bool first = true;
        for (;; first = false) {
          if (i >= p.size()) refuse("an unterminated '['");
          if (p[i] == U']' && !first) break;
          if (p[i] == U'[') refuse("'[' inside a character set");
          char32_t lo = 0;
          if (p[i] == U'\\') {
            if (!escape(a, true)) {  // \d
              if (i + 1 < p.size() && p[i] == U'-' && p[i + 1] != U']') refuse("'\\d' as a range end");
              continue;
            }
            lo = a.ranges.back().first;
            a.ranges.pop_back();
          } else {
            lo = p[i++];
          }
          char32_t hi = lo;
          if (i + 1 < p.size() && p[i] == U'-' && p[i + 1] != U']') {
            ++i;
            if (p[i] == U'\\') {
              Atom end;
              if (!escape(end, true)) refuse("'\\d' as a range end");
              hi = end.ranges.back().first;
            } else {
              if (p[i] == U'[') refuse("'[' inside a character set");
              hi = p[i++];
            }
            if (hi < lo) refuse("a reversed character range");
          }
          a.ranges.emplace_back(lo, hi);
        }
        ++i;  // the ']'
        break;
      }
      default:
        a.ch = c;
        ++i;
    }
    if (i < p.size() && (p[i] == U'*' || p[i] == U'+' || p[i] == U'?')) {
      const char32_t q = p[i++];
      if (i < p.size() && (p[i] == U'*' || p[i] == U'+' || p[i] == U'?' || p[i] == U'{'))
        refuse("a lazy, possessive or repeated quantifier");
      if (q == U'+') atoms_.push_back(a);  // x+ is x x*
      a.repeat = q != U'?';
      a.optional = q == U'?';
    }
    atoms_.push_back(std::move(a));
  }
}

bool TpPattern::accepts(const Atom& a, char32_t c) const {
  switch (a.kind) {
    case Atom::Literal:
      return c == a.ch;
    case Atom::Any:
      return c != U'\n';
    case Atom::Class:
      break;
  }
  if (a.digits && c >= 0x80)
    throw FormatError("pattern '" + source_ + "': '\\d' against a non-ASCII character is not supported");
  bool in = a.digits && c >= U'0' && c <= U'9';
  for (const auto& [lo, hi] : a.ranges) in = in || (c >= lo && c <= hi);
  return in != a.negated;
}

bool TpPattern::match(std::string_view name_utf8) const {
  const std::u32string name = decode_utf8(name_utf8, "parameter name '" + std::string(name_utf8) + "'");
  const size_t n = atoms_.size();  // position n = the whole pattern matched
  std::vector<char> cur(n + 1, 0), next(n + 1, 0);
  // Positions are only ever added in increasing order by the closure, so one forward pass suffices.
  auto close = [&](std::vector<char>& s) {
    for (size_t k = 0; k < n; ++k)
      if (s[k] && (atoms_[k].repeat || atoms_[k].optional)) s[k + 1] = 1;
  };
  cur[0] = 1;
  close(cur);
  for (size_t pos = 0;; ++pos) {
    if (cur[n]) {
      if (!anchored_end_) return true;  // re.match needs only a prefix
      // `$` matches at the end and right before a final '\n'.
      if (pos == name.size() || (pos + 1 == name.size() && name[pos] == U'\n')) return true;
    }
    if (pos == name.size()) return false;
    std::fill(next.begin(), next.end(), 0);
    bool any = false;
    for (size_t k = 0; k < n; ++k)
      if (cur[k] && accepts(atoms_[k], name[pos])) {
        next[atoms_[k].repeat ? k : k + 1] = 1;
        any = true;
      }
    if (!any) return false;
    close(next);
    cur.swap(next);
  }
}

}  // namespace zm::ds
