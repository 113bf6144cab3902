#include "cuda_casts.hpp"
#include "cuda_check.hpp"
#include "device_buffer.hpp"

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

// One CUDA block per quantization block (blockIdx.x: column block, blockIdx.y: row block).
__global__ void quantize_blocks_kernel(const float* x, int rows, int cols, int block_rows, int block_cols,
                                       num::ScaleOptions opt, uint8_t* codes, float* scale_inv) {
  __shared__ unsigned int s_amax_bits;
  __shared__ unsigned int s_nan;
  __shared__ num::BlockScale s_scale;
  const int bc = static_cast<int>(blockIdx.x), br = static_cast<int>(blockIdx.y);
  const int r0 = br * block_rows, c0 = bc * block_cols;
  const int r1 = min(rows, r0 + block_rows), c1 = min(cols, c0 + block_cols);
  const int w = c1 - c0;
  const long long count = static_cast<long long>(r1 - r0) * w;
  if (threadIdx.x == 0) {
    s_amax_bits = 0u;
    s_nan = 0u;
  }
  __syncthreads();
  // NaN-ignoring max of |x| on the bits (order independent), as the host does.
  unsigned int m = 0u, nan = 0u;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) {
    const int r = r0 + static_cast<int>(i / w), c = c0 + static_cast<int>(i % w);
    const unsigned int a = num::f32_bits(x[static_cast<std::size_t>(r) * cols + c]) & 0x7FFFFFFFu;
    const bool is_nan = a > 0x7F800000u;
    nan |= is_nan ? 1u : 0u;
    const unsigned int b = is_nan ? 0u : a;
    m = b > m ? b : m;
  }
  atomicMax(&s_amax_bits, m);
  atomicOr(&s_nan, nan);
  __syncthreads();
  if (threadIdx.x == 0) {
    const bool partial = (r1 - r0) < block_rows || w < block_cols;
    const float last = x[static_cast<std::size_t>(rows) * cols - 1];
    const float amax = num::block_amax(s_amax_bits, s_nan != 0u, partial, last, opt.convention);
    s_scale = num::compute_block_scale(amax, opt);
    scale_inv[static_cast<std::size_t>(br) * gridDim.x + bc] = s_scale.scale_inv;
  }
  __syncthreads();
  const num::BlockScale s = s_scale;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) {
    const int r = r0 + static_cast<int>(i / w), c = c0 + static_cast<int>(i % w);
    const std::size_t off = static_cast<std::size_t>(r) * cols + c;
    codes[off] = num::quantize_with(x[off], s, opt);
  }
}

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
  RLP_CUDA_CHECK(cudaMemcpy(din.get(), in, n * sizeof(float), cudaMemcpyHostToDevice));
  fp8_kernel<<<grid_for(n), 256>>>(din.get(), dout.get(), n, kind, sat);
  RLP_CUDA_CHECK(cudaGetLastError());
  RLP_CUDA_CHECK(cudaMemcpy(out, dout.get(), n, cudaMemcpyDeviceToHost));
}

void cast_to_bf16(const float* in, uint16_t* out, std::size_t n) {
  if (n == 0) return;
  DeviceBuffer<float> din(n);
  DeviceBuffer<uint16_t> dout(n);
  RLP_CUDA_CHECK(cudaMemcpy(din.get(), in, n * sizeof(float), cudaMemcpyHostToDevice));
  bf16_kernel<<<grid_for(n), 256>>>(din.get(), dout.get(), n);
  RLP_CUDA_CHECK(cudaGetLastError());
  RLP_CUDA_CHECK(cudaMemcpy(out, dout.get(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
}

num::Fp8Tensor quantize_blocks(const float* x, int rows, int cols, int block_rows, int block_cols,
                               const num::ScaleOptions& opt) {
  if (rows < 0 || cols < 0 || block_rows <= 0 || block_cols <= 0)
    throw ::rlp::Error(__FILE__, __LINE__, "cuda::quantize_blocks: bad shape or block shape");
  num::Fp8Tensor t;
  t.rows = rows;
  t.cols = cols;
  t.block_rows = block_rows;
  t.block_cols = block_cols;
  t.kind = opt.kind;
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  t.codes.resize(n);
  t.scale_inv.resize(static_cast<std::size_t>(t.row_blocks()) * static_cast<std::size_t>(t.col_blocks()));
  if (n == 0) return t;
  DeviceBuffer<float> din(n);
  DeviceBuffer<uint8_t> dcodes(n);
  DeviceBuffer<float> dscale(t.scale_inv.size());
  RLP_CUDA_CHECK(cudaMemcpy(din.get(), x, n * sizeof(float), cudaMemcpyHostToDevice));
  quantize_blocks_device(din.get(), rows, cols, block_rows, block_cols, opt, dcodes.get(), dscale.get());
  RLP_CUDA_CHECK(cudaMemcpy(t.codes.data(), dcodes.get(), n, cudaMemcpyDeviceToHost));
  RLP_CUDA_CHECK(cudaMemcpy(t.scale_inv.data(), dscale.get(), t.scale_inv.size() * sizeof(float),
                            cudaMemcpyDeviceToHost));
  return t;
}

void quantize_blocks_device(const float* d_x, int rows, int cols, int block_rows, int block_cols,
                            const num::ScaleOptions& opt, uint8_t* d_codes, float* d_scale_inv) {
  if (rows < 0 || cols < 0 || block_rows <= 0 || block_cols <= 0)
    throw ::rlp::Error(__FILE__, __LINE__, "cuda::quantize_blocks_device: bad shape or block shape");
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + block_cols - 1) / block_cols),
                  static_cast<unsigned>((rows + block_rows - 1) / block_rows));
  quantize_blocks_kernel<<<grid, 256>>>(d_x, rows, cols, block_rows, block_cols, opt, d_codes, d_scale_inv);
  RLP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace rlp::cuda
