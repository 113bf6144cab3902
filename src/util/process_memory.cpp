#include "rlparity/util/process_memory.hpp"

#include <fstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rlp {

int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) {
      try {
        return static_cast<int64_t>(std::stoll(line.substr(k.size()))) * 1024;
      } catch (const std::exception&) {
        return -1;
      }
    }
  return -1;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

void keep_freed_buffers() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, -1);  // never trim (the value is taken as unsigned: the maximum)
#endif
}

}  // namespace rlp
