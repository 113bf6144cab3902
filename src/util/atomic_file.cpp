#include "rlparity/util/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {
namespace fs = std::filesystem;

fs::path directory_of(const std::string& path) {
  const fs::path p(path);
  return p.has_parent_path() ? p.parent_path() : fs::path(".");
}

// The rename is durable once the directory is synced; a failure there loses nothing written.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

void check_output_path(const std::string& path, const std::string& what, bool overwrite) {
  if (path.empty()) RLP_THROW_INPUT("output path is empty");
  const fs::path dir = directory_of(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    RLP_THROW_INPUT("cannot write {} '{}': directory '{}' does not exist", what, path, dir.string());
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    RLP_THROW_INPUT("cannot write {} '{}': directory '{}' is not writable ({})", what, path, dir.string(),
                    std::strerror(errno));
  const auto st = fs::symlink_status(path, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) RLP_THROW_INPUT("cannot write {} '{}': it is a directory", what, path);
    if (!overwrite) RLP_THROW_INPUT("output file '{}' already exists (use --force to overwrite)", path);
  }
}

void write_file_atomically(const std::string& path, const std::string& text, const std::string& what) {
  check_output_path(path, what, /*overwrite=*/true);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) RLP_THROW_INPUT("cannot write {} '{}': {}", what, tmp, std::strerror(errno));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  ::fsync(::fileno(f)) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    const int e = ok ? errno : err;
    ::unlink(tmp.c_str());
    RLP_THROW_INPUT("cannot write {} '{}': {}", what, path, std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    RLP_THROW_INPUT("cannot write {} '{}': {}", what, path, std::strerror(e));
  }
  sync_directory(directory_of(path));
}

}  // namespace rlp
