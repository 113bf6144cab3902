// exp2 of a float, as the kernel paths' softmax uses it (FlashAttention's p = exp2(s*c - m*c)).
// The emulation owns this function rather than calling the host libm, so its bits do not depend
// on which libm (or which of its CPU-dispatched variants) a machine has: it is glibc's exp2f
// (ARM optimized-routines, glibc >= 2.28) as its x86-64 FMA build computes it: x = k/32 + r,
// 2^(k/32) from a 32-entry table, a degree-3 polynomial in r in double with fused multiply-adds,
// one rounding to float. Tests compare it with the host's std::exp2 on every float (slow label)
// and a dense sample (default suite), and with a float64 exp2 to within one ulp.
#pragma once

namespace rlp::num {

// = exp2f_model (libm_model.hpp, shared with the CUDA kernels).
float exp2_model(float x);
// x[i] = exp2_model(x[i]) for i < n, 16 at a time where the CPU has AVX-512.
void exp2_model_inplace(float* x, int n);

}  // namespace rlp::num
