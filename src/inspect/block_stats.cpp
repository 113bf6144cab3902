// inspect's per-tensor block statistics kernel: one pass over a matrix's 128x128 blocks computes,
// for every scale convention x scale mode, the quantization error sums and the saturated / clipped /
// flushed counts, and the block amax distribution (definitions: docs/inspect.md).
#include "rlparity/inspect/block_stats.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

#include "inspect/e4m3_lanes.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

using namespace inspect_lanes;
using num::ScaleOptions;
using std::size_t;

// Sums and counts of one convention x scale mode over one block row.
struct ModeSums {
  DoubleLanes16 se2 = {};
  int64_t sat = 0, clip = 0, flush = 0, blocks_differ = 0;
};
// One block's counts (added to a ModeSums, and to those of the conventions that share the block).
struct BlockCounts {
  int64_t sat = 0, clip = 0, flush = 0;
  bool differ = false;
};

// What a block kernel does with TE's e4m3 values of the block (`te_values`): nothing, store them, or
// compare with them (a differing value marks the block in BlockCounts::differ).
enum class TeValues { none, store, compare };

// n elements (a multiple of kLanes; padding zeros add nothing) of one block in convention C: the
// squared errors into se2 (lane j accumulates elements j, j+16, ... in order), the counts into `bc`.
// General: nonfinite elements masked out of the sums and counts, the error x - deq taken in float64,
// any scale. Otherwise (the fast path: a block without NaN/inf whose |v| <= 464 everywhere, finite
// scale) the error is taken in float: x - deq is then exact (deq = 0, or deq within a factor 2 of x,
// Sterbenz), and there is nothing to clip.
// Count false: no |v| exceeds 448 (the block amax's own v does not, and rounding is monotonic).
// Flush false: no nonzero element flushes (the smallest nonzero |x|'s |v| exceeds 2^-10, the tie
// between 0 and the smallest e4m3 subnormal 2^-9).
template <ScaleConvention C, bool General, TeValues R, bool Count, bool Flush>
void block_kernel(const float* __restrict x, int n, const BlockScale& bs, uint32_t* __restrict te_values,
                  DoubleLanes16& se2_io, BlockCounts& bc) {
  const BlockScale s = bs;
  DoubleLanes8 se2_lo = se2_io.lo, se2_hi = se2_io.hi;
  IntLanes sat = {}, clip = {}, flush = {};
  BitLanes differ = {};
  for (int i = 0; i < n; i += kLanes) {
    const FloatLanes xv = load_lanes(x + i);
    FloatLanes v;
    BitLanes val;
    quantize_lanes<C, General>(xv, s, v, val);
    if constexpr (R == TeValues::compare) {
      BitLanes r;
      std::memcpy(&r, te_values + i, sizeof r);
      differ |= val ^ r;
    } else if constexpr (R == TeValues::store) {
      std::memcpy(te_values + i, &val, sizeof val);
    }
    const FloatLanes deq = from_bits(val) * s.scale_inv;
    const BitLanes ax = to_bits(xv) & 0x7FFFFFFFu;
    IntLanes fin = IntLanes{} - 1;
    DoubleLanes8 e_lo, e_hi;
    if constexpr (General) {
      // x - deq in float64; non-finite elements masked to 0 - 0 = +0 (before widening: the same).
      fin = ax < 0x7F800000u;
      const FloatLanes xm = fin ? xv : FloatLanes{}, dm = fin ? deq : FloatLanes{};
      e_lo = widen_lo(xm) - widen_lo(dm);
      e_hi = widen_hi(xm) - widen_hi(dm);
    } else {
      const FloatLanes e = xv - deq;
      e_lo = widen_lo(e);
      e_hi = widen_hi(e);
    }
    se2_lo += e_lo * e_lo;
    se2_hi += e_hi * e_hi;
    // Comparisons give -1 per true lane: subtracting counts.
    if constexpr (Count) {
      const FloatLanes av = from_bits(to_bits(v) & 0x7FFFFFFFu);
      sat -= fin & (av > kSatThreshold);
      if constexpr (General) clip -= fin & (av > kClipThreshold);
    }
    if constexpr (Flush) flush -= fin & (ax != 0u) & ((val & 0x7FFFFFFFu) == 0u);
  }
  se2_io.lo = se2_lo;
  se2_io.hi = se2_hi;
  for (int j = 0; j < kLanes; ++j) {
    bc.sat += sat[j];
    bc.clip += clip[j];
    bc.flush += flush[j];
  }
  if constexpr (R == TeValues::compare) {
    uint32_t any = 0;
    for (int j = 0; j < kLanes; ++j) any |= differ[j];
    bc.differ = any != 0;
  }
}

using BlockKernel = void (*)(const float*, int, const BlockScale&, uint32_t*, DoubleLanes16&, BlockCounts&);
template <ScaleConvention C>
BlockKernel pick_kernel_for(bool general, TeValues r, bool count, bool flush) {
  if (general) {
    switch (r) {
      case TeValues::none: return &block_kernel<C, true, TeValues::none, true, true>;
      case TeValues::store: return &block_kernel<C, true, TeValues::store, true, true>;
      case TeValues::compare: return &block_kernel<C, true, TeValues::compare, true, true>;
    }
  }
  const int k = (count ? 2 : 0) + (flush ? 1 : 0);
  // The fast path's arithmetic: v = x * scale for te, deepgemm and nemo-refit alike.
  constexpr ScaleConvention F = C == ScaleConvention::vllm ? C : ScaleConvention::te;
  static constexpr BlockKernel none[4] = {&block_kernel<F, false, TeValues::none, false, false>,
                                          &block_kernel<F, false, TeValues::none, false, true>,
                                          &block_kernel<F, false, TeValues::none, true, false>,
                                          &block_kernel<F, false, TeValues::none, true, true>};
  static constexpr BlockKernel store[4] = {&block_kernel<F, false, TeValues::store, false, false>,
                                           &block_kernel<F, false, TeValues::store, false, true>,
                                           &block_kernel<F, false, TeValues::store, true, false>,
                                           &block_kernel<F, false, TeValues::store, true, true>};
  static constexpr BlockKernel compare[4] = {&block_kernel<F, false, TeValues::compare, false, false>,
                                             &block_kernel<F, false, TeValues::compare, false, true>,
                                             &block_kernel<F, false, TeValues::compare, true, false>,
                                             &block_kernel<F, false, TeValues::compare, true, true>};
  return r == TeValues::none ? none[k] : r == TeValues::store ? store[k] : compare[k];
}
BlockKernel pick_kernel(ScaleConvention c, bool general, TeValues r, bool count, bool flush) {
  switch (c) {
    case ScaleConvention::te: return pick_kernel_for<ScaleConvention::te>(general, r, count, flush);
    case ScaleConvention::vllm: return pick_kernel_for<ScaleConvention::vllm>(general, r, count, flush);
    case ScaleConvention::deepgemm:
      return pick_kernel_for<ScaleConvention::deepgemm>(general, r, count, flush);
    case ScaleConvention::nemo_refit:
      return pick_kernel_for<ScaleConvention::nemo_refit>(general, r, count, flush);
  }
  return pick_kernel_for<ScaleConvention::te>(general, r, count, flush);
}

// inspect_quantize's lanes: the fast path's formula where it applies (every lane finite with
// |v| <= 464, finite scale), the general one elsewhere, so the tests check both.
template <ScaleConvention C>
void quantize_elements(const float* x, std::size_t n, const BlockScale& s, uint8_t* codes, float* deq) {
  const bool finite_scale = std::isfinite(s.scale) && std::isfinite(s.scale_inv);
  for (std::size_t i = 0; i < n; i += kLanes) {
    const FloatLanes xv = load_lanes(x + i);
    FloatLanes v;
    BitLanes val;
    quantize_lanes<C, true>(xv, s, v, val);
    bool fast = finite_scale;
    for (int j = 0; j < kLanes; ++j) fast = fast && std::fabs(v[j]) <= kClipThreshold && std::isfinite(xv[j]);
    if (fast) quantize_lanes<C, false>(xv, s, v, val);
    const FloatLanes d = from_bits(val) * s.scale_inv;
    for (int j = 0; j < kLanes; ++j) codes[i + static_cast<std::size_t>(j)] = fp8_code_of(val[j]);
    std::memcpy(deq + i, &d, sizeof d);
  }
}

// Do two conventions quantize a block identically (the same v, code and deq for every element),
// given that both take the fast path on it (finite elements, |v| <= 464 everywhere, where the
// conventions' different saturation handling — satfinite, clamp, non-saturating cast — all give
// the plain rounding)? Exactly when their scale_inv (the dequantization multiplier) is the same
// float and v is the same function of x: the same multiplier (te, deepgemm, nemo-refit:
// fl(x * scale)), the same divisor (vllm: fl(x / scale_inv)), or a multiplier 2^-k against a
// divisor 2^k, where x * 2^-k and x / 2^k are the same real number and round alike. Compared on
// the bits at run time, block by block.
bool same_block(const BlockScale& a, bool a_mul, const BlockScale& b, bool b_mul) {
  const auto u = [](float f) { return std::bit_cast<uint32_t>(f); };
  if (u(a.scale_inv) != u(b.scale_inv)) return false;
  if (a_mul && b_mul) return u(a.scale) == u(b.scale);
  if (!a_mul && !b_mul) return true;
  const uint32_t m = u(a_mul ? a.scale : b.scale), d = u(a_mul ? b.scale_inv : a.scale_inv);
  const auto pow2_normal = [](uint32_t x) {
    return (x & 0x807FFFFFu) == 0u && (x >> 23) != 0u && (x >> 23) != 0xFFu;
  };
  return pow2_normal(m) && pow2_normal(d) && (m >> 23) + (d >> 23) == 254u;  // 2^(em-127) * 2^(ed-127) = 1
}

// Converts n elements of `dtype` to float.
inline void load_as_float(const uint8_t* p, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::fp32: std::memcpy(out, p, 4 * n); break;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
      }
      break;
    case DType::fp16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = num::fp16_bits_to_float(b);
      }
      break;
    case DType::e4m3:  // codes without their block scales: inspect_checkpoint dequantizes first
      RLP_THROW("inspect_matrix: F8_E4M3 data must be dequantized before (TensorView::to_float)");
  }
}

// A matrix cut into block x block tiles (edge tiles partial); a tile is held with its row width
// padded to a multiple of kLanes.
struct Geometry {
  int64_t rows, cols;
  int block, block_rows, block_cols, padded_cols;
  size_t block_elems() const { return static_cast<size_t>(block) * static_cast<size_t>(padded_cols); }
};

double snr_db(double sx2, double se2) {
  if (se2 == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sx2 / se2);
}

}  // namespace

void inspect_quantize(const float* x, std::size_t n, ScaleConvention c, const BlockScale& s, uint8_t* codes,
                      float* deq) {
  RLP_CHECK(n % kLanes == 0, "inspect_quantize: n = {} must be a multiple of {}", n, kLanes);
  // Indexed by the enum's value (te, vllm, deepgemm, nemo_refit: numerics/scaling.hpp).
  using QuantizeElements = void (*)(const float*, std::size_t, const BlockScale&, uint8_t*, float*);
  static constexpr QuantizeElements kByConvention[] = {
      &quantize_elements<ScaleConvention::te>, &quantize_elements<ScaleConvention::vllm>,
      &quantize_elements<ScaleConvention::deepgemm>, &quantize_elements<ScaleConvention::nemo_refit>};
  const auto i = static_cast<std::size_t>(c);
  RLP_CHECK(i < std::size(kByConvention), "inspect_quantize: unknown scale convention {}", i);
  kByConvention[i](x, n, s, codes, deq);
}

std::vector<QuantStats> inspect_matrix(const uint8_t* data, DType dtype, int64_t rows, int64_t cols,
                                       int block, const std::vector<ScaleConvention>& conventions,
                                       double* amax_min, double* amax_median, double* amax_max) {
  RLP_CHECK(rows > 0 && cols > 0, "inspect: empty matrix {}x{}", rows, cols);
  RLP_CHECK(block > 0, "inspect: block size {} must be positive", block);
  RLP_CHECK(data != nullptr, "inspect: null data");
  const size_t esize = dtype_size(dtype);
  Geometry g{rows,
             cols,
             block,
             static_cast<int>((rows + block - 1) / block),
             static_cast<int>((cols + block - 1) / block),
             (block + kLanes - 1) / kLanes * kLanes};
  const size_t nblocks = static_cast<size_t>(g.block_rows) * static_cast<size_t>(g.block_cols);
  const size_t K = conventions.size();
  const bool have_te = !conventions.empty() && conventions[0] == ScaleConvention::te;

  // The last element's |value|: NeMo RL pads partial edge blocks with it (see quantize.hpp).
  float last = 0.0f;
  load_as_float(data + (static_cast<size_t>(rows) * static_cast<size_t>(cols) - 1) * esize, dtype, 1, &last);

  std::vector<double> block_amax(nblocks, 0.0);
  // Per block row: the element-only sums (shared by every convention and mode), and per mode and
  // convention the sums and counts.
  struct RowCommon {
    DoubleLanes16 sx2 = {};
    int64_t nonfinite = 0;
  };
  std::vector<RowCommon> common(static_cast<size_t>(g.block_rows));
  std::vector<ModeSums> row_sums(static_cast<size_t>(g.block_rows) * 2 * K);

  // One pass over the tensor for every convention and mode: each block is widened to fp32 once,
  // its amax, Σx² and non-finite count taken once, then each convention x mode runs its kernel on
  // the block while it is in cache. Conventions that quantize the block identically share one
  // kernel run (see `same_block` below).
  parallel_for(static_cast<size_t>(g.block_rows), 1, [&](size_t b0, size_t b1) {
    std::vector<float> buf(g.block_elems(), 0.0f);
    std::vector<uint32_t> te_values(g.block_elems());
    std::vector<BlockScale> scales(K);
    std::vector<float> amax_c(K);
    std::vector<char> fast(K), count(K), flush(K), multiplies(K);
    std::vector<size_t> runs_as(K), sum_owner_before(K);
    std::vector<DoubleLanes16> sum_before(K);
    std::vector<BlockCounts> counts(K);
    std::vector<ModeSums> sums(2 * K);
    std::vector<size_t> sum_owners(2 * K);
    for (size_t br = b0; br < b1; ++br) {
      const int64_t r0 = static_cast<int64_t>(br) * block;
      const int nr = static_cast<int>(std::min<int64_t>(rows - r0, block));
      const int n = nr * g.padded_cols;  // the block's padded elements, contiguous in buf
      // The accumulators of the block row start at +0 everywhere: equal, so all share te's (index 0).
      std::fill(sums.begin(), sums.end(), ModeSums{});
      std::fill(sum_owners.begin(), sum_owners.end(), size_t{0});
      {
        // The block row's bytes are one contiguous range: touch them once in order first (a stream
        // the hardware prefetcher follows at full speed), so the blocks' short strided row runs
        // below find them in cache (measured: ~20% less time than loading the blocks cold; software
        // prefetch of the next block did not help).
        const uint8_t* p = data + static_cast<size_t>(r0) * static_cast<size_t>(cols) * esize;
        const size_t bytes = static_cast<size_t>(nr) * static_cast<size_t>(cols) * esize;
        uint32_t sink = 0;
        for (size_t off = 0; off < bytes; off += 64) sink += p[off];
        asm volatile("" : : "r"(sink));
      }
      for (int bc = 0; bc < g.block_cols; ++bc) {
        const int64_t c0 = static_cast<int64_t>(bc) * block;
        const int nc = static_cast<int>(std::min<int64_t>(cols - c0, block));
        // Load the block (padding columns stay zero: the buffer is reused only for same-width
        // blocks, and a narrower edge block is the last of its row of blocks).
        if (nc < g.padded_cols)
          for (int r = 0; r < nr; ++r)
            std::fill(buf.begin() + static_cast<std::ptrdiff_t>(r) * g.padded_cols + nc,
                      buf.begin() + static_cast<std::ptrdiff_t>(r + 1) * g.padded_cols, 0.0f);
        // Widened row by row; while a row is in L1: the largest |x| bits, the smallest nonzero |x|
        // and Σx² (float64, lane j of the padded block: elements j, j+16, ... in order; padding zeros
        // add +0). A block with inf or NaN is redone below with those elements masked.
        BitLanes allv = {}, mnzv = BitLanes{} + 0xFFFFFFFFu;
        const DoubleLanes8 sx2_lo0 = common[br].sx2.lo, sx2_hi0 = common[br].sx2.hi;
        DoubleLanes8 sx2_lo = sx2_lo0, sx2_hi = sx2_hi0;
        for (int r = 0; r < nr; ++r) {
          float* row = buf.data() + static_cast<size_t>(r) * static_cast<size_t>(g.padded_cols);
          load_as_float(
              data +
                  (static_cast<size_t>(r0 + r) * static_cast<size_t>(cols) + static_cast<size_t>(c0)) * esize,
              dtype, static_cast<size_t>(nc), row);
          for (int i = 0; i < g.padded_cols; i += kLanes) {
            const FloatLanes xv = load_lanes(row + i);
            const BitLanes a = to_bits(xv) & 0x7FFFFFFFu;
            allv = a > allv ? a : allv;
            const BitLanes nz = a == 0u ? BitLanes{} + 0xFFFFFFFFu : a;
            mnzv = nz < mnzv ? nz : mnzv;
            const DoubleLanes8 xl = widen_lo(xv), xh = widen_hi(xv);
            sx2_lo += xl * xl;
            sx2_hi += xh * xh;
          }
        }
        uint32_t all = 0, mnz = 0xFFFFFFFFu;
        for (int j = 0; j < kLanes; ++j) {
          all = std::max(all, allv[j]);
          mnz = std::min(mnz, mnzv[j]);
        }
        uint32_t m = all;  // amax as quantize_blocks reduces it: NaN-ignoring max of |x| on the bits
        if (all >= 0x7F800000u) {
          // inf or NaN: Σx² without them, their count, and the amax without NaN.
          BitLanes mv = {};
          IntLanes nonfin = {};
          sx2_lo = sx2_lo0;
          sx2_hi = sx2_hi0;
          for (int i = 0; i < n; i += kLanes) {
            const FloatLanes xv = load_lanes(buf.data() + i);
            const BitLanes a = to_bits(xv) & 0x7FFFFFFFu;
            const BitLanes keep = to_unsigned(a <= 0x7F800000u);  // all ones where a is not NaN
            const BitLanes ak = a & keep;
            mv = ak > mv ? ak : mv;
            const IntLanes fin = a < 0x7F800000u;
            const FloatLanes xm = fin ? xv : FloatLanes{};  // non-finite elements count as +0
            const DoubleLanes8 xl = widen_lo(xm), xh = widen_hi(xm);
            sx2_lo += xl * xl;
            sx2_hi += xh * xh;
            nonfin += fin + 1;  // fin is -1 (finite) or 0
          }
          m = 0;
          for (int j = 0; j < kLanes; ++j) {
            m = std::max(m, mv[j]);
            common[br].nonfinite += nonfin[j];
          }
        }
        common[br].sx2.lo = sx2_lo;
        common[br].sx2.hi = sx2_hi;
        const bool all_finite = all < 0x7F800000u;
        const size_t bidx = br * static_cast<size_t>(g.block_cols) + static_cast<size_t>(bc);
        block_amax[bidx] = static_cast<double>(std::bit_cast<float>(m));
        const bool partial_block = nr < block || nc < block;
        for (size_t ci = 0; ci < K; ++ci) {
          const ScaleConvention conv = conventions[ci];
          amax_c[ci] = num::block_amax(m, all > 0x7F800000u, partial_block, last, conv);
          multiplies[ci] = conv != ScaleConvention::vllm;
        }
        const float xmax = std::bit_cast<float>(m);    // the block's largest |x| (finite blocks)
        const float xmin = std::bit_cast<float>(mnz);  // its smallest nonzero |x|
        for (int mode = 0; mode < 2; ++mode) {
          // Each convention's scale, and what its kernel needs to do on this block.
          for (size_t ci = 0; ci < K; ++ci) {
            ScaleOptions o;
            o.convention = conventions[ci];
            o.pow2 = mode == 1;
            const BlockScale s = num::compute_block_scale(amax_c[ci], o);
            scales[ci] = s;
            // v is monotonic in |x|: the block's extreme |v| are those of its extreme |x|.
            const float vmax = multiplies[ci] ? xmax * s.scale : xmax / s.scale_inv;
            const float vmin = multiplies[ci] ? xmin * s.scale : xmin / s.scale_inv;
            fast[ci] = all_finite && vmax <= kClipThreshold && std::isfinite(s.scale_inv);
            count[ci] = !(vmax <= kSatThreshold);
            flush[ci] = mnz != 0xFFFFFFFFu && !(vmin > 0x1p-10f);
          }
          // Conventions that quantize this block identically share the first one's kernel run.
          for (size_t ci = 0; ci < K; ++ci) {
            runs_as[ci] = ci;
            if (!fast[ci]) continue;
            for (size_t p = 0; p < ci; ++p)
              if (runs_as[p] == p && fast[p] &&
                  same_block(scales[p], multiplies[p] != 0, scales[ci], multiplies[ci] != 0)) {
                runs_as[ci] = p;
                break;
              }
          }
          bool need_ref = false;
          for (size_t ci = 1; ci < K; ++ci) need_ref = need_ref || (have_te && runs_as[ci] == ci);
          ModeSums* a = sums.data() + static_cast<size_t>(mode) * K;
          size_t* sum_owner = sum_owners.data() + static_cast<size_t>(mode) * K;
          // sum_owner[k]: the convention whose accumulator holds k's value (Σ(x - deq)² over the row's
          // blocks so far, bit for bit): while conventions agree block after block, one sum serves them.
          for (size_t k = 0; k < K; ++k) {
            sum_owner_before[k] = sum_owner[k];
            if (sum_owner[k] == k) sum_before[k] = a[k].se2;
          }
          for (size_t ci = 0; ci < K; ++ci) {
            const size_t p = runs_as[ci];
            if (p == ci || sum_owner_before[ci] != sum_owner_before[p]) {
              // Own kernel run (also when it quantizes as an earlier one whose sum it does not
              // share: the same errors, added to its own sum in order).
              if (sum_owner_before[ci] != ci) a[ci].se2 = sum_before[sum_owner_before[ci]];
              sum_owner[ci] = ci;
              const TeValues r = !have_te || p != ci ? TeValues::none
                                 : ci == 0           ? (need_ref ? TeValues::store : TeValues::none)
                                                     : TeValues::compare;
              BlockCounts own;
              pick_kernel(conventions[ci], !fast[ci], r, count[ci] != 0, flush[ci] != 0)(
                  buf.data(), n, scales[ci], te_values.data(), a[ci].se2, own);
              counts[ci] = p == ci ? own : counts[p];
            } else {
              counts[ci] = counts[p];
              sum_owner[ci] = p;  // p ran its kernel on this block: it holds its own sum
            }
            a[ci].sat += counts[ci].sat;
            a[ci].clip += counts[ci].clip;
            a[ci].flush += counts[ci].flush;
            a[ci].blocks_differ += counts[ci].differ ? 1 : 0;
          }
        }
      }
      for (int mode = 0; mode < 2; ++mode)
        for (size_t ci = 0; ci < K; ++ci) {
          const size_t k = static_cast<size_t>(mode) * K;
          ModeSums& out = row_sums[(2 * br + static_cast<size_t>(mode)) * K + ci];
          out = sums[k + ci];
          out.se2 = sums[k + sum_owners[k + ci]].se2;
        }
    }
  });

  std::vector<QuantStats> out;
  for (size_t ci = 0; ci < K; ++ci) {
    for (int mode = 0; mode < 2; ++mode) {
      QuantStats q;
      q.convention = conventions[ci];
      q.pow2 = mode == 1;
      for (int br = 0; br < g.block_rows; ++br) {
        const ModeSums& sums = row_sums[(2 * static_cast<size_t>(br) + static_cast<size_t>(mode)) * K + ci];
        const RowCommon& rc = common[static_cast<size_t>(br)];
        for (int j = 0; j < kLanes; ++j) {
          q.sum_sq_x += rc.sx2[j];
          q.sum_sq_err += sums.se2[j];
        }
        q.saturated += sums.sat;
        q.clipped += sums.clip;
        q.flushed += sums.flush;
        q.nonfinite += rc.nonfinite;
        q.blocks_differ += sums.blocks_differ;
      }
      q.snr_db = snr_db(q.sum_sq_x, q.sum_sq_err);
      q.rel_fro_err = q.sum_sq_x == 0.0
                          ? (q.sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity())
                          : std::sqrt(q.sum_sq_err / q.sum_sq_x);
      q.blocks_differ_frac = static_cast<double>(q.blocks_differ) / static_cast<double>(nblocks);
      out.push_back(q);
    }
  }

  if (amax_min || amax_median || amax_max) {
    std::sort(block_amax.begin(), block_amax.end());
    if (amax_min) *amax_min = block_amax.front();
    if (amax_median) *amax_median = percentile_nearest_rank(block_amax, 500);
    if (amax_max) *amax_max = block_amax.back();
  }
  return out;
}

std::vector<QuantStats> inspect_matrix(const float* x, int64_t rows, int64_t cols, int block,
                                       const std::vector<ScaleConvention>& conventions) {
  return inspect_matrix(reinterpret_cast<const uint8_t*>(x), DType::fp32, rows, cols, block, conventions);
}

}  // namespace rlp
