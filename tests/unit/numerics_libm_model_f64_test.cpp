// The metrics' float64 exp and log (numerics/libm_model_f64.hpp, shared with the CUDA kernels) bit
// for bit against the host's glibc exp and log whose algorithms they reimplement: dense samples of
// every path (main, rescaled, near 1, subnormal, special values), every negative float widened in
// tests/slow; float64 accuracy against long double; the AVX-512 lanes against the scalar model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "rlparity/numerics/libm_model_f64.hpp"

namespace {

using rlp::num::bits_f32;
using rlp::num::bits_f64;
using rlp::num::f64_bits;

bool same(double a, double b) { return f64_bits(a) == f64_bits(b) || (std::isnan(a) && std::isnan(b)); }

// Model against host on xs; returns the number of mismatches (the first few reported).
template <class Model, class Host>
uint64_t mismatches(const char* name, const std::vector<double>& xs, Model model, Host host) {
  uint64_t bad = 0;
  for (const double x : xs) {
    const double want = host(x), got = model(x);
    if (!same(want, got) && ++bad <= 5)
      ADD_FAILURE() << name << "(" << std::hexfloat << x << "): host " << want << ", model " << got;
  }
  return bad;
}

std::vector<double> uniform(double lo, double hi, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> xs(static_cast<std::size_t>(n));
  for (double& x : xs) x = d(rng);
  return xs;
}

std::vector<double> random_patterns(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> xs(static_cast<std::size_t>(n));
  for (double& x : xs) x = bits_f64(rng());
  return xs;
}

double host_exp(double x) { return std::exp(x); }
double host_log(double x) { return std::log(x); }
double model_exp(double x) { return rlp::num::exp_model(x); }
double model_log(double x) { return rlp::num::log_model(x); }

// The metrics' inputs are float log-probabilities widened: every 1021st float pattern (all
// exponents, both signs), then doubles of every path: the main range, |x| in [512, 1024) where the
// scale is rescaled (results into the subnormals and near overflow), the edges at 2^-54 and 1024,
// and random bit patterns.
TEST(NumericsLibmModelF64, ExpMatchesHost) {
  std::vector<double> xs;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 1021) xs.push_back(bits_f32(static_cast<uint32_t>(u)));
  for (const auto& [lo, hi, seed] :
       {std::tuple{-1.0, 0.0, 1}, std::tuple{-40.0, 40.0, 2}, std::tuple{-760.0, -500.0, 3},
        std::tuple{500.0, 720.0, 4}, std::tuple{-0x1p-50, 0x1p-50, 5}, std::tuple{-1100.0, 1100.0, 6}}) {
    const std::vector<double> more = uniform(lo, hi, 400000, static_cast<uint64_t>(seed));
    xs.insert(xs.end(), more.begin(), more.end());
  }
  const std::vector<double> pats = random_patterns(400000, 7);
  xs.insert(xs.end(), pats.begin(), pats.end());
  EXPECT_EQ(mismatches("exp", xs, model_exp, host_exp), 0u);
}

// The log's argument in the metrics is m = (exp(a) + exp(b)) / 2 in (0, 1]: the table path over
// (0, 2], the near-1 path (1 - 2^-4 to 1 + 0x1.09p-4, both edges), subnormals, sums of two
// exps, random bit patterns.
TEST(NumericsLibmModelF64, LogMatchesHost) {
  std::vector<double> xs = uniform(0.0, 2.0, 800000, 11);
  for (const auto& [lo, hi, seed] :
       {std::tuple{1.0 - 0x1p-4, 1.0 + 0x1.09p-4, 12}, std::tuple{0.9374, 0.9376, 13},
        std::tuple{1.0645, 1.0649, 14}, std::tuple{1.0 - 0x1p-30, 1.0 + 0x1p-30, 15}}) {
    const std::vector<double> more = uniform(lo, hi, 400000, static_cast<uint64_t>(seed));
    xs.insert(xs.end(), more.begin(), more.end());
  }
  std::mt19937_64 rng(16);
  std::uniform_real_distribution<double> lp(-800.0, 0.0);
  for (int i = 0; i < 400000; ++i) xs.push_back(0.5 * (std::exp(lp(rng)) + std::exp(lp(rng) / 64)));
  for (int i = 0; i < 100000; ++i) xs.push_back(bits_f64(rng() % (uint64_t{1} << 52)));  // subnormals
  const std::vector<double> pats = random_patterns(400000, 17);
  xs.insert(xs.end(), pats.begin(), pats.end());
  // Inputs where one fusion changes the result (a search of 4e8 random doubles): r^3 q + lo
  // unfused on the table path; poly r^3 + lo unfused near 1.
  for (const double x :
       {0x1.23e105836e39p-2, 0x1.080ef112f3c97p+0, 0x1.0f910384901b1p+0, 0x1.f6ccb4efb52bcp-1})
    xs.push_back(x);
  EXPECT_EQ(mismatches("log", xs, model_log, host_log), 0u);
}

TEST(NumericsLibmModelF64, SpecialValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto bits = [](double x) { return f64_bits(x); };
  EXPECT_EQ(bits(rlp::num::exp_model(-inf)), bits(0.0));
  EXPECT_EQ(bits(rlp::num::exp_model(inf)), bits(inf));
  EXPECT_EQ(bits(rlp::num::exp_model(0.0)), bits(1.0));
  EXPECT_EQ(bits(rlp::num::exp_model(-0.0)), bits(1.0));
  EXPECT_EQ(bits(rlp::num::exp_model(-2000.0)), bits(0.0));
  EXPECT_EQ(bits(rlp::num::exp_model(710.0)), bits(inf));
  EXPECT_EQ(bits(rlp::num::exp_model(-745.0)), bits(bits_f64(1)));  // the smallest subnormal
  EXPECT_TRUE(std::isnan(rlp::num::exp_model(nan)));
  EXPECT_EQ(bits(rlp::num::log_model(1.0)), bits(0.0));
  EXPECT_EQ(bits(rlp::num::log_model(0.0)), bits(-inf));
  EXPECT_EQ(bits(rlp::num::log_model(-0.0)), bits(-inf));
  EXPECT_EQ(bits(rlp::num::log_model(inf)), bits(inf));
  EXPECT_TRUE(std::isnan(rlp::num::log_model(-1.0)));
  EXPECT_TRUE(std::isnan(rlp::num::log_model(-inf)));
  EXPECT_TRUE(std::isnan(rlp::num::log_model(nan)));
}

// Accuracy independent of glibc's double functions: within one ulp of the long double results.
TEST(NumericsLibmModelF64, WithinOneUlpOfLongDouble) {
  for (const double x : uniform(-740.0, 700.0, 200000, 21)) {
    const long double want = std::exp(static_cast<long double>(x));
    const long double ulp =
        std::max(std::ldexp(1.0L, std::ilogb(static_cast<double>(want)) - 52), std::ldexp(1.0L, -1074));
    ASSERT_LE(std::fabs(static_cast<long double>(rlp::num::exp_model(x)) - want), ulp) << std::hexfloat << x;
  }
  for (const double x : uniform(0x1p-1000, 4.0, 200000, 22)) {
    const long double want = std::log(static_cast<long double>(x));
    if (want == 0.0L) continue;
    const long double ulp = std::ldexp(1.0L, std::ilogb(static_cast<double>(want)) - 52);
    ASSERT_LE(std::fabs(static_cast<long double>(rlp::num::log_model(x)) - want), ulp) << std::hexfloat << x;
  }
}

// The lanes against the scalar model: groups of 8 where one lane leaves the main path (exp: |x|
// below 2^-54 or at least 512, inf, NaN; log: near 1, subnormal, zero, negative), computed in place
// with a length that is not a multiple of 8.
TEST(NumericsLibmModelF64, LanesMatchScalarModel) {
  std::mt19937_64 rng(31);
  std::uniform_real_distribution<double> e(-100.0, 5.0), l(0.0, 1.5);
  const double inf = std::numeric_limits<double>::infinity();
  const double exp_odd[] = {0.0, -0x1p-60, -600.0, 600.0, -inf, std::nan(""), -1100.0};
  const double log_odd[] = {1.0, 1.01, 0.95, 0x1p-1070, 0.0, -1.0, inf, std::nan("")};
  std::vector<double> xe, xl;
  for (int i = 0; i < 100003; ++i) {
    xe.push_back(i % 13 == 0 ? exp_odd[(i / 13) % 7] : e(rng));
    xl.push_back(i % 11 == 0 ? log_odd[(i / 11) % 8] : l(rng));
  }
  std::vector<double> ye = xe, yl = xl;
  rlp::num::exp_model_n(ye.data(), ye.data(), ye.size());
  rlp::num::log_model_n(yl.data(), yl.data(), yl.size());
  uint64_t bad = 0;
  for (std::size_t i = 0; i < xe.size(); ++i) {
    if (!same(ye[i], rlp::num::exp_model(xe[i])) && ++bad <= 5) ADD_FAILURE() << "exp lanes at " << xe[i];
    if (!same(yl[i], rlp::num::log_model(xl[i])) && ++bad <= 5) ADD_FAILURE() << "log lanes at " << xl[i];
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
