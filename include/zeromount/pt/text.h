#pragma once
// Text for people and for JSON, shared by inspect, dump and the browsing files.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zm::pt {

std::string human_bytes(uint64_t n);                              // "1.2 GiB"
std::string with_commas(uint64_t n);                              // "1,234,567"
std::string shape_text(const std::vector<int64_t>& shape);        // "[37, 12]", as Python prints a list
std::string shape_tuple_text(const std::vector<int64_t>& shape);  // "(37, 12)", "(37,)": a tuple
std::string json_escape(std::string_view s);                      // a JSON string literal, quotes included
std::string format_double(double v);                              // shortest round-trip form, as Python's repr
std::string pad(std::string s, size_t width);                     // left-aligned in a column of `width`
std::string lpad(std::string s, size_t width);                    // right-aligned
// Someone else's text quoted on one line: in single quotes, at most `max` bytes of it, with
// control characters, quotes and bytes over 0x7e escaped as Python's repr escapes them, and "..."
// where it was cut. Source files may hold anything: an error line quotes a prefix, never a file.
std::string quoted(std::string_view s, size_t max = 64);

}  // namespace zm::pt
