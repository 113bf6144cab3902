// One safetensors file: header read and validated with plain reads before anything is mapped, then
// the whole file mapped read-only (PROT_READ, MAP_PRIVATE). Private to src/model.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data buffer; offsets are relative
// to the start of the data buffer (byte 8 + N).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"

namespace rlp::detail {

inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;  // 100 MiB

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // relative to the data buffer
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Reads and validates the header, then maps the file. Throws InputError naming `path`.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* data_buffer() const { return base_ + 8 + header_len_; }
  // Throws InputError if the file's size or modification time changed since it was opened (a
  // file truncated while mapped would SIGBUS on access).
  void check_unchanged() const;
  // Drops the pages of the mapping this process holds (MADV_DONTNEED): a later read faults them
  // back from the page cache, or the file. The mapping is read-only, so nothing is lost.
  void release_resident_pages() const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  uint64_t size_ = 0;
  uint64_t header_len_ = 0;
  int64_t mtime_ns_ = 0;
  const uint8_t* base_ = nullptr;
};

}  // namespace rlp::detail
