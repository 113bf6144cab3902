#include "cuda_casts.hpp"

#include "cuda_check.hpp"

namespace rlp::cuda {
namespace {

__global__ void fp8_kernel(const float* in, uint8_t* out, std::size_t n, num::Fp8Kind kind,
                           num::Saturation sat) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = num::float_to_fp8(in[i], kind, sat);
}

__global__ void bf16_kernel(const float* in, uint16_t* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = num::float_to_bf16_bits(in[i]);
}

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(std::size_t n) { RLP_CUDA_CHECK(cudaMalloc(&ptr, n * sizeof(T) + 1)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

unsigned grid_for(std::size_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device found";
    return false;
  }
  return true;
}

void cast_to_fp8(const float* in, uint8_t* out, std::size_t n, num::Fp8Kind kind, num::Saturation sat) {
  if (n == 0) return;
  DeviceBuffer<float> din(n);
  DeviceBuffer<uint8_t> dout(n);
  RLP_CUDA_CHECK(cudaMemcpy(din.ptr, in, n * sizeof(float), cudaMemcpyHostToDevice));
  fp8_kernel<<<grid_for(n), 256>>>(din.ptr, dout.ptr, n, kind, sat);
  RLP_CUDA_CHECK(cudaGetLastError());
  RLP_CUDA_CHECK(cudaMemcpy(out, dout.ptr, n, cudaMemcpyDeviceToHost));
}

void cast_to_bf16(const float* in, uint16_t* out, std::size_t n) {
  if (n == 0) return;
  DeviceBuffer<float> din(n);
  DeviceBuffer<uint16_t> dout(n);
  RLP_CUDA_CHECK(cudaMemcpy(din.ptr, in, n * sizeof(float), cudaMemcpyHostToDevice));
  bf16_kernel<<<grid_for(n), 256>>>(din.ptr, dout.ptr, n);
  RLP_CUDA_CHECK(cudaGetLastError());
  RLP_CUDA_CHECK(cudaMemcpy(out, dout.ptr, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
}

}  // namespace rlp::cuda
