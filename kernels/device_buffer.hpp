// A device allocation owned by one object (cudaMalloc / cudaFree), grown on demand.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "cuda_check.hpp"

namespace rlp::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) { ensure(n); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failing free has nothing to report to
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) {
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      n_ = o.n_;
      o.ptr_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }

  // Capacity for at least n elements (contents are not kept when it grows).
  T* ensure(std::size_t n) {
    if (n > n_ || !ptr_) {
      if (ptr_) RLP_CUDA_CHECK(cudaFree(ptr_));
      ptr_ = nullptr;
      n_ = 0;
      RLP_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), (n == 0 ? 1 : n) * sizeof(T)));
      n_ = n;
    }
    return ptr_;
  }
  void upload(const T* host, std::size_t n) {
    ensure(n);
    if (n) RLP_CUDA_CHECK(cudaMemcpy(ptr_, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void upload(const std::vector<T>& host) { upload(host.data(), host.size()); }
  void download(T* host, std::size_t n) const {
    if (n) RLP_CUDA_CHECK(cudaMemcpy(host, ptr_, n * sizeof(T), cudaMemcpyDeviceToHost));
  }
  T* get() const { return ptr_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace rlp::cuda
