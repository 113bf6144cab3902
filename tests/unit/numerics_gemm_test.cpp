// GEMM emulation: the fast kernels against naive loops written straight from gemm.hpp's stated
// order (bitwise), against a float64 oracle with a bound derived from the accumulation model,
// hand-worked cases of the Hopper wgmma model (numerics_hopper_accum_test.cpp tests it against
// MMA-Sim), and reproducibility across configurations and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::num {
namespace {

std::vector<float> random_bf16(int n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = round_bf16(d(rng));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int split_begin(int n, int parts, int r) { return r * (n / parts) + std::min(r, n % parts); }

// ---- naive references of the documented order ------------------------------------------------
float ref_f32acc(const float* x, const float* w, int K, const GemmConfig& cfg) {
  if (K == 0) return round_out(0.0f, cfg.out);
  const int S = std::min(cfg.split_k, K);
  float total = 0.0f;
  for (int r = 0; r < S; ++r) {
    const int rb = split_begin(K, S, r), re = split_begin(K, S, r + 1);
    const int chunk = cfg.k_chunk > 0 ? cfg.k_chunk : re - rb;
    float part = 0.0f;
    for (int c0 = rb; c0 < re; c0 += chunk) {
      float c = 0.0f;
      for (int k = c0; k < std::min(re, c0 + chunk); ++k) c = std::fma(x[k], w[k], c);
      part = c0 == rb ? c : part + c;
    }
    total = r == 0 ? part : total + part;
  }
  return round_out(total, cfg.out);
}

float ref_fp8(const Fp8Tensor& X, const Fp8Tensor& W, int m, int n, const GemmConfig& cfg) {
  const int K = X.cols, B = X.block_cols, slices = (K + B - 1) / B;
  const int S = std::max(1, std::min(cfg.split_k, std::max(slices, 1)));
  float total = 0.0f;
  for (int r = 0; r < S; ++r) {
    float y = 0.0f;
    for (int s = split_begin(slices, S, r); s < split_begin(slices, S, r + 1); ++s) {
      const int k0 = s * B, len = std::min(B, K - k0);
      std::vector<float> a(static_cast<size_t>(len)), b(static_cast<size_t>(len));
      for (int k = 0; k < len; ++k) {
        a[static_cast<size_t>(k)] = fp8_to_float(X.codes[static_cast<size_t>(m * K + k0 + k)], X.kind);
        b[static_cast<size_t>(k)] = fp8_to_float(W.codes[static_cast<size_t>(n * K + k0 + k)], W.kind);
      }
      float p = 0.0f;
      if (cfg.slice_accum == SliceAccum::hopper)
        p = hopper_slice_accumulate(a.data(), b.data(), len, 0.0f, X.kind, W.kind);
      else
        for (int k = 0; k < len; ++k) p = std::fma(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)], p);
      const float sa = X.block_scale_inv(m, k0), sb = W.block_scale_inv(n, k0);
      y = cfg.promotion == Promotion::cublaslt ? std::fma(p * sa, sb, y) : std::fma(sa * sb, p, y);
    }
    total = r == 0 ? y : total + y;
  }
  return round_out(total, cfg.out);
}

Fp8Tensor random_fp8(int rows, int cols, int br, int bc, unsigned seed,
                     ScaleConvention conv = ScaleConvention::te) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (float& v : x) v = d(rng) * (rng() % 11 == 0 ? 20.0f : 1.0f);
  ScaleOptions o;
  o.convention = conv;
  return quantize_blocks(x.data(), rows, cols, br, bc, o);
}

double gamma(int n) {
  const double u = 0x1p-24;
  return n * u / (1.0 - n * u);
}

// ---- tests ------------------------------------------------------------------------------------
TEST(NumericsGemm, F32AccMatchesStatedOrderBitwise) {
  // M = 19 runs the packed kernel; M <= 16 (decode steps) the unpacked small-M kernels (8 lanes
  // up to M = 8, 16 lanes above with AVX-512).
  for (const int M : {19, 16, 12, 9, 8, 5, 1}) {
    SCOPED_TRACE("M=" + std::to_string(M));
    const int N = 53, K = 700;
    const auto X = random_bf16(M * K, 1), W = random_bf16(N * K, 2);
    std::vector<uint16_t> W16(W.size());  // the same weights as bf16 bit patterns
    for (size_t i = 0; i < W.size(); ++i) W16[i] = float_to_bf16_bits(W[i]);
    for (int split : {1, 3})
      for (int chunk : {0, 64, 100, 1000})
        for (OutRound out : {OutRound::fp32, OutRound::bf16, OutRound::fp16}) {
          GemmConfig cfg;
          cfg.split_k = split;
          cfg.k_chunk = chunk;
          cfg.out = out;
          std::vector<float> Y(static_cast<size_t>(M * N)), Y16(Y.size());
          gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
          gemm_f32acc(X.data(), W16.data(), Half16::bf16, Y16.data(), M, N, K, cfg);
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
              const float r = ref_f32acc(X.data() + m * K, W.data() + n * K, K, cfg);
              ASSERT_EQ(f32_bits(Y[static_cast<size_t>(m * N + n)]), f32_bits(r))
                  << "m=" << m << " n=" << n << " split=" << split << " chunk=" << chunk;
              ASSERT_EQ(f32_bits(Y16[static_cast<size_t>(m * N + n)]), f32_bits(r))
                  << "16-bit W: m=" << m << " n=" << n << " split=" << split << " chunk=" << chunk;
            }
        }
  }
}

// Several row and column tiles, split over 1, 2 and 3 threads so that a task's range starts inside
// a row tile: the row tile's packed X panels are reused across its column tiles within a task.
TEST(NumericsGemm, ManyTilesAnyThreadCountMatchStatedOrder) {
  const int M = 400, N = 500, K = 300;
  const auto X = random_bf16(M * K, 21), W = random_bf16(N * K, 22);
  std::vector<uint16_t> W16(W.size());
  for (size_t i = 0; i < W.size(); ++i) W16[i] = float_to_bf16_bits(W[i]);
  const Fp8Tensor Xq = random_fp8(M, K, 1, 128, 23), Wq = random_fp8(N, K, 128, 128, 24);
  GemmConfig cfg;
  cfg.out = OutRound::fp32;
  cfg.k_chunk = 100;
  for (const int threads : {1, 2, 3}) {
    rlp::set_thread_count(threads);
    std::vector<float> Y(static_cast<size_t>(M) * N), Y16(Y.size()), Y8(Y.size());
    gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
    gemm_f32acc(X.data(), W16.data(), Half16::bf16, Y16.data(), M, N, K, cfg);
    gemm_fp8_blockscaled(Xq, Wq, Y8.data(), cfg);
    for (int m = 0; m < M; m += 3)
      for (int n = 0; n < N; n += 7) {
        const size_t i = static_cast<size_t>(m) * N + static_cast<size_t>(n);
        const float r = ref_f32acc(X.data() + m * K, W.data() + n * K, K, cfg);
        ASSERT_EQ(f32_bits(Y[i]), f32_bits(r)) << m << "," << n << " threads=" << threads;
        ASSERT_EQ(f32_bits(Y16[i]), f32_bits(r)) << m << "," << n << " threads=" << threads;
        ASSERT_EQ(f32_bits(Y8[i]), f32_bits(ref_fp8(Xq, Wq, m, n, cfg)))
            << m << "," << n << " threads=" << threads;
      }
  }
  rlp::set_thread_count(0);
}

// Widening 16-bit weights: every bit pattern, against the scalar decoders of formats.hpp.
TEST(NumericsGemm, WidenHalf16EveryPattern) {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  for (const Half16 fmt : {Half16::bf16, Half16::fp16}) {
    widen_half16(all.data(), static_cast<int>(all.size()), fmt, out.data());
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = fmt == Half16::bf16 ? bf16_bits_to_float(all[i]) : fp16_bits_to_float(all[i]);
      ASSERT_EQ(f32_bits(out[i]), f32_bits(want)) << "pattern " << i << " fmt " << static_cast<int>(fmt);
    }
  }
}

// fp16 weights held as bits give the same GEMM bits as the same values held as floats.
TEST(NumericsGemm, F32AccFp16BitsEqualFloatWeights) {
  for (const int M : {40, 13, 4}) {  // packed kernel, 16 lanes, 8 lanes
    const int N = 29, K = 333;
    std::vector<float> X = random_bf16(M * K, 5), W = random_bf16(N * K, 6);
    std::vector<uint16_t> W16(W.size());
    for (size_t i = 0; i < W.size(); ++i) {
      W16[i] = float_to_fp16_bits(W[i]);
      W[i] = fp16_bits_to_float(W16[i]);
    }
    GemmConfig cfg;
    cfg.k_chunk = 128;
    cfg.out = OutRound::fp16;
    std::vector<float> Y(static_cast<size_t>(M * N)), Y16(Y.size());
    gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
    gemm_f32acc(X.data(), W16.data(), Half16::fp16, Y16.data(), M, N, K, cfg);
    EXPECT_TRUE(same_bits(Y, Y16)) << "M=" << M;
  }
}

// The oracle GEMM against its stated order, written out naively: s = s + x*w per k from +0.
TEST(NumericsGemm, F64MatchesStatedOrderBitwise) {
  for (const int M : {1, 6, 37}) {
    const int N = 45, K = 301;  // neither a multiple of any panel width
    std::mt19937 rng(static_cast<unsigned>(M));
    std::normal_distribution<double> d(0.0, 1.0);
    std::vector<double> X(static_cast<size_t>(M * K)), W(static_cast<size_t>(N * K)),
        Y(static_cast<size_t>(M * N));
    for (double& v : X) v = d(rng) * (rng() % 7 == 0 ? 1e6 : 1.0);  // wide range: order matters
    for (double& v : W) v = d(rng);
    gemm_f64(X.data(), W.data(), Y.data(), M, N, K);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        volatile double s = 0.0;  // volatile: one rounding per product and per sum, as stated
        for (int k = 0; k < K; ++k) {
          volatile double prod = X[static_cast<size_t>(m * K + k)] * W[static_cast<size_t>(n * K + k)];
          s = s + prod;
        }
        const double ref = s;
        ASSERT_EQ(std::memcmp(&Y[static_cast<size_t>(m * N + n)], &ref, sizeof(double)), 0)
            << "M=" << M << " m=" << m << " n=" << n << ": " << Y[static_cast<size_t>(m * N + n)] << " vs "
            << ref;
      }
  }
}

TEST(NumericsGemm, F32AccWithinDerivedBoundOfFloat64) {
  const int M = 24, N = 40, K = 1500;
  const auto X = random_bf16(M * K, 3), W = random_bf16(N * K, 4);
  std::vector<double> Xd(X.begin(), X.end()), Wd(W.begin(), W.end()), Y64(static_cast<size_t>(M * N));
  gemm_f64(Xd.data(), Wd.data(), Y64.data(), M, N, K);
  for (int split : {1, 4})
    for (OutRound out : {OutRound::fp32, OutRound::bf16}) {
      GemmConfig cfg;
      cfg.split_k = split;
      cfg.k_chunk = 128;
      cfg.out = out;
      std::vector<float> Y(static_cast<size_t>(M * N));
      gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          double absdot = 0.0;
          for (int k = 0; k < K; ++k)
            absdot += std::fabs(Xd[static_cast<size_t>(m * K + k)] * Wd[static_cast<size_t>(n * K + k)]);
          // Each product passes through at most K + split_k fp32 roundings (chain, chunk adds,
          // split adds): |y - exact| <= gamma_{K+S} * sum|x||w|; the f64 oracle adds
          // K * 2^-53 * sum|x||w|; bf16 output adds at most 2^-8 |y|.
          const double acc_err = gamma(K + split) * absdot + K * 0x1p-53 * absdot;
          const double y = Y[static_cast<size_t>(m * N + n)], y64 = Y64[static_cast<size_t>(m * N + n)];
          const double bound = acc_err + (out == OutRound::bf16 ? 0x1p-8 * (std::fabs(y64) + acc_err) : 0.0);
          ASSERT_LE(std::fabs(y - y64), bound) << m << "," << n;
        }
    }
}

TEST(NumericsGemm, SplitAndChunkChangeLastBitsFixedConfigReproducible) {
  const int M = 200, N = 400, K = 2048;  // several task tiles in both directions
  const auto X = random_bf16(M * K, 5), W = random_bf16(N * K, 6);
  auto run = [&](int split, int chunk, int threads) {
    rlp::set_thread_count(threads);
    GemmConfig cfg;
    cfg.split_k = split;
    cfg.k_chunk = chunk;
    cfg.out = OutRound::fp32;
    std::vector<float> Y(static_cast<size_t>(M * N));
    gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
    rlp::set_thread_count(0);
    return Y;
  };
  const auto base1 = run(1, 0, 1), base2 = run(1, 0, 2), again = run(1, 0, 2);
  EXPECT_TRUE(same_bits(base1, base2)) << "1 vs 2 threads";
  EXPECT_TRUE(same_bits(base2, again)) << "repeat";
  EXPECT_TRUE(same_bits(run(4, 256, 1), run(4, 256, 2)));
  std::vector<double> absdot(base1.size(), 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        absdot[static_cast<size_t>(m * N + n)] += std::fabs(
            static_cast<double>(X[static_cast<size_t>(m * K + k)]) * W[static_cast<size_t>(n * K + k)]);
  auto count_diff = [&](const std::vector<float>& o) {
    size_t d = 0;
    for (size_t i = 0; i < o.size(); ++i)
      if (f32_bits(o[i]) != f32_bits(base1[i])) {
        ++d;
        // "last bits": both orders are within gamma_{K+4} * sum|x||w| of the exact value
        EXPECT_LE(std::fabs(static_cast<double>(o[i]) - base1[i]), 2 * gamma(K + 4) * absdot[i]) << i;
      }
    return d;
  };
  EXPECT_GT(count_diff(run(4, 0, 2)), base1.size() / 10) << "split_k=4";
  EXPECT_GT(count_diff(run(1, 256, 2)), base1.size() / 10) << "k_chunk=256";
}

TEST(NumericsGemm, Fp8MatchesStatedOrderBitwise) {
  // M = 21 runs the packed kernel (its slice chains as bf16 dot-product steps where the CPU has
  // them: K = 301's last slice has an odd length); M <= 16 (decode steps) the small-M kernels.
  for (const auto& [M, K] : {std::pair{21, 300}, std::pair{21, 301}, std::pair{16, 300}, std::pair{11, 300},
                             std::pair{8, 300}, std::pair{3, 300}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K));
    const int N = 150;  // partial last slice (300 = 2*128 + 44), partial W blocks
    const Fp8Tensor X = random_fp8(M, K, 1, 128, 7), W = random_fp8(N, K, 128, 128, 8);
    for (Promotion p : {Promotion::cublaslt, Promotion::deepgemm})
      for (SliceAccum acc : {SliceAccum::fp32, SliceAccum::hopper})
        for (int split : {1, 2}) {
          GemmConfig cfg;
          cfg.promotion = p;
          cfg.slice_accum = acc;
          cfg.split_k = split;
          cfg.out = OutRound::fp32;
          std::vector<float> Y(static_cast<size_t>(M * N));
          gemm_fp8_blockscaled(X, W, Y.data(), cfg);
          for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n)
              ASSERT_EQ(f32_bits(Y[static_cast<size_t>(m * N + n)]), f32_bits(ref_fp8(X, W, m, n, cfg)))
                  << m << "," << n << " promo=" << static_cast<int>(p) << " acc=" << static_cast<int>(acc);
        }
  }
}

// Every fp8 code of the weight operand, NaN and inf codes included, through both kernels: the
// decode of W (vector arithmetic for e4m3, a table otherwise) must give fp8_to_float's values,
// so every output matches the naive order bitwise (NaN outputs: NaN on both sides).
TEST(NumericsGemm, Fp8EveryWeightCodeDecodesExactly) {
  for (const Fp8Kind kind : {Fp8Kind::e4m3, Fp8Kind::e5m2}) {
    const auto special = [kind](int c) {
      const int mag = c & 0x7f;
      return kind == Fp8Kind::e4m3 ? mag == 0x7f : mag >= 0x7c;
    };
    const int N = 12, K = 256;
    Fp8Tensor W;
    W.rows = N;
    W.cols = K;
    W.block_rows = 128;
    W.kind = kind;
    W.scale_inv = {0.75f, 3.0f};
    W.codes.resize(static_cast<size_t>(N * K));
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k) {
        const int c = (k * 7 + 16 * n) % 256;  // rows 0..7: all 256 codes, finite ones only
        W.codes[static_cast<size_t>(n * K + k)] = static_cast<uint8_t>(special(c) ? 0x01 : c);
      }
    // Rows 8..11 each hold one special code (inf/NaN), the rest finite.
    const int specials[4] = {0x7f, 0xff, kind == Fp8Kind::e5m2 ? 0x7c : 0x7f,
                             kind == Fp8Kind::e5m2 ? 0xfe : 0xff};
    for (int i = 0; i < 4; ++i)
      W.codes[static_cast<size_t>((8 + i) * K + 37 * i + 3)] = static_cast<uint8_t>(specials[i]);
    for (const int M : {8, 3, 16, 21}) {
      SCOPED_TRACE("M=" + std::to_string(M) + " kind=" + std::to_string(static_cast<int>(kind)));
      const Fp8Tensor X = random_fp8(M, K, 1, 128, 11);
      GemmConfig cfg;
      cfg.out = OutRound::fp32;
      std::vector<float> Y(static_cast<size_t>(M * N));
      gemm_fp8_blockscaled(X, W, Y.data(), cfg);
      int nans = 0;
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const float got = Y[static_cast<size_t>(m * N + n)], want = ref_fp8(X, W, m, n, cfg);
          if (std::isnan(want)) {
            ++nans;
            EXPECT_TRUE(std::isnan(got)) << m << "," << n;
          } else {
            ASSERT_EQ(f32_bits(got), f32_bits(want)) << m << "," << n;
          }
        }
      EXPECT_GE(nans, 2 * M) << "the NaN codes must reach the outputs";
    }
  }
}

TEST(NumericsGemm, Fp8WithinDerivedBoundOfFloat64) {
  const int M = 16, N = 64, K = 1024 + 37;
  const Fp8Tensor X = random_fp8(M, K, 1, 128, 9), W = random_fp8(N, K, 128, 128, 10);
  const int slices = (K + 127) / 128;
  for (Promotion p : {Promotion::cublaslt, Promotion::deepgemm}) {
    GemmConfig cfg;
    cfg.promotion = p;
    cfg.out = OutRound::fp32;
    std::vector<float> Y(static_cast<size_t>(M * N));
    gemm_fp8_blockscaled(X, W, Y.data(), cfg);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double exact = 0.0, absum = 0.0;
        for (int k = 0; k < K; ++k) {
          const double t =
              static_cast<double>(fp8_to_float(X.codes[static_cast<size_t>(m * K + k)], X.kind)) *
              fp8_to_float(W.codes[static_cast<size_t>(n * K + k)], W.kind) * X.block_scale_inv(m, k) *
              W.block_scale_inv(n, k);
          exact += t;
          absum += std::fabs(t);
        }
        // Products of fp8 values are exact; each term then sees <= 128 chain roundings, 1 for
        // the scale multiply, <= `slices` promotion fmas (split_k = 1): gamma_{130+slices}.
        const double bound = gamma(128 + 2 + slices) * absum + 1e-15 * absum;
        ASSERT_LE(std::fabs(Y[static_cast<size_t>(m * N + n)] - exact), bound) << m << "," << n;
      }
  }
}

TEST(NumericsGemm, PromotionsDifferSomewhere) {
  const int M = 64, N = 64, K = 1024;
  const Fp8Tensor X = random_fp8(M, K, 1, 128, 11), W = random_fp8(N, K, 128, 128, 12);
  GemmConfig a, b;
  a.out = b.out = OutRound::fp32;
  b.promotion = Promotion::deepgemm;
  std::vector<float> Ya(static_cast<size_t>(M * N)), Yb(Ya.size());
  gemm_fp8_blockscaled(X, W, Ya.data(), a);
  gemm_fp8_blockscaled(X, W, Yb.data(), b);
  size_t d = 0;
  for (size_t i = 0; i < Ya.size(); ++i) d += f32_bits(Ya[i]) != f32_bits(Yb[i]);
  EXPECT_GT(d, 0u);
  std::printf("cublaslt vs deepgemm promotion: %zu of %zu outputs differ\n", d, Ya.size());
  // and the fp8 GEMM is thread-count independent
  rlp::set_thread_count(1);
  std::vector<float> Y1(Ya.size());
  gemm_fp8_blockscaled(X, W, Y1.data(), a);
  rlp::set_thread_count(0);
  EXPECT_TRUE(same_bits(Y1, Ya));
}

TEST(NumericsGemm, HopperHandWorked) {
  // (More cases, and the model against a port of MMA-Sim: numerics_hopper_accum_test.cpp.)
  const Fp8Kind E4 = Fp8Kind::e4m3;
  // One big product (256 * 1) and 31 small ones (2^-6 * 1): aligned to 2^8 with 13 fractional
  // bits the unit is 2^-5, so every 2^-6 truncates to zero. fp32 keeps them: 256 + 31/64.
  std::vector<float> a(32, 0x1p-6f), b(32, 1.0f);
  a[0] = 256.0f;
  EXPECT_EQ(hopper_slice_accumulate(a.data(), b.data(), 32, 0.0f, E4, E4), 256.0f);
  float f = 0.0f;
  for (int k = 0; k < 32; ++k) f = std::fma(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)], f);
  EXPECT_EQ(f, 256.484375f);
  // The C input takes part in the alignment: C = 2^20 swallows products below 2^7.
  std::vector<float> c(32, 64.0f), one(32, 1.0f);
  EXPECT_EQ(hopper_step(c.data(), one.data(), 32, 0x1p20f, E4, E4), 0x1p20f);
  // Alignment truncation of every term: 32 products of 1.875 * 1.875 = 3.515625 (exact) plus C = 2^14 + 1:
  // the sum 16497.5 in units of 2^(14-13) = 2 truncates each term (3.515625 -> 2, C -> 16384), giving 16384
  // + 64.
  std::vector<float> p(32, 1.875f);
  EXPECT_EQ(hopper_step(p.data(), p.data(), 32, 16385.0f, E4, E4), 16448.0f);
  // A product aligns on the sum of its operands' exponents, not its own: 1.875 * 1.875 = 3.515625
  // (own exponent 1, operands' 0 + 0) sets the unit to 2^-13, so the product 2^-7 * -2^-6 = -2^-13
  // counts one unit: 28800 - 1 = 28799 units, 15 bits, truncated to 14: 28798 * 2^-13. Aligned on
  // the product's own exponent (the emulator's first reading of MMA-Sim) the unit would be 2^-12
  // and -2^-13 would vanish.
  {
    const float pa[2] = {1.875f, 0x1p-7f}, pb[2] = {1.875f, -0x1p-6f};
    EXPECT_EQ(hopper_step(pa, pb, 2, 0.0f, E4, E4), 28798.0f * 0x1p-13f);
  }
  // A 128-slice is four chained steps.
  std::vector<float> s(128, 0x1p-6f), w(128, 1.0f);
  s[0] = 256.0f;
  EXPECT_EQ(hopper_slice_accumulate(s.data(), w.data(), 128, 0.0f, E4, E4), 256.0f);
}

// ---- per-token x per-channel (vLLM's Fp8LinearOp, CUTLASS FP8FastAccum) -----------------------
// Naive reference of gemm.hpp's gemm_fp8_rowscaled: one accumulator over all of K (the fp32 chain,
// or the Hopper model's k = 32 steps with C carried), then the ScaledEpilogue.
float ref_rowscaled(const Fp8Tensor& X, const Fp8Tensor& W, int m, int n, SliceAccum acc, bool swap_ab,
                    const float* bias, OutRound out) {
  const int K = X.cols;
  std::vector<float> a(static_cast<size_t>(K)), b(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) {
    a[static_cast<size_t>(k)] = fp8_to_float(X.codes[static_cast<size_t>(m * K + k)], X.kind);
    b[static_cast<size_t>(k)] = fp8_to_float(W.codes[static_cast<size_t>(n * K + k)], W.kind);
  }
  float c = 0.0f;
  if (acc == SliceAccum::hopper)
    for (int k0 = 0; k0 < K; k0 += 32)
      c = hopper_step(a.data() + k0, b.data() + k0, std::min(32, K - k0), c, X.kind, W.kind);
  else
    for (int k = 0; k < K; ++k) c = std::fma(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)], c);
  const float sx = X.scale_inv[static_cast<size_t>(m)], sw = W.scale_inv[static_cast<size_t>(n)];
  const float t = (swap_ab ? sx : sw) * c, outer = swap_ab ? sw : sx;
  return round_out(bias != nullptr ? std::fma(outer, t, bias[n]) : outer * t, out);
}

TEST(NumericsGemm, RowScaledMatchesStatedOrderBitwise) {
  const int N = 48, K = 304;  // K: two 128-slices and a partial one of 48 (= 32 + 16 in the Hopper steps)
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(N * K)), bias(static_cast<size_t>(N));
  for (float& v : w) v = d(rng) * (rng() % 13 == 0 ? 30.0f : 1.0f);
  for (float& v : bias) v = round_bf16(d(rng));
  ScaleOptions te;
  const Fp8Tensor W = quantize_blocks(w.data(), N, K, 1, K, te);
  for (const int M : {21, 16, 8, 3}) {  // packed and small-M kernels
    SCOPED_TRACE("M=" + std::to_string(M));
    std::vector<float> x(static_cast<size_t>(M * K));
    for (float& v : x) v = round_bf16(d(rng) * 4.0f);
    Fp8Tensor X;
    quantize_per_token_vllm(x.data(), M, K, X);
    for (SliceAccum acc : {SliceAccum::fp32, SliceAccum::hopper})
      for (bool swap : {false, true})
        for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())})
          for (OutRound out : {OutRound::fp32, OutRound::bf16}) {
            std::vector<float> Y(static_cast<size_t>(M * N));
            gemm_fp8_rowscaled(X, W, Y.data(), acc, swap, b, out);
            for (int m = 0; m < M; ++m)
              for (int n = 0; n < N; ++n)
                ASSERT_EQ(f32_bits(Y[static_cast<size_t>(m * N + n)]),
                          f32_bits(ref_rowscaled(X, W, m, n, acc, swap, b, out)))
                    << m << "," << n << " acc=" << static_cast<int>(acc) << " swap=" << swap;
          }
  }
}

TEST(NumericsGemm, RowScaledEpilogueHandWorked) {
  // acc = 3 (three products 1 x 1), token scale 0.1f, channel scale 0.7f. Without swap-AB the
  // channel scale goes first: fl(0.7f * 3) = 0x1.0ccccc p+1, times 0.1f = 0x1.ae147a p-3; swapped,
  // fl(0.1f * 3) times 0.7f = 0x1.ae147c p-3 (worked in exact rationals, rounded to nearest).
  Fp8Tensor X, W;
  X.rows = W.rows = 1;
  X.cols = W.cols = 32;
  X.block_cols = W.block_cols = 32;
  X.codes.assign(32, 0x00);
  std::fill_n(X.codes.begin(), 3, uint8_t{0x38});  // 1.0
  W.codes.assign(32, 0x38);
  X.scale_inv = {0.1f};
  W.scale_inv = {0.7f};
  float y = 0.0f;
  gemm_fp8_rowscaled(X, W, &y, SliceAccum::fp32, false, nullptr, OutRound::fp32);
  EXPECT_EQ(y, 0x1.ae147ap-3f);
  gemm_fp8_rowscaled(X, W, &y, SliceAccum::fp32, true, nullptr, OutRound::fp32);
  EXPECT_EQ(y, 0x1.ae147cp-3f);
  // The bias joins the last multiply in one fma: 0.1f * 0x1.0ccccc p+1 + 0.25 rounded once is
  // 0x1.d70a3e p-2; a separate add would give 0x1.d70a3c p-2.
  const float bias = 0.25f;
  gemm_fp8_rowscaled(X, W, &y, SliceAccum::fp32, false, &bias, OutRound::fp32);
  EXPECT_EQ(y, 0x1.d70a3ep-2f);
  // FastAccum: no promotion at 128. 129 products 1 x 2^-6 after one 256: the fp32 chain keeps them
  // (256 + 129/64 = 258.015625); the Hopper model carries C = 256 through every step, whose unit
  // 2^-5 truncates each 2^-6 away.
  X.cols = W.cols = X.block_cols = W.block_cols = 130;
  X.codes.assign(130, 0x08);  // 2^-6 (e4m3 0.0001.000)
  X.codes[0] = 0x78;          // 256
  W.codes.assign(130, 0x38);
  X.scale_inv = W.scale_inv = {1.0f};
  gemm_fp8_rowscaled(X, W, &y, SliceAccum::fp32, false, nullptr, OutRound::fp32);
  EXPECT_EQ(y, 258.015625f);
  gemm_fp8_rowscaled(X, W, &y, SliceAccum::hopper, false, nullptr, OutRound::fp32);
  EXPECT_EQ(y, 256.0f);
}

// vLLM's dynamic_per_token_scaled_fp8_quant (scaling.hpp), worked by hand.
TEST(NumericsGemm, PerTokenQuantHandWorked) {
  const float nan = std::nanf("");
  // Row 0: amax 3136 -> scale 3136 / 448 = 7 exactly. 10.9375 / 7 = 1.5625, the tie between e4m3
  // 1.5 and 1.625, goes to even (1.5, 0x3C); a reciprocal multiply (10.9375 * fl(1/7) =
  // 1.5625001..) would round up to 1.625. -3136 / 7 = -448.
  // Row 1: all zeros: scale = min_scaling_factor = fl(1 / 229376), codes 0.
  // Row 2: amax 1e-6: 1e-6 / 448 is below the floor, so scale = fl(1 / 229376); 1e-6 / scale =
  // 0.229376.. -> e4m3 0.234375 (0x27 = 0.0100.111 = 2^-3 x 1.875; 0.21875 is farther).
  // Row 3: a NaN is ignored by the amax (2 -> scale 2/448) and quantizes to +448 (fminf drops it).
  const std::vector<float> x = {10.9375f, -3136.0f, 0.0f,  0.0f, 0.0f, 0.0f, 0.0f, 0.0f,
                                0.0f,     0.0f,     1e-6f, 0.0f, nan,  2.0f, 0.0f, 0.0f};
  Fp8Tensor q;
  quantize_per_token_vllm(x.data(), 4, 4, q);
  ASSERT_EQ(q.scale_inv.size(), 4u);
  EXPECT_EQ(q.block_rows, 1);
  EXPECT_EQ(q.block_cols, 4);
  EXPECT_EQ(q.scale_inv[0], 7.0f);
  EXPECT_EQ(q.codes[0], 0x3C);  // 1.5
  EXPECT_EQ(q.codes[1], 0xFE);  // -448
  EXPECT_EQ(q.scale_inv[1], 1.0f / 229376.0f);
  EXPECT_EQ(q.codes[4] | q.codes[5] | q.codes[6] | q.codes[7], 0);
  EXPECT_EQ(q.scale_inv[2], 1.0f / 229376.0f);
  EXPECT_EQ(q.codes[10], 0x27);
  EXPECT_EQ(q.scale_inv[3], 2.0f / 448.0f);
  EXPECT_EQ(q.codes[12], 0x7E);  // NaN -> +448
  EXPECT_EQ(q.codes[13], 0x7E);  // 2 / (2/448) = 448
}

// ---- the bf16 dot-product kernel (gemm.hpp: vdpbf16ps steps where they give the fma chains' bits)
// against the stated order over segment lengths, split-K ranges and chunks that cut pairs anywhere;
// the operand spans on hand-worked values; the guard on data where the instruction's denormal
// flushing would change a result.
// bf16 values with exponents spread over 2^-spread..2^spread and some exact zeros.
std::vector<float> spread_bf16(std::size_t n, unsigned seed, int spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = rng() % 13 == 0 ? 0.0f
                        : round_bf16(std::ldexp(d(rng), static_cast<int>(rng() % (2 * spread + 1)) - spread));
  return v;
}

std::vector<uint16_t> bits_of(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
  return b;
}

void expect_stated_order(const std::vector<float>& X, const std::vector<float>& W, int M, int N, int K,
                         const GemmConfig& cfg) {
  const std::vector<uint16_t> W16 = bits_of(W);
  std::vector<float> Y(static_cast<std::size_t>(M) * static_cast<std::size_t>(N));
  gemm_f32acc(X.data(), W16.data(), Half16::bf16, Y.data(), M, N, K, cfg);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const float r = ref_f32acc(X.data() + static_cast<std::size_t>(m) * K,
                                 W.data() + static_cast<std::size_t>(n) * K, K, cfg);
      ASSERT_EQ(f32_bits(Y[static_cast<std::size_t>(m) * N + n]), f32_bits(r))
          << "m=" << m << " n=" << n << " K=" << K << " split=" << cfg.split_k << " chunk=" << cfg.k_chunk;
    }
}

TEST(Bf16Dot, KernelAvailableWhereTheBuildHasIt) {
#if defined(__AVX512BF16__)
  // The startup check compares the instruction with its two fma steps; on a CPU where it failed the
  // kernel would silently never run, which this test reports.
  EXPECT_TRUE(bf16_dot_kernel_available());
#else
  EXPECT_FALSE(bf16_dot_kernel_available());
#endif
}

// Segments of every parity (K odd and even, split ranges starting at odd k, chunks of 63 and 100),
// M and N past a tile's edge, exponents spread enough that most fma steps round.
TEST(Bf16Dot, MatchesStatedOrderBitwise) {
  for (const int K : {1, 2, 31, 33, 127, 128, 129, 257, 700}) {
    const int M = K > 300 ? 37 : 203, N = K > 300 ? 53 : 197;
    const auto X = spread_bf16(static_cast<std::size_t>(M) * K, 1, 12),
               W = spread_bf16(static_cast<std::size_t>(N) * K, 2, 12);
    ASSERT_TRUE(bf16_dot_exact(bf16_span(X.data(), X.size()), bf16_span(bits_of(W).data(), W.size()), K))
        << "the data must take the dot-product kernel, K=" << K;
    for (const int split : {1, 3})
      for (const int chunk : {0, 63, 100}) {
        GemmConfig cfg;
        cfg.split_k = split;
        cfg.k_chunk = chunk;
        cfg.out = chunk == 63 ? OutRound::bf16 : OutRound::fp32;
        expect_stated_order(X, W, M, N, K, cfg);
      }
  }
}

TEST(Bf16Dot, SpansHandWorked) {
  const std::vector<float> v = {0.0f, 1.0f, -3.0f, 0x1p-10f, -0.0f};
  const Bf16Span s = bf16_span(v.data(), v.size());
  EXPECT_TRUE(s.normal);
  EXPECT_EQ(s.emin, -10);
  EXPECT_EQ(s.emax, 1);
  const std::vector<uint16_t> b = bits_of(v);
  const Bf16Span sb = bf16_span(b.data(), b.size());
  EXPECT_TRUE(sb.normal);
  EXPECT_EQ(sb.emin, -10);
  EXPECT_EQ(sb.emax, 1);

  const std::vector<float> zeros = {0.0f, -0.0f};
  const Bf16Span z = bf16_span(zeros.data(), zeros.size());
  EXPECT_TRUE(z.normal);
  EXPECT_GT(z.emin, z.emax);  // no nonzero value

  auto with = [&](uint16_t pattern) {
    std::vector<uint16_t> c = b;
    c[2] = pattern;
    return bf16_span(c.data(), c.size());
  };
  EXPECT_FALSE(with(0x0001).normal);  // denormal
  EXPECT_FALSE(with(0x807F).normal);  // negative denormal
  EXPECT_FALSE(with(0x7F80).normal);  // +inf
  EXPECT_FALSE(with(0xFFC0).normal);  // NaN
  EXPECT_TRUE(with(0x0080).normal);   // the smallest normal, 2^-126
  EXPECT_EQ(with(0x0080).emin, -126);

  std::vector<float> f = v;
  f[1] = 1.0f + 0x1p-20f;  // not a bf16 value
  EXPECT_FALSE(bf16_span(f.data(), f.size()).normal);
  f[1] = 0x1p-140f;  // a float denormal
  EXPECT_FALSE(bf16_span(f.data(), f.size()).normal);
}

TEST(Bf16Dot, ExactnessConditionHandWorked) {
  const Bf16Span unit{true, -3, 3};
  EXPECT_TRUE(bf16_dot_exact(unit, unit, 4096));
  EXPECT_FALSE(bf16_dot_exact(Bf16Span{false, 0, 0}, unit, 1));
  EXPECT_TRUE(bf16_dot_exact(Bf16Span{true, 1000, -1000}, unit, 7));  // X all zero
  // Products down to 2^-112 are multiples of 2^-126: normal or zero partial sums.
  EXPECT_TRUE(bf16_dot_exact(Bf16Span{true, -56, 0}, Bf16Span{true, -56, 0}, 8));
  EXPECT_FALSE(bf16_dot_exact(Bf16Span{true, -57, 0}, Bf16Span{true, -56, 0}, 8));
  // K * 2^(emax_x + emax_w + 2) <= 2^127.
  EXPECT_TRUE(bf16_dot_exact(Bf16Span{true, 0, 60}, Bf16Span{true, 0, 55}, 1024));
  EXPECT_FALSE(bf16_dot_exact(Bf16Span{true, 0, 60}, Bf16Span{true, 0, 55}, 1025));
}

// Where vdpbf16ps would flush: products of 2^-70 * 2^-60 = 2^-130 are denormal, which the fma
// chain keeps (sum 2^-129 per pair, a denormal y) and the instruction would make +0. The guard
// sends such operands to the fma kernel: y must still be the chain's.
TEST(Bf16Dot, GuardKeepsDenormalProductsExact) {
  const int M = 40, N = 50, K = 64;
  auto X = spread_bf16(static_cast<std::size_t>(M) * K, 3, 4);
  const auto W = spread_bf16(static_cast<std::size_t>(N) * K, 4, 4);
  std::vector<float> Wt = W;
  for (int n = 0; n < N; ++n)
    Wt[static_cast<std::size_t>(n) * K] = Wt[static_cast<std::size_t>(n) * K + 1] = 0x1p-60f;
  for (int k = 0; k < K; ++k)
    X[static_cast<std::size_t>(k)] = k < 2 ? 0x1p-70f : 0.0f;  // row 0: two tiny products
  EXPECT_FALSE(bf16_dot_exact(bf16_span(X.data(), X.size()), bf16_span(bits_of(Wt).data(), Wt.size()), K));
  GemmConfig cfg;
  cfg.out = OutRound::fp32;
  expect_stated_order(X, Wt, M, N, K, cfg);
  std::vector<float> Y(static_cast<std::size_t>(M) * N);
  const std::vector<uint16_t> W16 = bits_of(Wt);
  gemm_f32acc(X.data(), W16.data(), Half16::bf16, Y.data(), M, N, K, cfg);
  EXPECT_EQ(Y[0], 0x1p-129f);  // hand-worked: 2^-130 + 2^-130, exact as a denormal
}

// A caller's span is used as given (a prepared weight passes its own): a wrong one claiming W is
// all normal when it holds denormal products shows that the span, not a rescan, decides.
TEST(Bf16Dot, CallerSpanDecides) {
  if (!bf16_dot_kernel_available()) GTEST_SKIP() << "no bf16 dot-product kernel on this build/CPU";
  const int M = 20, N = 16, K = 2;
  std::vector<float> X(static_cast<std::size_t>(M) * K, 0x1p-70f);
  const std::vector<uint16_t> W16(static_cast<std::size_t>(N) * K, float_to_bf16_bits(0x1p-60f));
  GemmConfig cfg;
  cfg.out = OutRound::fp32;
  std::vector<float> scanned(static_cast<std::size_t>(M) * N), claimed(scanned.size());
  gemm_f32acc(X.data(), W16.data(), Half16::bf16, scanned.data(), M, N, K, cfg);
  const Bf16Span wrong{true, 0, 0};
  gemm_f32acc(X.data(), W16.data(), Half16::bf16, claimed.data(), M, N, K, cfg, &wrong);
  EXPECT_EQ(scanned[0], 0x1p-129f);  // the fma chain
  EXPECT_EQ(claimed[0], 0.0f);       // the instruction, flushing the denormal products
}

// The packed kernels' vectorized epilogue rounds as round_out does, non-finite results included
// (bf16: RNE, canonical NaN 0x7FFF; these operands take the fma kernel, which shares it).
TEST(NumericsGemm, EpilogueRoundsNonFiniteLikeScalar) {
  const int M = 20, N = 37, K = 40;
  auto X = random_bf16(M * K, 31, 8.0f);
  const auto W = random_bf16(N * K, 32);
  X[0] = std::numeric_limits<float>::quiet_NaN();
  X[static_cast<size_t>(K)] = std::numeric_limits<float>::infinity();
  X[static_cast<size_t>(2 * K)] = 3.0e38f;  // rounds up past bf16's largest finite value
  for (OutRound out : {OutRound::bf16, OutRound::fp32}) {
    GemmConfig cfg;
    cfg.out = out;
    std::vector<float> Y(static_cast<size_t>(M * N));
    gemm_f32acc(X.data(), W.data(), Y.data(), M, N, K, cfg);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n)
        ASSERT_EQ(f32_bits(Y[static_cast<size_t>(m * N + n)]),
                  f32_bits(ref_f32acc(X.data() + m * K, W.data() + n * K, K, cfg)))
            << "m=" << m << " n=" << n;
  }
}

}  // namespace
}  // namespace rlp::num
