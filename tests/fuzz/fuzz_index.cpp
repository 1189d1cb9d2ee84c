// libFuzzer: a checkpoint folder made from fuzzed files, indexed, then every universal and
// browse file built and read. Input: [layout byte] then up to 4 x ([u32 length][file bytes]).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "zeromount/pt/error.h"
#include "zeromount/view/view.h"

namespace {

const char* kNames[2][4] = {
    {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
     "zero_pp_rank_1_mp_rank_00_optim_states.pt", "latest"},
    {"zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt",
     "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"},
};

std::string scratch() {
  static std::string dir;
  if (dir.empty()) {
    char t[] = "/tmp/zmfuzz-index.XXXXXX";
    dir = mkdtemp(t);
    mkdir((dir + "/global_step1").c_str(), 0755);
  }
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int layout = data[0] & 1;
  const std::string dir = scratch(), tag = dir + "/global_step1";
  for (const char* n : kNames[0]) unlink((tag + "/" + n).c_str());
  for (const char* n : kNames[1]) unlink((tag + "/" + n).c_str());
  size_t at = 1;
  for (int k = 0; k < 4 && at + 4 <= size; ++k) {
    uint32_t len;
    memcpy(&len, data + at, 4);
    at += 4;
    len = uint32_t(std::min<size_t>(len, size - at));
    FILE* f = fopen((tag + "/" + kNames[layout][k]).c_str(), "wb");
    fwrite(data + at, 1, len, f);
    fclose(f);
    at += len;
  }
  try {
    auto v = zm::view::View::load(dir);
    std::string buf(1 << 16, '\0');
    for (uint64_t i = 1; i <= v->tree().size(); ++i) {
      const auto& n = *v->tree().get(i);
      if (n.is_dir()) continue;
      try {
        v->attr(n);
        const auto c = v->open(n, O_RDONLY);
        for (uint64_t off = 0; off < c.size(); off += buf.size()) c.read(off, buf.data(), buf.size());
      } catch (const zm::Error&) {
      }
    }
  } catch (const zm::Error&) {
  }
  return 0;
}
