// exp2 of many floats at once, as the kernel paths' softmax uses it (FlashAttention's
// p = exp2(s*c - m*c)): the vector form of exp2f_model (numerics/libm_model.hpp, glibc's exp2f
// written out so that its bits depend on no libm). Tests compare scalar and vector forms with the
// host's std::exp2 on every float (slow label) and a dense sample (default suite), and with a
// float64 exp2 to within one ulp.
#pragma once

namespace rlp::num {

// x[i] = exp2f_model(x[i]) (libm_model.hpp, the scalar form shared with the CUDA kernels) for
// i < n, 16 at a time where the CPU has AVX-512.
void exp2_model_inplace(float* x, int n);

}  // namespace rlp::num
