#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

namespace rlp::detail {
namespace {

using json = nlohmann::json;

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + static_cast<int64_t>(st.st_mtim.tv_nsec);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exact(int fd, void* buf, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      RLP_THROW_INPUT("{}: read failed: {}", path, std::strerror(errno));
    }
    if (r == 0) RLP_THROW_INPUT("{}: unexpected end of file while reading the header", path);
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

bool parse_dtype(const std::string& s, DType& d) {
  if (s == "F32")
    d = DType::fp32;
  else if (s == "BF16")
    d = DType::bf16;
  else if (s == "F16")
    d = DType::fp16;
  else if (s == "F8_E4M3")  // the codes of a block-scaled fp8 linear (checked by Checkpoint::open)
    d = DType::e4m3;
  else
    return false;
  return true;
}

bool known_unsupported_dtype(const std::string& s) {
  static const std::set<std::string> k = {"F64",     "I64",     "I32", "I16",  "I8",      "U8",
                                          "U16",     "U32",     "U64", "BOOL", "F8_E5M2", "F8_E8M0",
                                          "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  return k.count(s) != 0;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) RLP_THROW_INPUT("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) RLP_THROW_INPUT("{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) RLP_THROW_INPUT("{}: not a regular file", path);
  size_ = static_cast<uint64_t>(st.st_size);
  mtime_ns_ = mtime_ns(st);
  if (size_ < 8)
    RLP_THROW_INPUT("{}: file is {} bytes, too short for a safetensors header (8-byte length)", path, size_);

  uint8_t len_bytes[8];
  read_exact(f.fd, len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > kMaxSafetensorsHeader)
    RLP_THROW_INPUT("{}: header length {} bytes exceeds the {} MiB limit (corrupt or not a safetensors file)",
                    path, n, kMaxSafetensorsHeader >> 20);
  if (n > size_ - 8)
    RLP_THROW_INPUT("{}: header length {} bytes runs past the end of the file ({} bytes; truncated?)", path,
                    n, size_);
  if (n < 2) RLP_THROW_INPUT("{}: header length {} is too short for a JSON object", path, n);
  header_len_ = n;
  const uint64_t data_size = size_ - 8 - n;

  std::string text(n, '\0');
  read_exact(f.fd, text.data(), n, 8, path);

  check_json_depth(text, path + ": safetensors header");
  // Parse, refusing duplicate top-level keys (nlohmann would silently keep the last one).
  std::set<std::string> seen;
  std::string duplicate;
  json header;
  try {
    header = json::parse(text, [&](int depth, json::parse_event_t ev, json& parsed) {
      if (depth == 1 && ev == json::parse_event_t::key && duplicate.empty()) {
        const std::string k = parsed.get<std::string>();
        if (!seen.insert(k).second) duplicate = k;
      }
      return true;
    });
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    RLP_THROW_INPUT("{}: the safetensors header is not valid JSON: {}", path, e.what());
  }
  if (!duplicate.empty()) RLP_THROW_INPUT("{}: tensor '{}' appears twice in the header", path, duplicate);
  if (!header.is_object()) RLP_THROW_INPUT("{}: the safetensors header is not a JSON object", path);

  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) RLP_THROW_INPUT("{}: '__metadata__' must be an object", path);
      continue;
    }
    if (!v.is_object()) RLP_THROW_INPUT("{}: tensor '{}': header entry is not an object", path, name);
    for (const auto& [k, unused] : v.items()) {
      (void)unused;
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        RLP_THROW_INPUT("{}: tensor '{}': unexpected header field '{}'", path, name, k);
    }
    SafetensorsEntry e;
    e.name = name;
    if (!v.contains("dtype") || !v.at("dtype").is_string())
      RLP_THROW_INPUT("{}: tensor '{}': missing or non-string 'dtype'", path, name);
    const std::string ds = v.at("dtype").get<std::string>();
    if (!parse_dtype(ds, e.dtype)) {
      if (known_unsupported_dtype(ds))
        RLP_THROW_INPUT("{}: tensor '{}': dtype {} is not supported (supported: F32, BF16, F16, F8_E4M3)",
                        path, name, ds);
      RLP_THROW_INPUT("{}: tensor '{}': unknown dtype '{}' (supported: F32, BF16, F16, F8_E4M3)", path, name,
                      ds);
    }
    if (!v.contains("shape") || !v.at("shape").is_array())
      RLP_THROW_INPUT("{}: tensor '{}': missing or non-list 'shape'", path, name);
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& d : v.at("shape")) {
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0))
        RLP_THROW_INPUT("{}: tensor '{}': shape {} has an entry that is not a non-negative integer", path,
                        name, v.at("shape").dump());
      const uint64_t du = d.get<uint64_t>();
      if (du > static_cast<uint64_t>(INT64_MAX)) overflow = true;
      e.shape.push_back(static_cast<int64_t>(du));
      if (__builtin_mul_overflow(numel, du, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes))
      RLP_THROW_INPUT("{}: tensor '{}': shape {} is too large", path, name, v.at("shape").dump());
    if (!v.contains("data_offsets") || !v.at("data_offsets").is_array() || v.at("data_offsets").size() != 2)
      RLP_THROW_INPUT("{}: tensor '{}': 'data_offsets' must be a list [begin, end]", path, name);
    const json& off = v.at("data_offsets");
    for (const auto& o : off) {
      if (!o.is_number_integer() || (!o.is_number_unsigned() && o.get<int64_t>() < 0))
        RLP_THROW_INPUT("{}: tensor '{}': data_offsets {} must be non-negative integers", path, name,
                        off.dump());
    }
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      RLP_THROW_INPUT("{}: tensor '{}': data_offsets [{}, {}] has begin after end", path, name, e.begin,
                      e.end);
    if (e.end > data_size)
      RLP_THROW_INPUT(
          "{}: tensor '{}': data_offsets [{}, {}] run past the end of the file (data buffer is {} bytes; "
          "truncated?)",
          path, name, e.begin, e.end, data_size);
    if (e.end - e.begin != nbytes)
      RLP_THROW_INPUT("{}: tensor '{}': {} x {} needs {} bytes but data_offsets [{}, {}] span {} bytes", path,
                      name, ds, v.at("shape").dump(), nbytes, e.begin, e.end, e.end - e.begin);
    entries_.push_back(std::move(e));
  }

  // Ranges must not overlap (empty tensors take no bytes and overlap nothing).
  std::vector<const SafetensorsEntry*> order;
  for (const auto& e : entries_)
    if (e.end > e.begin) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i]->begin < order[i - 1]->end)
      RLP_THROW_INPUT("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap in the file", path,
                      order[i - 1]->name, order[i - 1]->begin, order[i - 1]->end, order[i]->name,
                      order[i]->begin, order[i]->end);
  }

  // Only now, with every size checked against the file, map it.
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (p == MAP_FAILED) RLP_THROW_INPUT("{}: mmap of {} bytes failed: {}", path, size_, std::strerror(errno));
  base_ = static_cast<const uint8_t*>(p);
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void SafetensorsFile::release_resident_pages() const { release_pages(base_, size_); }

void SafetensorsFile::check_unchanged() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    RLP_THROW_INPUT("{}: file disappeared while open: {}", path_, std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != size_ || mtime_ns(st) != mtime_ns_)
    RLP_THROW_INPUT(
        "{}: file was modified while rlparity had it open (size {} -> {}); checkpoints must not change "
        "while in use",
        path_, size_, static_cast<uint64_t>(st.st_size));
}

}  // namespace rlp::detail
