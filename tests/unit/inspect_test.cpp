// rlparity inspect: its streamed per-tensor numbers against float64 computations written here from
// the quantized tensors (quantize_blocks / dequantize) and, for TE, from first principles; hand-made
// saturation and flush-to-zero cases; the checkpoint-level ranking, recommendation and HDF5 output.
#include "rlparity/inspect/inspect.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <random>

#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
#include "unit/outlier_checkpoint_test_util.hpp"

namespace rlp {
namespace {

using num::ScaleConvention;

std::vector<float> matrix_with_outliers(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> x(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  for (float& v : x) v = num::round_bf16(d(rng));
  auto at = [&](int r, int c) -> float& {
    return x[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)];
  };
  at(5, 7) = 37.5f;       // a huge outlier: its block's small values flush to zero
  at(150, 250) = -9.25f;  // a partial edge block (rows 128..199, cols 256..299)
  at(199, 299) = 3.0f;    // the last element: NeMo RL pads partial blocks with it
  for (int r = 0; r < rows; ++r) at(r, 130) *= 40.0f;  // an outlier channel
  at(60, 60) = 0.0f;
  return x;
}

struct Reference {
  double sx2 = 0, se2 = 0;
  int64_t flushed = 0;
  int64_t blocks_differ = 0;
};

// Float64 sums over the library's own quantize + dequantize.
Reference reference(const std::vector<float>& x, int rows, int cols, ScaleConvention c, bool pow2,
                    const num::Fp8Tensor* te) {
  num::ScaleOptions o;
  o.convention = c;
  o.pow2 = pow2;
  const num::Fp8Tensor q = num::quantize_blocks(x.data(), rows, cols, 128, 128, o);
  std::vector<float> deq(x.size());
  num::dequantize(q, deq.data());
  Reference r;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - static_cast<double>(deq[i]);
    r.sx2 += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    r.se2 += e * e;
    if (x[i] != 0.0f && (q.codes[i] & 0x7F) == 0) ++r.flushed;
  }
  if (te) {
    for (int br = 0; br < q.row_blocks(); ++br)
      for (int bc = 0; bc < q.col_blocks(); ++bc) {
        bool differ = false;
        for (int rr = br * 128; rr < std::min(rows, br * 128 + 128); ++rr)
          for (int cc = bc * 128; cc < std::min(cols, bc * 128 + 128); ++cc) {
            const std::size_t i =
                static_cast<std::size_t>(rr) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(cc);
            differ = differ || q.codes[i] != te->codes[i];
          }
        r.blocks_differ += differ ? 1 : 0;
      }
  }
  return r;
}

TEST(Inspect, MatchesFloat64ReferenceForEveryConvention) {
  const int rows = 200, cols = 300;  // partial edge blocks in both directions
  const std::vector<float> x = matrix_with_outliers(rows, cols, 3);
  const auto stats = inspect_matrix(x.data(), rows, cols, 128, inspect_conventions());
  ASSERT_EQ(stats.size(), 8u);
  for (int mode = 0; mode < 2; ++mode) {
    num::ScaleOptions to;
    to.pow2 = mode == 1;
    const num::Fp8Tensor te = num::quantize_blocks(x.data(), rows, cols, 128, 128, to);
    for (std::size_t ci = 0; ci < inspect_conventions().size(); ++ci) {
      const ScaleConvention c = inspect_conventions()[ci];
      const QuantStats& s = stats[2 * ci + static_cast<std::size_t>(mode)];
      SCOPED_TRACE(std::string(convention_name(c)) + (mode ? " pow2" : " fp32"));
      ASSERT_EQ(s.convention, c);
      ASSERT_EQ(s.pow2, mode == 1);
      const Reference ref = reference(x, rows, cols, c, mode == 1, ci > 0 ? &te : nullptr);
      EXPECT_NEAR(s.sum_sq_x, ref.sx2, 1e-12 * ref.sx2);
      EXPECT_NEAR(s.sum_sq_err, ref.se2, 1e-12 * ref.se2);
      EXPECT_NEAR(s.snr_db, 10.0 * std::log10(ref.sx2 / ref.se2), 1e-9);
      EXPECT_NEAR(s.rel_fro_err, std::sqrt(ref.se2 / ref.sx2), 1e-12);
      EXPECT_EQ(s.flushed, ref.flushed);
      EXPECT_GT(s.flushed, 0);  // the outlier's block flushes its small values
      EXPECT_EQ(s.blocks_differ, ref.blocks_differ);
      EXPECT_DOUBLE_EQ(s.blocks_differ_frac, static_cast<double>(ref.blocks_differ) / 6.0);
      EXPECT_EQ(s.nonfinite, 0);
      EXPECT_EQ(s.clipped, 0);
    }
  }
  // Power-of-2 scales are coarser: never a better SNR than fp32 scales (TE) on this tensor.
  EXPECT_LE(stats[1].snr_db, stats[0].snr_db);
}

// TE from first principles: scale = 448 / amax (fp32), q = satfinite e4m3(x * scale) through the
// generic encoder of formats.hpp, x ~ q / scale.
TEST(Inspect, TeSnrFromFirstPrinciples) {
  const int rows = 130, cols = 260;
  const std::vector<float> x = matrix_with_outliers(200, 300, 9);  // use its first rows x cols
  std::vector<float> y;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      y.push_back(x[static_cast<std::size_t>(r) * 300 + static_cast<std::size_t>(c)]);
  double sx2 = 0, se2 = 0;
  std::vector<double> amaxes;
  for (int br = 0; br < rows; br += 128)
    for (int bc = 0; bc < cols; bc += 128) {
      float amax = 0;
      for (int r = br; r < std::min(rows, br + 128); ++r)
        for (int c = bc; c < std::min(cols, bc + 128); ++c)
          amax = std::max(amax, std::fabs(y[static_cast<std::size_t>(r * cols + c)]));
      amaxes.push_back(amax);
      const float scale = 448.0f / amax;
      const float scale_inv = 1.0f / scale;
      for (int r = br; r < std::min(rows, br + 128); ++r)
        for (int c = bc; c < std::min(cols, bc + 128); ++c) {
          const float v = y[static_cast<std::size_t>(r * cols + c)];
          const float q =
              num::fp8_to_float(num::float_to_fp8(v * scale, num::Fp8Kind::e4m3, num::Saturation::satfinite),
                                num::Fp8Kind::e4m3);
          const double e = static_cast<double>(v) - static_cast<double>(q * scale_inv);
          sx2 += static_cast<double>(v) * v;
          se2 += e * e;
        }
    }
  double mn = 0, med = 0, mx = 0;
  const auto s = inspect_matrix(reinterpret_cast<const uint8_t*>(y.data()), DType::fp32, rows, cols, 128,
                                {ScaleConvention::te}, &mn, &med, &mx);
  EXPECT_NEAR(s[0].snr_db, 10.0 * std::log10(sx2 / se2), 1e-9);
  std::sort(amaxes.begin(), amaxes.end());
  EXPECT_EQ(mn, amaxes.front());
  EXPECT_EQ(mx, amaxes.back());
  EXPECT_EQ(med, amaxes[(amaxes.size() + 1) / 2 - 1]);  // nearest rank
}

// Saturation (|v| > 448 before clamp/cast) and flush-to-zero on hand-made values.
TEST(Inspect, SaturationAndFlushCountsOnHandMadeValues) {
  // An amax whose fp32 scale 448/amax rounds up, so amax * scale lands one ulp above 448.
  float amax = 0;
  for (float a = 1.0f; a < 2.0f; a = std::nextafter(a, 2.0f)) {
    if (a * (448.0f / a) > 448.0f) {
      amax = a;
      break;
    }
  }
  ASSERT_GT(amax, 0.0f);
  const int rows = 4, cols = 16;
  std::vector<float> x(rows * cols, 0.0f);
  x[0] = amax;     // saturates (te): |v| = 448 + ulp
  x[17] = -amax;   // saturates too
  x[3] = 1e-6f;    // 1e-6 * 448/amax < 2^-10: flushed
  x[20] = -2e-6f;  // flushed
  x[33] = 0.5f;    // representable: neither
  x[40] = 0.0f;    // zero: never counted as flushed
  const auto s = inspect_matrix(x.data(), rows, cols, 128, {ScaleConvention::te, ScaleConvention::vllm});
  const float scale = 448.0f / amax;
  int64_t want_sat = 0, want_flush = 0;
  for (float v : x) {
    want_sat += std::fabs(v * scale) > 448.0f ? 1 : 0;
    want_flush += (v != 0.0f && num::round_e4m3_sat(v * scale) == 0.0f) ? 1 : 0;
  }
  EXPECT_EQ(want_sat, 2);
  EXPECT_EQ(want_flush, 2);
  EXPECT_EQ(s[0].saturated, want_sat);  // te fp32
  EXPECT_EQ(s[0].clipped, 0);           // 448 + ulp still rounds to 448
  EXPECT_EQ(s[0].flushed, want_flush);
  EXPECT_EQ(s[1].saturated, 0);  // te pow2 rounds the scale down: never above 448
  // vllm divides by y_s = amax / 448
  const float ys = amax / 448.0f;
  int64_t want_vsat = 0;
  for (float v : x) want_vsat += std::fabs(v / ys) > 448.0f ? 1 : 0;
  EXPECT_EQ(s[2].saturated, want_vsat);
}

TEST(Inspect, NonFiniteValuesAreCountedNotSummed) {
  std::vector<float> x(8 * 8, 0.25f);
  x[9] = std::numeric_limits<float>::infinity();
  const auto s = inspect_matrix(x.data(), 8, 8, 128, {ScaleConvention::te});
  EXPECT_EQ(s[0].nonfinite, 1);
}

TEST(Inspect, ThreadCountDoesNotChangeResults) {
  const std::vector<float> x = matrix_with_outliers(300, 520, 5);
  set_thread_count(1);
  const auto a = inspect_matrix(x.data(), 300, 520, 128, inspect_conventions());
  set_thread_count(2);
  const auto b = inspect_matrix(x.data(), 300, 520, 128, inspect_conventions());
  set_thread_count(0);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].sum_sq_err, b[i].sum_sq_err);
    EXPECT_EQ(a[i].sum_sq_x, b[i].sum_sq_x);
    EXPECT_EQ(a[i].flushed, b[i].flushed);
    EXPECT_EQ(a[i].blocks_differ, b[i].blocks_differ);
  }
}

// The vectorized kernel's codes and dequantized values against the scalar header functions
// (num::quantize_with, num::fp8_to_float) on every element: outliers, float and e4m3 subnormals,
// +-0, exact ties between e4m3 neighbours (normal and subnormal range), values at and beyond the
// saturation threshold, inf and NaN; each convention with fp32 and pow2 scales from several amaxes
// (including 0, tiny, huge and non-finite ones).
TEST(Inspect, FastPathEqualsScalarHeaderOnEveryElement) {
  std::vector<float> x;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (int i = 0; i < 4096; ++i) x.push_back(d(rng));
  for (float v : {0.0f, -0.0f, 37.5f, -9.25f, 1e-30f, -1e-38f, 1e-45f, 0x1p-126f, 0x1p-149f, 448.0f, -448.0f,
                  464.0f, 465.0f, 480.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::max()})
    x.push_back(v);
  // Ties: midpoints of neighbouring e4m3 values (every code), and one ulp either side of them.
  for (uint32_t c = 0; c < 0x7E; ++c) {
    const float lo = num::fp8_to_float(static_cast<uint8_t>(c), num::Fp8Kind::e4m3);
    const float hi = num::fp8_to_float(static_cast<uint8_t>(c + 1), num::Fp8Kind::e4m3);
    const float mid = (lo + hi) / 2.0f;  // exact: one more mantissa bit
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  // 2^18 float bit patterns at an odd stride: every exponent, both signs, varied low bits, NaN payloads.
  for (uint64_t u = 0; u < (1ull << 32); u += 16411)
    x.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  while (x.size() % 16 != 0) x.push_back(0.5f);
  std::vector<uint8_t> codes(x.size());
  std::vector<float> deq(x.size());
  for (float amax : {1.0f, 37.5f, 448.0f, 0.0f, 1e-30f, 3e38f, std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::quiet_NaN()}) {
    for (ScaleConvention c : inspect_conventions()) {
      for (bool pow2 : {false, true}) {
        SCOPED_TRACE(std::string(convention_name(c)) + (pow2 ? " pow2 amax " : " fp32 amax ") +
                     std::to_string(amax));
        num::ScaleOptions o;
        o.convention = c;
        o.pow2 = pow2;
        const num::BlockScale s = num::compute_block_scale(amax, o);
        inspect_quantize(x.data(), x.size(), c, s, codes.data(), deq.data());
        int bad = 0;
        for (std::size_t i = 0; i < x.size() && bad < 5; ++i) {
          const uint8_t want = num::quantize_with(x[i], s, o);
          const float want_deq = num::fp8_to_float(want, num::Fp8Kind::e4m3) * s.scale_inv;
          const bool same_deq = std::bit_cast<uint32_t>(deq[i]) == std::bit_cast<uint32_t>(want_deq) ||
                                (std::isnan(deq[i]) && std::isnan(want_deq));
          if (codes[i] != want || !same_deq) {
            ++bad;
            ADD_FAILURE() << "x = " << x[i] << " (bits " << std::hex << std::bit_cast<uint32_t>(x[i])
                          << "): code " << int(codes[i]) << " vs " << int(want) << ", deq " << deq[i]
                          << " vs " << want_deq << std::dec;
          }
        }
      }
    }
  }
}

// One pass runs every convention on each block and lets conventions that quantize a block
// identically share one kernel run and one error sum (see block_stats.cpp). Each convention's numbers
// must be exactly those it gets alone (no sharing) or next to TE alone: the sums bit for bit.
// Many blocks per row, so sharing starts, breaks and resumes along the rows: deepgemm's fp32 scale
// matches TE's in some blocks only, vllm's pow2 divisor is TE's pow2 multiplier inverted, one
// block is tiny (deepgemm's 1e-4 floor), one has an outlier (saturation at 448 + ulp), and
// nemo-refit pads the partial edge blocks with the last element.
TEST(Inspect, SharedKernelRunsEqualSeparateRuns) {
  const int rows = 300, cols = 128 * 9 + 40;
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> x(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  for (float& v : x) v = num::round_bf16(d(rng));
  auto at = [&](int r, int c) -> float& {
    return x[static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)];
  };
  for (int r = 0; r < 128; ++r)
    for (int c = 3 * 128; c < 4 * 128; ++c) at(r, c) *= 1e-3f;  // block amax below 1e-4
  at(140, 700) = 11.0f;                                         // an outlier block
  at(rows - 1, cols - 1) = -0.5f;                               // nemo-refit's padding value
  const auto all = inspect_matrix(x.data(), rows, cols, 128, inspect_conventions());
  for (std::size_t ci = 0; ci < inspect_conventions().size(); ++ci) {
    const ScaleConvention c = inspect_conventions()[ci];
    const auto alone = inspect_matrix(x.data(), rows, cols, 128, {c});
    const auto with_te = inspect_matrix(x.data(), rows, cols, 128, {ScaleConvention::te, c});
    for (int mode = 0; mode < 2; ++mode) {
      SCOPED_TRACE(std::string(convention_name(c)) + (mode ? " pow2" : " fp32"));
      const QuantStats& s = all[2 * ci + static_cast<std::size_t>(mode)];
      const QuantStats& a = alone[static_cast<std::size_t>(mode)];
      const QuantStats& t = with_te[(ci == 0 ? 0 : 2) + static_cast<std::size_t>(mode)];
      for (const QuantStats* o : {&a, &t}) {
        EXPECT_EQ(std::bit_cast<uint64_t>(s.sum_sq_err), std::bit_cast<uint64_t>(o->sum_sq_err));
        EXPECT_EQ(std::bit_cast<uint64_t>(s.sum_sq_x), std::bit_cast<uint64_t>(o->sum_sq_x));
        EXPECT_EQ(s.saturated, o->saturated);
        EXPECT_EQ(s.clipped, o->clipped);
        EXPECT_EQ(s.flushed, o->flushed);
      }
      EXPECT_EQ(s.blocks_differ, t.blocks_differ);
    }
  }
  // The case is not vacuous: fp32 deepgemm differs from te in some blocks only, te saturates.
  EXPECT_GT(all[4].blocks_differ + all[2].blocks_differ, 0);
  EXPECT_GT(all[0].saturated, 0);
}

TEST(Inspect, TensorNames) {
  int layer = -1;
  std::string proj;
  EXPECT_TRUE(is_fp8_weight("model.layers.12.mlp.down_proj.weight", &layer, &proj));
  EXPECT_EQ(layer, 12);
  EXPECT_EQ(proj, "down_proj");
  EXPECT_TRUE(is_fp8_weight("model.layers.0.self_attn.q_proj.weight", &layer, &proj));
  EXPECT_EQ(proj, "q_proj");
  EXPECT_FALSE(is_fp8_weight("model.layers.0.self_attn.q_proj.bias", nullptr, nullptr));
  EXPECT_FALSE(is_fp8_weight("model.embed_tokens.weight", nullptr, nullptr));
  EXPECT_FALSE(is_fp8_weight("lm_head.weight", nullptr, nullptr));
}

TEST(Inspect, CheckpointRanksTheOutlierLayerAndWritesHdf5) {
  const auto dir = std::filesystem::temp_directory_path() / ("rlp_inspect_" + std::to_string(::getpid()));
  RandomCheckpointOptions co = rlp_test::outlier_checkpoint_options((dir / "ckpt").string(), 7, 100.0, 3);
  co.dtype = DType::bf16;
  write_random_checkpoint(co);
  const Checkpoint ckpt = Checkpoint::open(co.out);
  const InspectResult r = inspect_checkpoint(ckpt);
  ASSERT_EQ(r.tensors.size(), 28u);
  // The outlier hardly moves the energy-weighted SNR; the amax spread and flushed counts show it.
  for (const auto& t : r.tensors) {
    if (t.layer == 2 && t.proj != "o_proj" && t.proj != "down_proj") {
      EXPECT_GT(t.amax_max / t.amax_median, 16.0) << t.name;
      EXPECT_GT(t.find(ScaleConvention::te, false).flushed, 0) << t.name;
    } else {
      EXPECT_LT(t.amax_max / t.amax_median, 4.0) << t.name;
    }
  }
  for (std::size_t i = 1; i < r.tensors.size(); ++i)
    EXPECT_LE(r.tensors[i - 1].worst_snr_db(), r.tensors[i].worst_snr_db());
  EXPECT_EQ(r.flagged_layers, std::vector<int>{2}) << format_inspect(r);
  EXPECT_EQ(r.bf16_first_layers, 0);
  EXPECT_EQ(r.bf16_last_layers, 2);
  EXPECT_NE(format_inspect(r).find("--bf16-last-layers 2"), std::string::npos);

  const std::string out = (dir / "inspect.h5").string();
  write_inspect_file(out, r, "test", false);
  EXPECT_THROW(write_inspect_file(out, r, "test", false), InputError);
  const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const std::string g = "tensors/" + r.tensors[0].name;
  const hid_t a = H5Aopen_by_name(f, g.c_str(), "te_fp32_snr_db", H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(a, 0);
  double v = 0;
  ASSERT_GE(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
  EXPECT_EQ(v, r.tensors[0].find(ScaleConvention::te, false).snr_db);
  H5Aclose(a);
  H5Fclose(f);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlp
