// Bytes for Job::all_gather: plain values appended and read back in the same order, bit for bit
// (a double travels as its 8 bytes, so gathered results are the ones the owning rank computed).
#pragma once
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "rlparity/util/error.hpp"

namespace rlp {

class Packer {
 public:
  template <class T>
  void put(const T* values, std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(values), n * sizeof(T));
  }
  template <class T>
  void put_vector(const std::vector<T>& v) {
    const uint64_t n = v.size();
    put(&n, 1);
    put(v.data(), v.size());
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

class Unpacker {
 public:
  explicit Unpacker(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  void get(T* values, std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n * sizeof(T) > bytes_.size() - at_)
      RLP_THROW("internal error: a rank's message is shorter than expected");
    std::memcpy(values, bytes_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  template <class T>
  std::vector<T> get_vector() {
    uint64_t n = 0;
    get(&n, 1);
    if (n > (bytes_.size() - at_) / sizeof(T))
      RLP_THROW("internal error: a rank's message is shorter than expected");
    std::vector<T> v(static_cast<std::size_t>(n));
    get(v.data(), v.size());
    return v;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  std::size_t at_ = 0;
};

}  // namespace rlp
