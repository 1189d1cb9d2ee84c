// libFuzzer: a whole .pt file through the zip reader, the pickle machine and the dumpers.
#include "fuzz_io.h"
#include "zeromount/pt/dump.h"
#include "zeromount/pt/error.h"
#include "zeromount/pt/pt_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zm::fuzz::as_file(data, size);
  try {
    auto f = zm::pt::load_pt(path);
    zm::pt::dump_tree(*f);
    zm::pt::dump_json(*f);
  } catch (const zm::Error&) {
  }
  return 0;
}
