// Shared helpers for the libFuzzer targets (tests/fuzz/, built by tools/fuzz.sh; see
// docs/robustness.md). Only crashes, sanitizer reports, hangs and leaks count as findings: an
// rlp::Error (InputError included) is the parsers' documented way to refuse bad input.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace rlp::fuzz {

// A per-process scratch directory (tmpfs when available), created on first use.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/rlparity-fuzz-XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    return tmpl;
  }();
  return dir;
}

// Writes the fuzz input to `name` inside scratch_dir() and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, std::size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  std::size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) std::abort();
    done += static_cast<std::size_t>(w);
  }
  ::close(fd);
  return path;
}

}  // namespace rlp::fuzz
