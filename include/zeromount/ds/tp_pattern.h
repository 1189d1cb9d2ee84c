#pragma once
// The parameter-name patterns of universal_checkpoint_info, matched as ds_to_universal.py does:
// Python `re.match(pattern, name)`, i.e. anchored at the start and, unless the pattern ends in `$`,
// not at the end. Only the subset that shipped patterns use is accepted (AutoTP's exact
// `^<re.escape(name)>$`, Megatron-DeepSpeed's loose `\d+.input_layernorm.weight`, AutoEP's
// `.*\.experts\.w[123]$`); anything else is refused when the pattern is compiled, never guessed.
//
// Supported: literal characters; `\` + any non-alphanumeric ASCII character (what re.escape
// writes); `.` (any character but '\n'); `\d`; classes `[...]` / `[^...]` of literals, escapes,
// ranges and `\d`; the quantifiers `*`, `+`, `?` after one atom; `^` first; `$` last (which, as in
// Python, also matches before one trailing '\n').
#include <string>
#include <string_view>
#include <vector>

namespace zm::ds {

class TpPattern {
 public:
  // Throws FormatError "pattern '<p>': <feature> is not supported ..." on anything outside the subset.
  explicit TpPattern(std::string_view pattern);

  // re.match(pattern, name) is not None. Names are UTF-8 and matched by code point, as Python
  // matches str. Throws FormatError when `\d` meets a non-ASCII character: Python's `\d` accepts
  // every Unicode decimal digit, and we keep no Unicode tables rather than guess.
  bool match(std::string_view name) const;

  const std::string& source() const { return source_; }

 private:
  struct Atom {
    enum Kind : unsigned char { Literal, Any, Class } kind = Literal;
    char32_t ch = 0;                                    // Literal
    bool negated = false;                               // Class
    bool digits = false;                                // Class: contains \d
    std::vector<std::pair<char32_t, char32_t>> ranges;  // Class: inclusive code point ranges
    bool repeat = false;                                // `*` (after `+` expansion: x+ == x x*)
    bool optional = false;                              // `?`
  };
  bool accepts(const Atom& a, char32_t c) const;

  std::string source_;
  std::vector<Atom> atoms_;
  bool anchored_end_ = false;
};

}  // namespace zm::ds
