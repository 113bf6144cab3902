// The Hopper FP8 wgmma accumulation model (num::hopper_step / hopper_slice_accumulate,
// `fp8-accum hopper`) against microsoft/MMA-Sim's algorithm, bit for bit:
//   1. a port of MMA-Sim's Python written here from its text (mmasim/simulator/arithmetic.py at
//      commit c785138: extract_significand_exponent, fused_sum, fused_dot_add, nv_fused_dot_add with
//      output_type "f32_e8m13" and 13 fractional bits, as mmasim/simulator/nv_ptx.py's wgmma sets
//      them for FP8), in float64 like the original, fed by fp8 codes decoded here from their bit
//      fields (not through the header's helpers or fp8_to_float), compared bitwise on random steps
//      and 128-slices of e4m3, e5m2 and mixed operands (subnormals, zeros, outliers, both signs,
//      NaN/inf);
//   2. hand-worked cases where MMA-Sim's alignment and the emulator's earlier ones give different bits;
//   3. how often the earlier models disagree with it on random 128-slices (printed; > 0 asserted);
//   4. the block-scaled GEMM (`fp8-accum hopper`) giving each operand's format to the model.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "rlparity/numerics/gemm.hpp"

namespace rlp::num {
namespace {

// ---- fp8 decoding from the bit fields (OCP FP8: e4m3fn and e5m2) --------------------------------
struct Fp8Value {
  bool nan = false, inf = false;
  double v = 0.0;  // exact
};

Fp8Value decode(uint8_t code, Fp8Kind k) {
  const bool e4m3 = k == Fp8Kind::e4m3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emask = e4m3 ? 0xF : 0x1F;
  const int sign = code >> 7, ef = (code >> mbits) & emask, mf = code & ((1 << mbits) - 1);
  Fp8Value r;
  if (e4m3 && ef == 0xF && mf == 7) {
    r.nan = true;
  } else if (!e4m3 && ef == 0x1F) {
    r.nan = mf != 0;
    r.inf = mf == 0;
  }
  if (r.nan) {
    r.v = std::nan("");
    return r;
  }
  if (r.inf) {
    r.v = sign ? -HUGE_VAL : HUGE_VAL;
    return r;
  }
  // normal: (1 + mf / 2^mbits) * 2^(ef - bias); subnormal (ef = 0): mf / 2^mbits * 2^(1 - bias)
  const double mant = ef == 0 ? mf : (1 << mbits) + mf;
  r.v = std::ldexp(mant, (ef == 0 ? 1 : ef) - bias - mbits);
  if (sign) r.v = -r.v;
  return r;
}

int min_exponent(Fp8Kind k) { return k == Fp8Kind::e4m3 ? -6 : -14; }  // dtype_min_exponent

// ---- MMA-Sim, ported --------------------------------------------------------------------------
// Python's math.trunc returns an int: a zero is +0 whatever the sign of its argument.
double py_trunc(double x) { return static_cast<double>(static_cast<int64_t>(std::trunc(x))); }

// extract_significand_exponent(x, dtype): 1 <= |s| < 2, subnormals clamped to the dtype's minimum
// exponent, zero -> exponent -126.
std::pair<double, int> extract_significand_exponent(double x, int min_exp) {
  int e;
  double s = std::frexp(x, &e);
  s *= 2;
  e -= 1;
  if (e < min_exp) {
    s *= std::ldexp(1.0, e - min_exp);
    e = min_exp;
  }
  if (s == 0.0) e = -126;
  return {s, e};
}

// nv_fused_dot_add(a, b, c, n_fractional_bits = 13, output_type = "f32_e8m13"), scales 1.0.
float mmasim_step(const uint8_t* ca, const uint8_t* cb, int n, float c, Fp8Kind ka, Fp8Kind kb) {
  constexpr int kFrac = 13;
  std::vector<double> av, bv;
  double fp64_sum = 0.0;  // products.sum() + c.double(): only its NaN / inf-ness is used
  for (int i = 0; i < n; ++i) {
    av.push_back(decode(ca[i], ka).v);
    bv.push_back(decode(cb[i], kb).v);
    fp64_sum += av.back() * bv.back();
  }
  fp64_sum += static_cast<double>(c);
  if (std::isnan(fp64_sum)) return bits_f32(0x7FFFFFFFu);
  if (std::isinf(fp64_sum)) return static_cast<float>(fp64_sum);
  // fused_dot_add
  std::vector<double> sig;
  std::vector<int> ex;
  const auto [sc, ec] = extract_significand_exponent(static_cast<double>(c), -126);
  sig.push_back(sc);
  ex.push_back(ec);
  for (int i = 0; i < n; ++i) {
    const auto [sa, ea] = extract_significand_exponent(av[static_cast<size_t>(i)], min_exponent(ka));
    const auto [sb, eb] = extract_significand_exponent(bv[static_cast<size_t>(i)], min_exponent(kb));
    sig.push_back(sa * sb);
    ex.push_back(ea + eb);
  }
  // fused_sum
  int max_exponent = ex[0];
  for (int e : ex) max_exponent = std::max(max_exponent, e);
  double s = 0.0;
  for (size_t i = 0; i < sig.size(); ++i)
    s += py_trunc(sig[i] * std::ldexp(1.0, kFrac + ex[i] - max_exponent)) * std::ldexp(1.0, -kFrac);
  // normalize output: f32_e8m13, RZ
  auto [s2, e2] = extract_significand_exponent(s * std::ldexp(1.0, max_exponent), -126);
  s2 = py_trunc(s2 * std::ldexp(1.0, 13)) * std::ldexp(1.0, -13);
  const double r = s2 * std::ldexp(1.0, e2);
  if (std::fabs(r) > static_cast<double>(FLT_MAX)) return r > 0 ? HUGE_VALF : -HUGE_VALF;
  return static_cast<float>(r);  // exact: <= 14 significant bits, in range
}

float mmasim_slice(const uint8_t* ca, const uint8_t* cb, int n, Fp8Kind ka, Fp8Kind kb) {
  float c = 0.0f;
  for (int k0 = 0; k0 < n; k0 += 32) c = mmasim_step(ca + k0, cb + k0, std::min(32, n - k0), c, ka, kb);
  return c;
}

// ---- the emulator's earlier models, for comparison --------------------------------------------
// product: every product aligned on floor(log2|a*b|) (the first reading of MMA-Sim);
// operands: on floor(log2|a|) + floor(log2|b|) of the values, subnormals unclamped (before this
// change). Both: zero terms ignored, all-zero steps return C, non-finite terms summed in fp32.
enum class OldAlign { product, operands };

float old_step(const float* a, const float* b, int n, float c, OldAlign rule) {
  auto flog2 = [](double v) {
    int e;
    std::frexp(v, &e);
    return e - 1;
  };
  std::vector<double> t;
  bool special = !std::isfinite(c);
  for (int i = 0; i < n; ++i) {
    t.push_back(static_cast<double>(a[i]) * static_cast<double>(b[i]));
    special = special || !std::isfinite(t.back());
  }
  if (special) {
    float s = c;
    for (int i = 0; i < n; ++i) s = s + a[i] * b[i];
    return s;
  }
  int emax = INT32_MIN;
  for (int i = 0; i < n; ++i)
    if (t[static_cast<size_t>(i)] != 0.0)
      emax = std::max(
          emax, rule == OldAlign::product ? flog2(t[static_cast<size_t>(i)]) : flog2(a[i]) + flog2(b[i]));
  if (c != 0.0f) emax = std::max(emax, flog2(c));
  if (emax == INT32_MIN) return c;
  t.push_back(c);
  const double unit = std::ldexp(1.0, emax - 13);
  double sum = 0.0;
  for (double v : t) sum += std::trunc(v / unit);
  if (sum == 0.0) return 0.0f;
  int e2;
  std::frexp(sum, &e2);
  if (e2 > 14) sum = std::trunc(std::ldexp(sum, 14 - e2)) * std::ldexp(1.0, e2 - 14);
  return static_cast<float>(sum * unit);
}

float old_slice(const float* a, const float* b, int n, OldAlign rule) {
  float c = 0.0f;
  for (int k0 = 0; k0 < n; k0 += 32) c = old_step(a + k0, b + k0, std::min(32, n - k0), c, rule);
  return c;
}

// ---- random operands --------------------------------------------------------------------------
uint32_t u32(std::mt19937& rng) { return static_cast<uint32_t>(rng()); }

enum class Spread { wide, close, outliers, tiny };

bool is_nan_or_inf(uint8_t code, Fp8Kind k) {
  const Fp8Value v = decode(code, k);
  return v.nan || v.inf;
}

// wide: any finite code (every exponent, subnormals and zeros included); close: exponents within
// [-1, 1]; outliers: mostly exponents within [-3, 0], 1 in 16 a subnormal or zero, 1 in 32 near the
// format's maximum; tiny: the format's lowest binades (half subnormals or zeros, the rest its two
// smallest normal exponents), 1 in 128 near its maximum (an activation block whose scale an
// outlier set). specials: 1 in 64 codes NaN or inf.
uint8_t random_code(std::mt19937& rng, Fp8Kind k, Spread s, bool specials) {
  const bool e4m3 = k == Fp8Kind::e4m3;
  const int mbits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, emax_field = e4m3 ? 15 : 30;
  const uint32_t sign = (u32(rng) & 1u) << 7, mant = u32(rng) & ((1u << mbits) - 1u);
  if (specials && u32(rng) % 64 == 0)
    return static_cast<uint8_t>(sign | (e4m3 ? 0x7Fu : (u32(rng) % 2 ? 0x7Cu : 0x7Eu)));
  uint32_t ef = 0;
  switch (s) {
    case Spread::wide:
      for (;;) {
        const auto code = static_cast<uint8_t>(u32(rng) & 0xFFu);
        if (!is_nan_or_inf(code, k)) return code;
      }
    case Spread::close: ef = static_cast<uint32_t>(bias - 1) + u32(rng) % 3; break;
    case Spread::outliers: {
      const uint32_t r = u32(rng) % 32;
      ef = r < 2 ? 0u
                 : (r == 2 ? static_cast<uint32_t>(emax_field) - u32(rng) % 2
                           : static_cast<uint32_t>(bias - 3) + u32(rng) % 4);
      break;
    }
    case Spread::tiny: {
      const uint32_t r = u32(rng) % 512;
      ef = r < 4 ? static_cast<uint32_t>(emax_field) - u32(rng) % 2 : (r < 384 ? 0u : 1u);
      break;
    }
  }
  const uint32_t m = e4m3 && ef == 15 && mant == 7 ? 6u : mant;  // S.1111.111 is e4m3's NaN
  return static_cast<uint8_t>(sign | (ef << mbits) | m);
}

float random_c(std::mt19937& rng) {
  const uint32_t sign = (u32(rng) & 1u) << 31, mant = u32(rng) & 0x7FFFFFu;
  switch (u32(rng) % 8) {
    case 0: return 0.0f;
    case 1: return bits_f32(sign);                                          // +-0
    case 2: return bits_f32(sign | mant);                                   // fp32 subnormal
    case 3: return bits_f32(sign | ((1u + u32(rng) % 254u) << 23) | mant);  // any normal exponent
    default: return bits_f32(sign | ((112u + u32(rng) % 30u) << 23) | (mant & ~0x3FFu));  // 2^-15 .. 2^14
  }
}

struct Operands {
  std::vector<uint8_t> ca, cb;
  std::vector<float> a, b;
};

// a drawn with spread sa, b with sb.
Operands random_operands(std::mt19937& rng, int n, Fp8Kind ka, Fp8Kind kb, Spread sa, Spread sb,
                         bool specials) {
  Operands o;
  for (int i = 0; i < n; ++i) {
    o.ca.push_back(random_code(rng, ka, sa, specials));
    o.cb.push_back(random_code(rng, kb, sb, specials));
    o.a.push_back(fp8_to_float(o.ca.back(), ka));
    o.b.push_back(fp8_to_float(o.cb.back(), kb));
  }
  return o;
}

const std::pair<Fp8Kind, Fp8Kind> kKindPairs[] = {{Fp8Kind::e4m3, Fp8Kind::e4m3},
                                                  {Fp8Kind::e5m2, Fp8Kind::e5m2},
                                                  {Fp8Kind::e4m3, Fp8Kind::e5m2},
                                                  {Fp8Kind::e5m2, Fp8Kind::e4m3}};

const std::pair<Spread, Spread> kSpreadPairs[] = {{Spread::wide, Spread::wide},
                                                  {Spread::close, Spread::close},
                                                  {Spread::outliers, Spread::outliers},
                                                  {Spread::tiny, Spread::wide}};

const char* kind_name(Fp8Kind k) { return k == Fp8Kind::e4m3 ? "e4m3" : "e5m2"; }

TEST(HopperAccum, DecoderAgreesWithFp8ToFloat) {
  for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2})
    for (int c = 0; c < 256; ++c) {
      const Fp8Value v = decode(static_cast<uint8_t>(c), k);
      const float f = fp8_to_float(static_cast<uint8_t>(c), k);
      if (v.nan) {
        EXPECT_TRUE(std::isnan(f)) << c;
      } else {
        EXPECT_EQ(f32_bits(f), f32_bits(static_cast<float>(v.v))) << kind_name(k) << " code " << c;
      }
    }
}

TEST(HopperAccum, StepMatchesMmaSimPort) {
  std::mt19937 rng(20260129u);
  for (const auto& [ka, kb] : kKindPairs)
    for (const auto& [sa, sb] : kSpreadPairs)
      for (int trial = 0; trial < 5000; ++trial) {
        const int n = trial % 4 == 0 ? 32 : 1 + static_cast<int>(u32(rng) % 32);
        const bool specials = trial % 5 == 0;
        const Operands o = random_operands(rng, n, ka, kb, sa, sb, specials);
        const float c = random_c(rng);
        const float h = hopper_step(o.a.data(), o.b.data(), n, c, ka, kb);
        const float r = mmasim_step(o.ca.data(), o.cb.data(), n, c, ka, kb);
        ASSERT_EQ(f32_bits(h), f32_bits(r))
            << kind_name(ka) << " x " << kind_name(kb) << " spreads " << static_cast<int>(sa)
            << static_cast<int>(sb) << " trial " << trial << " n " << n << " c " << c;
      }
}

TEST(HopperAccum, SliceMatchesMmaSimPort) {
  std::mt19937 rng(90u);
  for (const auto& [ka, kb] : kKindPairs)
    for (const auto& [sa, sb] : kSpreadPairs)
      for (int trial = 0; trial < 500; ++trial) {
        const int n = trial % 3 == 0 ? 128 : 1 + static_cast<int>(u32(rng) % 128);
        const Operands o = random_operands(rng, n, ka, kb, sa, sb, trial % 7 == 0);
        const float h = hopper_slice_accumulate(o.a.data(), o.b.data(), n, 0.0f, ka, kb);
        const float r = mmasim_slice(o.ca.data(), o.cb.data(), n, ka, kb);
        ASSERT_EQ(f32_bits(h), f32_bits(r)) << kind_name(ka) << " x " << kind_name(kb) << " trial " << trial;
      }
}

// The block-scaled GEMM hands each operand's own format to the model: X e4m3 (any finite code),
// W e5m2 (mostly subnormals and the smallest normals, which read as e4m3 would get exponent -6), against the
// port slice by slice with the deepgemm promotion y = fma(fl(sa*sb), p, y).
TEST(HopperAccum, GemmPassesEachOperandsFormat) {
  std::mt19937 rng(5u);
  constexpr int M = 3, N = 5, K = 256;
  Fp8Tensor X, W;
  X.rows = M, X.cols = K, X.block_rows = 1, X.block_cols = 128, X.kind = Fp8Kind::e4m3;
  W.rows = N, W.cols = K, W.block_rows = 128, W.block_cols = 128, W.kind = Fp8Kind::e5m2;
  for (int i = 0; i < M * K; ++i) X.codes.push_back(random_code(rng, X.kind, Spread::wide, false));
  for (int i = 0; i < N * K; ++i) W.codes.push_back(random_code(rng, W.kind, Spread::tiny, false));
  X.scale_inv = {0.5f, 2.0f, 1.0f, 0.25f, 4.0f, 1.0f};
  W.scale_inv = {2.0f, 0.125f};
  GemmConfig cfg;
  cfg.slice_accum = SliceAccum::hopper;
  cfg.promotion = Promotion::deepgemm;
  cfg.out = OutRound::fp32;
  std::vector<float> Y(static_cast<size_t>(M * N));
  gemm_fp8_blockscaled(X, W, Y.data(), cfg);
  int format_matters = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float y = 0.0f, y_wrong = 0.0f;
      for (int k0 = 0; k0 < K; k0 += 128) {
        const uint8_t* xa = X.codes.data() + m * K + k0;
        const uint8_t* wb = W.codes.data() + n * K + k0;
        const float s = X.block_scale_inv(m, k0) * W.block_scale_inv(n, k0);
        y = std::fma(s, mmasim_slice(xa, wb, 128, X.kind, W.kind), y);
        std::vector<float> a, b;
        for (int i = 0; i < 128; ++i) {
          a.push_back(fp8_to_float(xa[i], X.kind));
          b.push_back(fp8_to_float(wb[i], W.kind));
        }
        y_wrong =
            std::fma(s, hopper_slice_accumulate(a.data(), b.data(), 128, 0.0f, X.kind, X.kind), y_wrong);
      }
      EXPECT_EQ(f32_bits(Y[static_cast<size_t>(m * N + n)]), f32_bits(y)) << m << " " << n;
      format_matters += f32_bits(y_wrong) != f32_bits(y);
    }
  EXPECT_GT(format_matters, 0);  // the data tells e5m2 from e4m3 operands
}

// Hand-worked cases (C = 0 unless stated; "units" are 2^(emax - 13)).
TEST(HopperAccum, HandWorkedAlignmentCases) {
  const Fp8Kind E4 = Fp8Kind::e4m3, E5 = Fp8Kind::e5m2;
  {
    // e4m3: a = {2^-9 (subnormal, code 0x01), 2^-6}, b = {256, 1.125 * 2^-3}; products 0.5 and
    // 2^-9 + 2^-12. MMA-Sim: exponents -6 + 8 = 2 (the subnormal counts as 2^-6 * 0.125) and
    // -6 - 3 = -9: emax 2, unit 2^-11; 0.5 = 1024 units, 2^-9 + 2^-12 = 4.5 -> 4; 1028 * 2^-11.
    // Unclamped (-9 + 8 = -1) or the product's own exponent (-1): unit 2^-14, 8192 + 36 = 8228
    // (14 bits, kept) -> 8228 * 2^-14 = 0.5 + 2^-9 + 2^-12.
    const float a[2] = {0x1p-9f, 0x1p-6f}, b[2] = {256.0f, 0.140625f};
    EXPECT_EQ(hopper_step(a, b, 2, 0.0f, E4, E4), 1028.0f * 0x1p-11f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::operands), 8228.0f * 0x1p-14f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::product), 8228.0f * 0x1p-14f);
    const uint8_t ca[2] = {0x01, 0x08}, cb[2] = {0x78, 0x21};
    EXPECT_EQ(mmasim_step(ca, cb, 2, 0.0f, E4, E4), 1028.0f * 0x1p-11f);
  }
  {
    // e5m2: a = {2^-16 (subnormal, 0x01), 2^-14 (0x04)}, b = {2^15 (0x78), 10 = 1.25 * 2^3 (0x49)};
    // products 0.5 and 2^-11 + 2^-13. MMA-Sim: exponents -14 + 15 = 1 and -14 + 3 = -11: unit
    // 2^-12; 2048 + 2.5 -> 2050 -> 0.5 + 2^-11. Unclamped / own exponent: -1, unit 2^-14,
    // 8192 + 10 = 8202 -> 0.5 + 2^-11 + 2^-13.
    const float a[2] = {0x1p-16f, 0x1p-14f}, b[2] = {32768.0f, 10.0f};
    EXPECT_EQ(hopper_step(a, b, 2, 0.0f, E5, E5), 0.5f + 0x1p-11f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::operands), 0.5f + 0x1p-11f + 0x1p-13f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::product), 0.5f + 0x1p-11f + 0x1p-13f);
    const uint8_t ca[2] = {0x01, 0x04}, cb[2] = {0x78, 0x49};
    EXPECT_EQ(mmasim_step(ca, cb, 2, 0.0f, E5, E5), 0.5f + 0x1p-11f);
  }
  {
    // The operand's format matters, not only its value: 2^-9 is an e4m3 subnormal (exponent -6)
    // but a normal e5m2 value (exponent -9). a = {2^-9, 2^-6}, b = {256, 1.25 * 2^-5} (e4m3);
    // products 0.5 and 2^-11 + 2^-13. a as e4m3: emax -6 + 8 = 2, unit 2^-11: 1024 + 1.25 -> 1025
    // -> 0.5 + 2^-11. a as e5m2: emax -1, unit 2^-14: 8192 + 10 = 8202 -> 0.5 + 2^-11 + 2^-13.
    const float a[2] = {0x1p-9f, 0x1p-6f}, b[2] = {256.0f, 0.0390625f};
    EXPECT_EQ(hopper_step(a, b, 2, 0.0f, E4, E4), 0.5f + 0x1p-11f);
    EXPECT_EQ(hopper_step(a, b, 2, 0.0f, E5, E4), 0.5f + 0x1p-11f + 0x1p-13f);
  }
  {
    // Own exponent vs operands' exponents, all normal: 1.875 * 1.875 = 3.515625 (own exponent 1,
    // operands' 0 + 0) sets the unit to 2^-13, so 2^-6 * -2^-7 = -2^-13 counts one unit:
    // 3.515625 * 2^13 = 28800, minus 1 = 28799 (15 bits) -> truncated to 14: 28798 * 2^-13.
    // Aligned on the product's own exponent the unit is 2^-12 and -2^-13 vanishes: 28800 * 2^-13.
    const float a[2] = {1.875f, 0x1p-6f}, b[2] = {1.875f, -0x1p-7f};
    EXPECT_EQ(hopper_step(a, b, 2, 0.0f, E4, E4), 28798.0f * 0x1p-13f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::operands), 28798.0f * 0x1p-13f);
    EXPECT_EQ(old_step(a, b, 2, 0.0f, OldAlign::product), 28800.0f * 0x1p-13f);
  }
}

TEST(HopperAccum, HandWorkedZerosCAndSpecials) {
  const Fp8Kind E4 = Fp8Kind::e4m3, E5 = Fp8Kind::e5m2;
  const float zero[2] = {0.0f, 0.0f}, one[2] = {1.0f, 1.0f};
  {
    // Every product zero: C still goes through the alignment and the 14-bit output. C = 1 + 2^-20
    // (exponent 0; the zero products' exponents are -126 + 0): unit 2^-13, C = 8192 + 2^-7 -> 8192
    // -> 1.0 (the earlier model too).
    EXPECT_EQ(hopper_step(zero, one, 2, 1.0f + 0x1p-20f, E4, E4), 1.0f);
  }
  {
    // A zero operand has exponent -126 (arithmetic.py l. 93-94), so 0 * 448 has exponent
    // -126 + 8 = -118 and outranks C = 2^-120 (1 + 2^-12): unit 2^-131, C = 2^11 + 2^-1 -> 2^11 ->
    // 2^-120. (functions.py gave zero the exponent -999 until 2026-01-22: C alone, unit 2^-133,
    // 2^13 + 2 kept -> C unchanged, as the earlier model.)
    const float a[1] = {0.0f}, b[1] = {448.0f};
    const float c = 0x1p-120f * (1.0f + 0x1p-12f);
    EXPECT_EQ(hopper_step(a, b, 1, c, E4, E4), 0x1p-120f);
    EXPECT_EQ(old_step(a, b, 1, c, OldAlign::operands), c);
  }
  {
    // A subnormal fp32 C counts as exponent -126: C = 2^-130 + 2^-140, products 0 * 0 (exponent
    // -252): unit 2^-139, C = 2^9 + 2^-1 -> 2^9 -> 2^-130.
    EXPECT_EQ(hopper_step(zero, zero, 2, 0x1p-130f + 0x1p-140f, E5, E5), 0x1p-130f);
  }
  {
    // C = FLT_MAX = (2 - 2^-23) 2^127 truncated to 14 bits: (2 - 2^-13) 2^127.
    const float big[1] = {448.0f};
    EXPECT_EQ(f32_bits(hopper_step(big, big, 1, FLT_MAX, E4, E4)), 0x7F7FFC00u);
  }
  {
    // A zero result is +0 (Python's int 0 from math.trunc), also from C = -0.
    EXPECT_EQ(f32_bits(hopper_step(zero, one, 2, -0.0f, E4, E4)), 0u);
    EXPECT_EQ(f32_bits(old_step(zero, one, 2, -0.0f, OldAlign::operands)), 0x80000000u);
    const float a[2] = {-1.0f, 1.0f};
    EXPECT_EQ(f32_bits(hopper_step(a, one, 2, 0.0f, E4, E4)), 0u);
  }
  {
    // NaN anywhere (a NaN operand, inf * 0, inf - inf, a NaN C) gives 0x7FFFFFFF; inf gives inf.
    const float nan_a[2] = {fp8_to_float(0x7F, E4), 1.0f};
    EXPECT_EQ(f32_bits(hopper_step(nan_a, one, 2, 0.0f, E4, E4)), 0x7FFFFFFFu);
    const float inf = fp8_to_float(0x7C, E5), ninf = fp8_to_float(0xFC, E5);
    const float pm[2] = {inf, ninf}, p0[2] = {inf, 1.0f};
    EXPECT_EQ(f32_bits(hopper_step(pm, one, 2, 0.0f, E5, E5)), 0x7FFFFFFFu);
    EXPECT_EQ(f32_bits(hopper_step(p0, zero, 2, 0.0f, E5, E5)), 0x7FFFFFFFu);
    EXPECT_EQ(f32_bits(hopper_step(one, one, 2, std::nanf(""), E5, E5)), 0x7FFFFFFFu);
    EXPECT_EQ(hopper_step(p0, one, 2, -5.0f, E5, E5), HUGE_VALF);
    EXPECT_EQ(hopper_step(one, one, 2, -HUGE_VALF, E5, E5), -HUGE_VALF);
    EXPECT_EQ(f32_bits(hopper_step(p0, one, 2, -HUGE_VALF, E5, E5)), 0x7FFFFFFFu);
  }
}

// How often the earlier models give other bits than MMA-Sim's on random 128-slices (C = 0).
// Measured (seed 7, 4000 slices each; the test prints it), own-exponent / unclamped-subnormal:
//   e4m3: wide x wide 1738 (43%) / 0, close x close 0 / 0, outliers x outliers 1979 / 0,
//         tiny x wide 1524 / 639 (16%);
//   e5m2: wide x wide 879 (22%) / 0, close 0 / 0, outliers 675 / 0, tiny x wide 792 / 523 (13%).
// The own-exponent alignment (the first reading of MMA-Sim) differs wherever exponents spread;
// the unclamped model only where fp8 subnormals set a step's alignment.
TEST(HopperAccum, EarlierModelsDisagreeOnWideSlices) {
  std::mt19937 rng(7u);
  constexpr int kSlices = 4000;
  const char* names[] = {"wide x wide", "close x close", "outliers x outliers", "tiny x wide"};
  for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2})
    for (int p = 0; p < 4; ++p) {
      const auto [sa, sb] = kSpreadPairs[p];
      int own = 0, unclamped = 0;
      for (int trial = 0; trial < kSlices; ++trial) {
        const Operands o = random_operands(rng, 128, k, k, sa, sb, false);
        const uint32_t h = f32_bits(hopper_slice_accumulate(o.a.data(), o.b.data(), 128, 0.0f, k, k));
        own += h != f32_bits(old_slice(o.a.data(), o.b.data(), 128, OldAlign::product));
        unclamped += h != f32_bits(old_slice(o.a.data(), o.b.data(), 128, OldAlign::operands));
      }
      std::printf(
          "%s %s: own-exponent alignment differs on %d of %d slices, unclamped operand exponents on %d\n",
          kind_name(k), names[p], own, kSlices, unclamped);
      // Widely spread exponents: the own-exponent alignment loses or keeps other bits.
      if (sa == Spread::wide) {
        EXPECT_GT(own, 0);
      }
      // Subnormals that set the alignment: the clamped exponent truncates other bits.
      if (sa == Spread::tiny) {
        EXPECT_GT(unclamped, 0);
      }
      // Without subnormal or zero operands the unclamped exponents are the clamped ones, and with
      // C = 0 at the slice start and normal products no step is all-zero: the bits must agree.
      if (sa == Spread::close) {
        EXPECT_EQ(unclamped, 0);
      }
    }
}

}  // namespace
}  // namespace rlp::num
