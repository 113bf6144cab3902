// Casts of formats.hpp (and the branch-free fp8 encoder of scaling.hpp) against NVIDIA's host-side
// conversions in cuda_fp8.h / cuda_bf16.h / cuda_fp16.h, over a dense sample: every float
// exponent, both signs, mantissas at tie-1, tie, tie+1 for EVERY possible rounding position (so
// every tie point of every target format, normal or subnormal), plus zeros, denormals, inf, NaN.
// The slow test repeats this over all 2^32 floats.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/scaling.hpp"

#if RLPARITY_HAVE_NV_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace rlp::num {
namespace {

std::vector<uint32_t> dense_sample() {
  std::vector<uint32_t> out;
  std::mt19937 rng(12345u);
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t e = 0; e < 256; ++e) {
      const uint32_t base = (sign << 31) | (e << 23);
      for (int s = 1; s <= 24; ++s) {
        const uint32_t half = 1u << (s - 1);
        const uint32_t highs[] = {0u, 1u, 2u, 3u, static_cast<uint32_t>(rng()), 0xFFFFFFFFu};
        for (uint32_t h : highs) {
          const uint32_t m = ((s < 32 ? (h << s) : 0u) | half) & 0x7FFFFFu;
          for (int d = -1; d <= 1; ++d) out.push_back(base | ((m + static_cast<uint32_t>(d)) & 0x7FFFFFu));
        }
      }
      out.push_back(base);
      out.push_back(base | 0x7FFFFFu);
      out.push_back(base | 1u);
    }
  return out;
}

#if RLPARITY_HAVE_NV_HEADERS
uint16_t nv_bf16(float x) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x; }
uint16_t nv_bf16_plain(float x) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16(x)).x; }
uint16_t nv_fp16(float x) { return static_cast<__half_raw>(__float2half_rn(x)).x; }
uint8_t nv_fp8(float x, Fp8Kind k, Saturation s) {
  return __nv_cvt_float_to_fp8(x, s == Saturation::satfinite ? __NV_SATFINITE : __NV_NOSAT,
                               k == Fp8Kind::e4m3 ? __NV_E4M3 : __NV_E5M2);
}
uint8_t nv_e8m0(float x, Pow2Rounding r, Saturation s) {
  return __nv_cvt_float_to_e8m0(x, s == Saturation::satfinite ? __NV_SATFINITE : __NV_NOSAT,
                                r == Pow2Rounding::up ? cudaRoundPosInf : cudaRoundZero);
}
#endif

TEST(NumericsFormats, DenseSampleMatchesNvidia) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_fp8.h) not found at configure time";
#else
  const auto sample = dense_sample();
  ASSERT_GT(sample.size(), 100000u);
  int fails = 0;
  for (uint32_t u : sample) {
    const float x = bits_f32(u);
    auto report = [&](const char* what, uint32_t ours, uint32_t theirs) {
      if (ours != theirs && fails++ < 10)
        ADD_FAILURE() << what << " x=0x" << std::hex << u << " ours=0x" << ours << " nvidia=0x" << theirs;
    };
    report("bf16_rn", float_to_bf16_bits(x), nv_bf16(x));
    report("bf16", float_to_bf16_bits(x), nv_bf16_plain(x));
    report("fp16_rn", float_to_fp16_bits(x), nv_fp16(x));
    for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2})
      for (Saturation s : {Saturation::none, Saturation::satfinite}) {
        const uint8_t ref = nv_fp8(x, k, s);
        report(k == Fp8Kind::e4m3 ? "e4m3" : "e5m2", float_to_fp8(x, k, s), ref);
        report(k == Fp8Kind::e4m3 ? "e4m3 fast" : "e5m2 fast", fp8_encode_fast(x, k, s), ref);
      }
    for (Pow2Rounding r : {Pow2Rounding::down, Pow2Rounding::up})
      for (Saturation s : {Saturation::none, Saturation::satfinite})
        report(r == Pow2Rounding::up ? "e8m0 rp" : "e8m0 rz", float_to_ue8m0(x, r, s), nv_e8m0(x, r, s));
  }
  EXPECT_EQ(fails, 0);
#endif
}

TEST(NumericsFormats, AllFp8CodesDecodeLikeNvidia) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers (cuda_fp8.h) not found at configure time";
#else
  for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2}) {
    for (int c = 0; c < 256; ++c) {
      const auto code = static_cast<uint8_t>(c);
      const __half_raw h = __nv_cvt_fp8_to_halfraw(code, k == Fp8Kind::e4m3 ? __NV_E4M3 : __NV_E5M2);
      EXPECT_EQ(fp8_to_fp16_bits(code, k), h.x) << "kind " << static_cast<int>(k) << " code " << c;
      const float ref = __half2float(__half(h));
      const float ours = fp8_to_float(code, k);
      if (ref != ref) {
        EXPECT_NE(ours, ours) << "code " << c;
      } else {
        EXPECT_EQ(f32_bits(ours), f32_bits(ref)) << "kind " << static_cast<int>(k) << " code " << c;
        // and the value survives a round trip through the encoder
        EXPECT_EQ(float_to_fp8(ours, k, Saturation::none), code);
      }
    }
  }
#endif
}

TEST(NumericsFormats, All16BitDecodesLikeNvidia) {
#if !RLPARITY_HAVE_NV_HEADERS
  GTEST_SKIP() << "NVIDIA headers not found at configure time";
#else
  for (uint32_t b = 0; b < 65536; ++b) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(b);
    const float h = __half2float(__half(hr));
    const float ours = fp16_bits_to_float(static_cast<uint16_t>(b));
    if (h != h)
      EXPECT_NE(ours, ours);
    else
      EXPECT_EQ(f32_bits(ours), f32_bits(h)) << "fp16 0x" << std::hex << b;
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(b);
    const float bf = __bfloat162float(__nv_bfloat16(br));
    EXPECT_EQ(f32_bits(bf16_bits_to_float(static_cast<uint16_t>(b))), f32_bits(bf))
        << "bf16 0x" << std::hex << b;
  }
  for (int c = 0; c < 256; ++c) {
    const __nv_bfloat16_raw r = __nv_cvt_e8m0_to_bf16raw(static_cast<__nv_fp8_storage_t>(c));
    const float ref = __bfloat162float(__nv_bfloat16(r));
    const float ours = ue8m0_to_float(static_cast<uint8_t>(c));
    if (ref != ref)
      EXPECT_NE(ours, ours);
    else
      EXPECT_EQ(f32_bits(ours), f32_bits(ref)) << "e8m0 code " << c;
  }
#endif
}

// Hand-worked values that do not need NVIDIA's headers.
TEST(NumericsFormats, HandWorked) {
  EXPECT_EQ(float_to_fp8(448.0f, Fp8Kind::e4m3, Saturation::none), 0x7E);
  EXPECT_EQ(float_to_fp8(464.0f, Fp8Kind::e4m3, Saturation::none), 0x7E);  // tie to even (448)
  EXPECT_EQ(float_to_fp8(464.1f, Fp8Kind::e4m3, Saturation::none), 0x7F);  // NaN: no inf in e4m3
  EXPECT_EQ(float_to_fp8(464.1f, Fp8Kind::e4m3, Saturation::satfinite), 0x7E);
  EXPECT_EQ(float_to_fp8(-1e9f, Fp8Kind::e4m3, Saturation::satfinite), 0xFE);
  EXPECT_EQ(float_to_fp8(61440.0f, Fp8Kind::e5m2, Saturation::none), 0x7C);   // tie rounds to inf
  EXPECT_EQ(float_to_fp8(0x1p-10f, Fp8Kind::e4m3, Saturation::none), 0x00);   // half min subnormal: even
  EXPECT_EQ(float_to_fp8(0x1.8p-9f, Fp8Kind::e4m3, Saturation::none), 0x02);  // 1.5 units: to even 2
  EXPECT_EQ(float_to_fp8(-0.0f, Fp8Kind::e4m3, Saturation::none), 0x80);
  EXPECT_EQ(float_to_bf16_bits(1.00390625f), 0x3F80);                        // 1 + 2^-8: tie to even
  EXPECT_EQ(float_to_ue8m0(3.0f, Pow2Rounding::up, Saturation::none), 129);  // 4
  EXPECT_EQ(float_to_ue8m0(3.0f, Pow2Rounding::down, Saturation::none), 128);
  EXPECT_EQ(float_to_ue8m0(4.0f, Pow2Rounding::up, Saturation::none), 129);
}

// The Half16 forms are the bf16/fp16 functions they name, bit for bit.
TEST(NumericsFormats, Half16IsBf16OrFp16) {
  for (uint32_t h = 0; h < 0x10000u; h += 7) {
    const auto b = static_cast<uint16_t>(h);
    EXPECT_EQ(f32_bits(half16_bits_to_float(b, Half16::bf16)), f32_bits(bf16_bits_to_float(b)));
    EXPECT_EQ(f32_bits(half16_bits_to_float(b, Half16::fp16)), f32_bits(fp16_bits_to_float(b)));
    const float x = bits_f32(h * 65521u);
    EXPECT_EQ(float_to_half16_bits(x, Half16::bf16), float_to_bf16_bits(x));
    EXPECT_EQ(float_to_half16_bits(x, Half16::fp16), float_to_fp16_bits(x));
    EXPECT_EQ(f32_bits(round_half16(x, Half16::bf16)), f32_bits(round_bf16(x)));
    EXPECT_EQ(f32_bits(round_half16(x, Half16::fp16)), f32_bits(round_fp16(x)));
  }
}

// The views are Format itself: each enumerator converts to the Format of the same name, and
// round_to rounds as the named cast does (hand-checked values: 1 + 2^-9 is a bf16 tie that rounds
// to even, 1.0; in fp16 it is exact; e4m3 saturates 1000 to 448, e5m2 rounds 1000 to 1024).
TEST(NumericsFormats, ViewsAreTheOneFormatList) {
  EXPECT_EQ(format_of(Half16::bf16), Format::bf16);
  EXPECT_EQ(format_of(Half16::fp16), Format::fp16);
  EXPECT_EQ(format_of(Fp8Kind::e4m3), Format::e4m3);
  EXPECT_EQ(format_of(Fp8Kind::e5m2), Format::e5m2);
  EXPECT_EQ(format_of(OutRound::fp32), Format::fp32);
  EXPECT_EQ(format_of(out_round_of(Half16::fp16)), Format::fp16);
  EXPECT_STREQ(format_name(format_of(Half16::bf16)), "bf16");
  EXPECT_STREQ(format_name(Format::e5m2), "e5m2");
  const float tie = 1.0f + 0x1p-9f;
  EXPECT_EQ(round_to(tie, Format::fp32), tie);
  EXPECT_EQ(round_to(tie, Format::bf16), 1.0f);
  EXPECT_EQ(round_to(tie, Format::fp16), tie);
  EXPECT_EQ(round_to(1000.0f, Format::e4m3), 448.0f);
  EXPECT_EQ(round_to(1000.0f, Format::e5m2), 1024.0f);
  EXPECT_EQ(round_to(1e6f, Format::e5m2), 57344.0f);
}

}  // namespace
}  // namespace rlp::num
