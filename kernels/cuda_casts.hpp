// Host-callable wrappers around the CUDA cast/quantize kernels. Each kernel calls the shared
// numerics in include/rlparity/numerics, so GPU and emulator casts are the same code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp::cuda {

// True when a CUDA device is usable; otherwise `why` says what is missing.
bool device_available(std::string* why);

// Casts n floats to fp8 codes on the device (host buffers in and out).
void cast_to_fp8(const float* in, uint8_t* out, std::size_t n, num::Fp8Kind kind, num::Saturation sat);

// Rounds n floats to bf16 bit patterns on the device.
void cast_to_bf16(const float* in, uint16_t* out, std::size_t n);

// Block quantization on the device (1x128, 128x128, per-tensor, partial edge blocks), one CUDA
// block per quantization block, calling compute_block_scale / quantize_with from scaling.hpp:
// bit-identical to num::quantize_blocks on the host (the amax is an integer max on |x|'s bits,
// so the reduction order cannot matter).
num::Fp8Tensor quantize_blocks(const float* x, int rows, int cols, int block_rows, int block_cols,
                               const num::ScaleOptions& opt);

// The same on device buffers: d_x [rows x cols] floats, d_codes [rows x cols], d_scale_inv
// [row_blocks x col_blocks] (row-major over blocks), all device pointers. Used by CudaOps to
// quantize activations for the block-scaled FP8 GEMM.
void quantize_blocks_device(const float* d_x, int rows, int cols, int block_rows, int block_cols,
                            const num::ScaleOptions& opt, uint8_t* d_codes, float* d_scale_inv);

}  // namespace rlp::cuda
