// Every one of the 2^32 float bit patterns through every cast, against NVIDIA's host-side
// conversions (cuda_fp8.h, cuda_bf16.h, cuda_fp16.h). Label `slow`. Parallel over all threads.
// RLPARITY_EXHAUSTIVE_SHIFT=n (env) checks every 2^n-th pattern only, for a quick local look.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/scaling.hpp"
#include "rlparity/util/parallel.hpp"

#if RLPARITY_HAVE_NV_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace rlp::num {
namespace {

#if RLPARITY_HAVE_NV_HEADERS
// Runs check(u) over all 2^32 patterns (or every 2^shift-th); returns the mismatch count and
// records the first mismatch.
template <class Check>
uint64_t sweep(Check check, std::string* first) {
  const char* env = std::getenv("RLPARITY_EXHAUSTIVE_SHIFT");
  const int shift = env ? std::atoi(env) : 0;
  const uint64_t step = uint64_t{1} << shift;
  constexpr std::size_t kChunks = 4096;  // 2^20 patterns each
  std::atomic<uint64_t> bad{0};
  std::mutex mu;
  rlp::parallel_for(kChunks, 1, [&](std::size_t c0, std::size_t c1) {
    for (std::size_t c = c0; c < c1; ++c) {
      const uint64_t b = static_cast<uint64_t>(c) << 20, e = b + (uint64_t{1} << 20);
      uint64_t local = 0;
      for (uint64_t v = b; v < e; v += step) {
        const auto u = static_cast<uint32_t>(v);
        if (!check(u)) {
          if (local++ == 0) {
            std::lock_guard<std::mutex> lock(mu);
            if (first->empty()) *first = std::to_string(u);
          }
        }
      }
      bad += local;
    }
  });
  return bad.load();
}

uint8_t nv_fp8(float x, Fp8Kind k, Saturation s) {
  return __nv_cvt_float_to_fp8(x, s == Saturation::satfinite ? __NV_SATFINITE : __NV_NOSAT,
                               k == Fp8Kind::e4m3 ? __NV_E4M3 : __NV_E5M2);
}

void fp8_all(Fp8Kind k) {
  std::string first;
  const uint64_t bad = sweep(
      [k](uint32_t u) {
        const float x = bits_f32(u);
        for (Saturation s : {Saturation::none, Saturation::satfinite}) {
          const uint8_t ref = nv_fp8(x, k, s);
          if (float_to_fp8(x, k, s) != ref || fp8_encode_fast(x, k, s) != ref) return false;
        }
        return true;
      },
      &first);
  EXPECT_EQ(bad, 0u) << "first mismatching float bits (decimal): " << first;
}
#endif

TEST(NumericsExhaustive, E4m3AllFloats) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_fp8.h) not found at configure time";
#else
  fp8_all(Fp8Kind::e4m3);
#endif
}

TEST(NumericsExhaustive, E5m2AllFloats) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_fp8.h) not found at configure time";
#else
  fp8_all(Fp8Kind::e5m2);
#endif
}

TEST(NumericsExhaustive, Bf16Fp16AllFloats) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_bf16.h) not found at configure time";
#else
  std::string first;
  const uint64_t bad = sweep(
      [](uint32_t u) {
        const float x = bits_f32(u);
        return float_to_bf16_bits(x) == static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x &&
               float_to_fp16_bits(x) == static_cast<__half_raw>(__float2half_rn(x)).x;
      },
      &first);
  EXPECT_EQ(bad, 0u) << "first mismatching float bits (decimal): " << first;
#endif
}

TEST(NumericsExhaustive, Ue8m0AllFloats) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_fp8.h) not found at configure time";
#else
  std::string first;
  const uint64_t bad = sweep(
      [](uint32_t u) {
        const float x = bits_f32(u);
        return float_to_ue8m0(x, Pow2Rounding::down, Saturation::none) ==
                   __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundZero) &&
               float_to_ue8m0(x, Pow2Rounding::down, Saturation::satfinite) ==
                   __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero) &&
               float_to_ue8m0(x, Pow2Rounding::up, Saturation::none) ==
                   __nv_cvt_float_to_e8m0(x, __NV_NOSAT, cudaRoundPosInf) &&
               float_to_ue8m0(x, Pow2Rounding::up, Saturation::satfinite) ==
                   __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf);
      },
      &first);
  EXPECT_EQ(bad, 0u) << "first mismatching float bits (decimal): " << first;
#endif
}

}  // namespace
}  // namespace rlp::num
