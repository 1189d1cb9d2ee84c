#pragma once
// How a parameter name becomes a folder name inside made-up folders.
#include <initializer_list>
#include <string>
#include <string_view>

namespace zm::view {

// DeepSpeed's own folder name for a parameter (ds_to_universal.py uses the name as it is), escaped
// only where it cannot be a folder name here: '/' and NUL are written %2F and %00, "." and ".."
// %2E and %2E%2E, an empty name "%", a name over 255 bytes is cut and ends in %~<hash>, and a name
// equal to one of `taken` (a file beside the parameter folders: summary, optimizer_state.pt)
// gets its first byte written %XX.
std::string param_dir_name(std::string_view name, std::initializer_list<std::string_view> taken = {});

}  // namespace zm::view
