#include "rlparity/inspect/inspect.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "io/h5_util.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
#include "rlparity/util/strings.hpp"
#include "rlparity/util/version.hpp"

// The vector helpers below are internal and always inlined: the ABI GCC warns about (passing wide
// vectors by value when the target lacks AVX / AVX-512) never applies to them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace rlp {
namespace {

using num::BlockScale;
using num::ScaleConvention;
using num::ScaleOptions;
using std::size_t;

constexpr int kLanes = 16;
constexpr float kSatThreshold = 448.0f;   // e4m3 max
constexpr float kClipThreshold = 464.0f;  // midpoint 448..480: beyond it RNE would leave the range

// ---- the vectorized per-element kernel ---------------------------------------------------------
// GCC/Clang vector extensions: 16 lanes of IEEE float/uint32/double arithmetic, lowered to AVX-512,
// AVX2 or SSE2 by the target (each lane does exactly the scalar operation, so results do not depend
// on -march). Lane j of a block accumulates elements j, j+16, ... of the block's padded rows, in
// order: the sums are fixed by the data, not by the thread count or the instruction set.
using FV = float __attribute__((vector_size(64)));
using UV = uint32_t __attribute__((vector_size(64)));
using IV = int32_t __attribute__((vector_size(64)));
using D8 = double __attribute__((vector_size(64)));

#define RLP_VINLINE inline __attribute__((always_inline))

RLP_VINLINE FV loadv(const float* p) {
  FV v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
RLP_VINLINE FV splat(float v) { return FV{} + v; }
// Same-size vector casts reinterpret the bits (GCC/Clang vector extension semantics).
RLP_VINLINE UV bits(FV v) { return (UV)v; }
RLP_VINLINE FV from_bits(UV v) { return (FV)v; }
RLP_VINLINE UV as_u(IV v) { return (UV)v; }

// 16 float64 lanes as two 8-lane halves (a 128-byte vector type would live in memory: its sums
// would go through a store and a load every iteration).
struct DV {
  D8 lo = {}, hi = {};
  double operator[](int j) const { return j < 8 ? lo[j] : hi[j - 8]; }
};
// Exact float -> double widening of lanes 0-7 and 8-15. With AVX-512 one vcvtps2pd each (GCC
// splits the generic form into 128-bit pieces); the conversion is exact either way.
#if defined(__AVX512F__)
// (maskz with an all-ones mask: the unmasked intrinsic's undefined pass-through operand trips
// -Wmaybe-uninitialized in GCC's header.)
RLP_VINLINE D8 widen_lo(FV v) {
  return (D8)_mm512_maskz_cvtps_pd((__mmask8)0xFF,
                                   (__m256)__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7));
}
RLP_VINLINE D8 widen_hi(FV v) {
  return (D8)_mm512_maskz_cvtps_pd((__mmask8)0xFF,
                                   (__m256)__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}
#else
RLP_VINLINE D8 widen_lo(FV v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), D8);
}
RLP_VINLINE D8 widen_hi(FV v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), D8);
}
#endif

// e4m3 rounding of the lanes, as the float value the fp8 code decodes to (num::fp8_to_float of
// num::fp8_encode_fast_impl<3, 7, 0x7E, 0x7F>), with the sign of q. For |q| in the e4m3 range the
// FPU's own round-to-nearest-even does the rounding: adding c = 2^(e + 20), e = max(exponent of
// |q|, -6), puts |q| in c's binade, whose ulp 2^(e - 3) is the e4m3 step at |q| (2^-9, the
// subnormal unit, below 2^-6), and (|q| + c) - c is exact. That is the integer RNE on the float
// bits of the normal range and the magic-number add of the subnormal range in one formula (a
// rounding up to the next binade lands on its power of two). General false: the caller guarantees
// |q| <= 464 and not NaN (then the value never overflows: 464 is the tie between 448 and 480 and
// goes to 448). General true: |q| > 464 (inf included) gives 448 (Sat) or NaN with q's sign
// (code sign | 0x7F); a NaN q gives the canonical NaN (code 0x7F) when CheckNaN.
// The code itself is not needed by the block kernel: decode is one-to-one on codes, so two codes
// differ exactly when the values' bits differ (fp8_code_of recovers it for inspect_quantize).
template <bool General, bool Sat, bool CheckNaN>
RLP_VINLINE UV round_e4m3(FV q) {
  constexpr uint32_t kMinNormBits = 121u << 23;  // 2^-6, the smallest e4m3 normal
  const UV u = bits(q);
  const UV a = u & 0x7FFFFFFFu;
  UV eb = a & 0x7F800000u;
  eb = eb > kMinNormBits ? eb : UV{} + kMinNormBits;
  const FV c = from_bits(eb + (20u << 23));
  UV mag = bits((from_bits(a) + c) - c);
  if constexpr (General) {
    const IV over = a > 0x43E80000u;  // |q| > 464, inf and NaN included
    mag = over ? UV{} + (Sat ? 0x43E00000u /* 448 */ : 0x7FC00000u) : mag;
  }
  UV val = mag | (u & 0x80000000u);
  if constexpr (General && CheckNaN) {
    const IV nan = a > 0x7F800000u;
    val = nan ? UV{} + 0x7FC00000u : val;
  }
  return val;
}

// One convention's scaled value v (what saturation is judged on) and the e4m3 value's bits of 16
// elements; the dequantized value is from_bits(val) * scale_inv (one fp32 multiply, as
// num::dequantize). General false: the caller guarantees a finite scale and |v| <= 464 for every
// lane (then the clamps and the overflow and NaN handling are the identity and are left out).
template <ScaleConvention C, bool General = true>
RLP_VINLINE void quantize_lanes(FV x, const BlockScale& s, FV& v, UV& val) {
  constexpr float m = kSatThreshold;
  if constexpr (C == ScaleConvention::te) {
    v = x * s.scale;  // satfinite(x * scale)
    val = round_e4m3<General, true, true>(v);
  } else if constexpr (C == ScaleConvention::vllm) {
    v = x / s.scale_inv;  // fminf(fmaxf(x / y_s, -448), 448): NaN -> -448
    FV q = v;
    if constexpr (General) {
      q = v > -m ? v : splat(-m);
      q = q < m ? q : splat(m);
    }
    val = round_e4m3<General, false, false>(q);  // q is never NaN
  } else if constexpr (C == ScaleConvention::deepgemm) {
    v = x * s.scale;  // non-saturating cast
    val = round_e4m3<General, false, true>(v);
  } else {
    v = x * s.scale;  // torch.clamp(w * scale, -448, 448): NaN propagates
    FV q = v;
    if constexpr (General) {
      q = v > m ? splat(m) : v;
      q = q < -m ? splat(-m) : q;
    }
    val = round_e4m3<General, false, true>(q);
  }
}

// The fp8 e4m3 code whose decoded value has the bits `val` (the inverse of num::fp8_to_float on the
// values round_e4m3 returns).
inline uint8_t fp8_code_of(uint32_t val) {
  const uint32_t sign = (val >> 24) & 0x80u;
  const uint32_t a = val & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (a >= (121u << 23)) return static_cast<uint8_t>(sign | ((a >> 20) - (120u << 3)));
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::bit_cast<float>(a) * 512.0f));  // k * 2^-9
}

// Accumulators of one convention x scale mode over one block row.
struct ModeAcc {
  DV se2 = {};
  int64_t sat = 0, clip = 0, flush = 0, blocks_differ = 0;
};
// One block's counts (added to a ModeAcc, and to those of the conventions that share the block).
struct BlockCounts {
  int64_t sat = 0, clip = 0, flush = 0;
  bool differ = false;
};

// What a block kernel does with TE's e4m3 values of the block (`ref`): nothing, store them, or
// compare with them (a differing value marks the block in BlockCounts::differ).
enum class Ref { none, store, compare };

// n elements (a multiple of kLanes; padding zeros add nothing) of one block in convention C: the
// squared errors into se2 (lane j accumulates elements j, j+16, ... in order), the counts into `bc`.
// General: nonfinite elements masked out of the sums and counts, the error x - deq taken in float64,
// any scale. Otherwise (the fast path: a block without NaN/inf whose |v| <= 464 everywhere, finite
// scale) the error is taken in float: x - deq is then exact (deq = 0, or deq within a factor 2 of x,
// Sterbenz), and there is nothing to clip.
// Count false: no |v| exceeds 448 (the block amax's own v does not, and rounding is monotonic).
// Flush false: no nonzero element flushes (the smallest nonzero |x|'s |v| exceeds 2^-10, the tie
// between 0 and the smallest e4m3 subnormal 2^-9).
template <ScaleConvention C, bool General, Ref R, bool Count, bool Flush>
void block_kernel(const float* __restrict x, int n, const BlockScale& bs, uint32_t* __restrict ref,
                  DV& se2_io, BlockCounts& bc) {
  const BlockScale s = bs;
  D8 se2_lo = se2_io.lo, se2_hi = se2_io.hi;
  IV sat = {}, clip = {}, flush = {};
  UV differ = {};
  for (int i = 0; i < n; i += kLanes) {
    const FV xv = loadv(x + i);
    FV v;
    UV val;
    quantize_lanes<C, General>(xv, s, v, val);
    if constexpr (R == Ref::compare) {
      UV r;
      std::memcpy(&r, ref + i, sizeof r);
      differ |= val ^ r;
    } else if constexpr (R == Ref::store) {
      std::memcpy(ref + i, &val, sizeof val);
    }
    const FV deq = from_bits(val) * s.scale_inv;
    const UV ax = bits(xv) & 0x7FFFFFFFu;
    IV fin = IV{} - 1;
    D8 e_lo, e_hi;
    if constexpr (General) {
      // x - deq in float64; non-finite elements masked to 0 - 0 = +0 (before widening: the same).
      fin = ax < 0x7F800000u;
      const FV xm = fin ? xv : FV{}, dm = fin ? deq : FV{};
      e_lo = widen_lo(xm) - widen_lo(dm);
      e_hi = widen_hi(xm) - widen_hi(dm);
    } else {
      const FV e = xv - deq;
      e_lo = widen_lo(e);
      e_hi = widen_hi(e);
    }
    se2_lo += e_lo * e_lo;
    se2_hi += e_hi * e_hi;
    // Comparisons give -1 per true lane: subtracting counts.
    if constexpr (Count) {
      const FV av = from_bits(bits(v) & 0x7FFFFFFFu);
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
  if constexpr (R == Ref::compare) {
    uint32_t any = 0;
    for (int j = 0; j < kLanes; ++j) any |= differ[j];
    bc.differ = any != 0;
  }
}

using BlockKernel = void (*)(const float*, int, const BlockScale&, uint32_t*, DV&, BlockCounts&);
template <ScaleConvention C>
BlockKernel pick_kernel_c(bool general, Ref r, bool count, bool flush) {
  if (general) {
    switch (r) {
      case Ref::none:
        return &block_kernel<C, true, Ref::none, true, true>;
      case Ref::store:
        return &block_kernel<C, true, Ref::store, true, true>;
      case Ref::compare:
        return &block_kernel<C, true, Ref::compare, true, true>;
    }
  }
  const int k = (count ? 2 : 0) + (flush ? 1 : 0);
  // The fast path's arithmetic: v = x * scale for te, deepgemm and nemo-refit alike.
  constexpr ScaleConvention F = C == ScaleConvention::vllm ? C : ScaleConvention::te;
  static constexpr BlockKernel none[4] = {
      &block_kernel<F, false, Ref::none, false, false>, &block_kernel<F, false, Ref::none, false, true>,
      &block_kernel<F, false, Ref::none, true, false>, &block_kernel<F, false, Ref::none, true, true>};
  static constexpr BlockKernel store[4] = {
      &block_kernel<F, false, Ref::store, false, false>, &block_kernel<F, false, Ref::store, false, true>,
      &block_kernel<F, false, Ref::store, true, false>, &block_kernel<F, false, Ref::store, true, true>};
  static constexpr BlockKernel compare[4] = {
      &block_kernel<F, false, Ref::compare, false, false>, &block_kernel<F, false, Ref::compare, false, true>,
      &block_kernel<F, false, Ref::compare, true, false>, &block_kernel<F, false, Ref::compare, true, true>};
  return r == Ref::none ? none[k] : r == Ref::store ? store[k] : compare[k];
}
BlockKernel pick_kernel(ScaleConvention c, bool general, Ref r, bool count, bool flush) {
  switch (c) {
    case ScaleConvention::te:
      return pick_kernel_c<ScaleConvention::te>(general, r, count, flush);
    case ScaleConvention::vllm:
      return pick_kernel_c<ScaleConvention::vllm>(general, r, count, flush);
    case ScaleConvention::deepgemm:
      return pick_kernel_c<ScaleConvention::deepgemm>(general, r, count, flush);
    case ScaleConvention::nemo_refit:
      return pick_kernel_c<ScaleConvention::nemo_refit>(general, r, count, flush);
  }
  return pick_kernel_c<ScaleConvention::te>(general, r, count, flush);
}

// inspect_quantize's lanes: the fast path's formula where it applies (every lane finite with
// |v| <= 464, finite scale), the general one elsewhere, so the tests check both.
template <ScaleConvention C>
void quantize_elements(const float* x, std::size_t n, const BlockScale& s, uint8_t* codes, float* deq) {
  const bool finite_scale = std::isfinite(s.scale) && std::isfinite(s.scale_inv);
  for (std::size_t i = 0; i < n; i += kLanes) {
    const FV xv = loadv(x + i);
    FV v;
    UV val;
    quantize_lanes<C, true>(xv, s, v, val);
    bool fast = finite_scale;
    for (int j = 0; j < kLanes; ++j) fast = fast && std::fabs(v[j]) <= kClipThreshold && std::isfinite(xv[j]);
    if (fast) quantize_lanes<C, false>(xv, s, v, val);
    const FV d = from_bits(val) * s.scale_inv;
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
inline void load_elems(const uint8_t* p, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(out, p, 4 * n);
      break;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
      }
      break;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = num::fp16_bits_to_float(b);
      }
      break;
  }
}

struct Geometry {
  int64_t rows, cols;
  int block, rb, cb, bcp;  // bcp: block columns padded to a multiple of kLanes
  size_t block_elems() const { return static_cast<size_t>(block) * static_cast<size_t>(bcp); }
};

double snr_db(double sx2, double se2) {
  if (se2 == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sx2 / se2);
}

}  // namespace

const char* convention_name(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::te:
      return "te";
    case ScaleConvention::vllm:
      return "vllm";
    case ScaleConvention::deepgemm:
      return "deepgemm";
    case ScaleConvention::nemo_refit:
      return "nemo-refit";
  }
  return "?";
}

const std::vector<ScaleConvention>& inspect_conventions() {
  static const std::vector<ScaleConvention> v{ScaleConvention::te, ScaleConvention::vllm,
                                              ScaleConvention::deepgemm, ScaleConvention::nemo_refit};
  return v;
}

double TensorInspection::worst_snr_db() const {
  double w = std::numeric_limits<double>::infinity();
  for (const auto& s : stats) w = std::min(w, s.snr_db);  // NaN never wins
  return w;
}

const QuantStats& TensorInspection::find(ScaleConvention c, bool pow2) const {
  for (const auto& s : stats)
    if (s.convention == c && s.pow2 == pow2) return s;
  RLP_THROW("tensor {}: no statistics for {} {}", name, convention_name(c), pow2 ? "pow2" : "fp32");
}

void inspect_quantize(const float* x, std::size_t n, ScaleConvention c, const BlockScale& s, uint8_t* codes,
                      float* deq) {
  RLP_CHECK(n % kLanes == 0, "inspect_quantize: n = {} must be a multiple of {}", n, kLanes);
  switch (c) {
    case ScaleConvention::te:
      quantize_elements<ScaleConvention::te>(x, n, s, codes, deq);
      break;
    case ScaleConvention::vllm:
      quantize_elements<ScaleConvention::vllm>(x, n, s, codes, deq);
      break;
    case ScaleConvention::deepgemm:
      quantize_elements<ScaleConvention::deepgemm>(x, n, s, codes, deq);
      break;
    case ScaleConvention::nemo_refit:
      quantize_elements<ScaleConvention::nemo_refit>(x, n, s, codes, deq);
      break;
  }
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
  const size_t nblocks = static_cast<size_t>(g.rb) * static_cast<size_t>(g.cb);
  const size_t K = conventions.size();
  const bool have_te = !conventions.empty() && conventions[0] == ScaleConvention::te;

  // The last element's |value|: NeMo RL pads partial edge blocks with it (see quantize.hpp).
  float last = 0.0f;
  load_elems(data + (static_cast<size_t>(rows) * static_cast<size_t>(cols) - 1) * esize, dtype, 1, &last);

  std::vector<double> block_amax(nblocks, 0.0);
  // Per block row: the element-only sums (shared by every convention and mode), and per mode and
  // convention the sums and counts.
  struct RowCommon {
    DV sx2 = {};
    int64_t nonfinite = 0;
  };
  std::vector<RowCommon> common(static_cast<size_t>(g.rb));
  std::vector<ModeAcc> partial(static_cast<size_t>(g.rb) * 2 * K);

  // One pass over the tensor for every convention and mode: each block is widened to fp32 once,
  // its amax, Σx² and non-finite count taken once, then each convention x mode runs its kernel on
  // the block while it is in cache. Conventions that quantize the block identically share one
  // kernel run (see `same_block` below).
  parallel_for(static_cast<size_t>(g.rb), 1, [&](size_t b0, size_t b1) {
    std::vector<float> buf(g.block_elems(), 0.0f);
    std::vector<uint32_t> ref(g.block_elems());
    std::vector<BlockScale> sc(K);
    std::vector<float> amax_c(K);
    std::vector<char> fast(K), count(K), flush(K), mul(K);
    std::vector<size_t> src(K), share(K), rep_pre(K);
    std::vector<DV> pre(K);
    std::vector<BlockCounts> bcnt(K);
    std::vector<ModeAcc> acc(2 * K);
    std::vector<size_t> shares(2 * K);
    for (size_t br = b0; br < b1; ++br) {
      const int64_t r0 = static_cast<int64_t>(br) * block;
      const int nr = static_cast<int>(std::min<int64_t>(rows - r0, block));
      const int n = nr * g.bcp;  // the block's padded elements, contiguous in buf
      // The accumulators of the block row start at +0 everywhere: equal, so all share te's (index 0).
      std::fill(acc.begin(), acc.end(), ModeAcc{});
      std::fill(shares.begin(), shares.end(), size_t{0});
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
      for (int bc = 0; bc < g.cb; ++bc) {
        const int64_t c0 = static_cast<int64_t>(bc) * block;
        const int nc = static_cast<int>(std::min<int64_t>(cols - c0, block));
        // Load the block (padding columns stay zero: the buffer is reused only for same-width
        // blocks, and a narrower edge block is the last of its row of blocks).
        if (nc < g.bcp)
          for (int r = 0; r < nr; ++r)
            std::fill(buf.begin() + static_cast<std::ptrdiff_t>(r) * g.bcp + nc,
                      buf.begin() + static_cast<std::ptrdiff_t>(r + 1) * g.bcp, 0.0f);
        // Widened row by row; while a row is in L1: the largest |x| bits, the smallest nonzero |x|
        // and Σx² (float64, lane j of the padded block: elements j, j+16, ... in order; padding zeros
        // add +0). A block with inf or NaN is redone below with those elements masked.
        UV allv = {}, mnzv = UV{} + 0xFFFFFFFFu;
        const D8 sx2_lo0 = common[br].sx2.lo, sx2_hi0 = common[br].sx2.hi;
        D8 sx2_lo = sx2_lo0, sx2_hi = sx2_hi0;
        for (int r = 0; r < nr; ++r) {
          float* row = buf.data() + static_cast<size_t>(r) * static_cast<size_t>(g.bcp);
          load_elems(
              data +
                  (static_cast<size_t>(r0 + r) * static_cast<size_t>(cols) + static_cast<size_t>(c0)) * esize,
              dtype, static_cast<size_t>(nc), row);
          for (int i = 0; i < g.bcp; i += kLanes) {
            const FV xv = loadv(row + i);
            const UV a = bits(xv) & 0x7FFFFFFFu;
            allv = a > allv ? a : allv;
            const UV nz = a == 0u ? UV{} + 0xFFFFFFFFu : a;
            mnzv = nz < mnzv ? nz : mnzv;
            const D8 xl = widen_lo(xv), xh = widen_hi(xv);
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
          UV mv = {};
          IV nonfin = {};
          sx2_lo = sx2_lo0;
          sx2_hi = sx2_hi0;
          for (int i = 0; i < n; i += kLanes) {
            const FV xv = loadv(buf.data() + i);
            const UV a = bits(xv) & 0x7FFFFFFFu;
            const UV keep = as_u(a <= 0x7F800000u);  // all ones where a is not NaN
            const UV ak = a & keep;
            mv = ak > mv ? ak : mv;
            const IV fin = a < 0x7F800000u;
            const FV xm = fin ? xv : FV{};  // non-finite elements count as +0
            const D8 xl = widen_lo(xm), xh = widen_hi(xm);
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
        const size_t bidx = br * static_cast<size_t>(g.cb) + static_cast<size_t>(bc);
        block_amax[bidx] = static_cast<double>(std::bit_cast<float>(m));
        const bool partial_block = nr < block || nc < block;
        for (size_t ci = 0; ci < K; ++ci) {
          const ScaleConvention conv = conventions[ci];
          uint32_t mc = m, allc = all;
          if (conv == ScaleConvention::nemo_refit && partial_block) {
            const uint32_t a = std::bit_cast<uint32_t>(last) & 0x7FFFFFFFu;
            if (a <= 0x7F800000u) mc = std::max(mc, a);
            allc = std::max(allc, a);
          }
          amax_c[ci] = num::finish_amax(std::bit_cast<float>(mc), allc > 0x7F800000u, conv);
          mul[ci] = conv != ScaleConvention::vllm;
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
            sc[ci] = s;
            // v is monotonic in |x|: the block's extreme |v| are those of its extreme |x|.
            const float vmax = mul[ci] ? xmax * s.scale : xmax / s.scale_inv;
            const float vmin = mul[ci] ? xmin * s.scale : xmin / s.scale_inv;
            fast[ci] = all_finite && vmax <= kClipThreshold && std::isfinite(s.scale_inv);
            count[ci] = !(vmax <= kSatThreshold);
            flush[ci] = mnz != 0xFFFFFFFFu && !(vmin > 0x1p-10f);
          }
          // Conventions that quantize this block identically share the first one's kernel run.
          for (size_t ci = 0; ci < K; ++ci) {
            src[ci] = ci;
            if (!fast[ci]) continue;
            for (size_t p = 0; p < ci; ++p)
              if (src[p] == p && fast[p] && same_block(sc[p], mul[p] != 0, sc[ci], mul[ci] != 0)) {
                src[ci] = p;
                break;
              }
          }
          bool need_ref = false;
          for (size_t ci = 1; ci < K; ++ci) need_ref = need_ref || (have_te && src[ci] == ci);
          ModeAcc* a = acc.data() + static_cast<size_t>(mode) * K;
          size_t* sh = shares.data() + static_cast<size_t>(mode) * K;
          // sh[k]: the convention whose accumulator holds k's value (Σ(x - deq)² over the row's
          // blocks so far, bit for bit): while conventions agree block after block, one sum serves them.
          for (size_t k = 0; k < K; ++k) {
            rep_pre[k] = sh[k];
            if (sh[k] == k) pre[k] = a[k].se2;
          }
          for (size_t ci = 0; ci < K; ++ci) {
            const size_t p = src[ci];
            if (p == ci || rep_pre[ci] != rep_pre[p]) {
              // Own kernel run (also when it quantizes as an earlier one whose sum it does not
              // share: the same errors, added to its own sum in order).
              if (rep_pre[ci] != ci) a[ci].se2 = pre[rep_pre[ci]];
              sh[ci] = ci;
              const Ref r = !have_te || p != ci ? Ref::none
                            : ci == 0           ? (need_ref ? Ref::store : Ref::none)
                                                : Ref::compare;
              BlockCounts own;
              pick_kernel(conventions[ci], !fast[ci], r, count[ci] != 0, flush[ci] != 0)(
                  buf.data(), n, sc[ci], ref.data(), a[ci].se2, own);
              bcnt[ci] = p == ci ? own : bcnt[p];
            } else {
              bcnt[ci] = bcnt[p];
              sh[ci] = p;  // p ran its kernel on this block: it holds its own sum
            }
            a[ci].sat += bcnt[ci].sat;
            a[ci].clip += bcnt[ci].clip;
            a[ci].flush += bcnt[ci].flush;
            a[ci].blocks_differ += bcnt[ci].differ ? 1 : 0;
          }
        }
      }
      for (int mode = 0; mode < 2; ++mode)
        for (size_t ci = 0; ci < K; ++ci) {
          const size_t k = static_cast<size_t>(mode) * K;
          ModeAcc& out = partial[(2 * br + static_cast<size_t>(mode)) * K + ci];
          out = acc[k + ci];
          out.se2 = acc[k + shares[k + ci]].se2;
        }
    }
  });

  std::vector<QuantStats> out;
  for (size_t ci = 0; ci < K; ++ci) {
    for (int mode = 0; mode < 2; ++mode) {
      QuantStats q;
      q.convention = conventions[ci];
      q.pow2 = mode == 1;
      for (int br = 0; br < g.rb; ++br) {
        const ModeAcc& acc = partial[(2 * static_cast<size_t>(br) + static_cast<size_t>(mode)) * K + ci];
        const RowCommon& rc = common[static_cast<size_t>(br)];
        for (int j = 0; j < kLanes; ++j) {
          q.sum_sq_x += rc.sx2[j];
          q.sum_sq_err += acc.se2[j];
        }
        q.saturated += acc.sat;
        q.clipped += acc.clip;
        q.flushed += acc.flush;
        q.nonfinite += rc.nonfinite;
        q.blocks_differ += acc.blocks_differ;
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
  return inspect_matrix(reinterpret_cast<const uint8_t*>(x), DType::f32, rows, cols, block, conventions);
}

bool is_fp8_weight(const std::string& name, int* layer, std::string* proj) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  size_t p = prefix.size();
  size_t q = p;
  while (q < name.size() && name[q] >= '0' && name[q] <= '9') ++q;
  if (q == p || q >= name.size() || name[q] != '.') return false;
  const std::string rest = name.substr(q + 1);
  for (int i = 0; i < kNumProj; ++i) {
    const std::string suffix = std::string(proj_tensor_suffix(static_cast<Proj>(i))) + ".weight";
    if (rest == suffix) {
      if (layer) *layer = std::stoi(name.substr(p, q - p));
      if (proj) *proj = suffix.substr(suffix.find('.') + 1, suffix.size() - suffix.find('.') - 1 - 7);
      return true;
    }
  }
  return false;
}

InspectResult inspect_checkpoint(const Checkpoint& ckpt, const InspectOptions& options) {
  const ModelSpec& spec = ckpt.spec();
  InspectResult r;
  r.checkpoint_path = ckpt.dir();
  r.checkpoint_hash = ckpt.content_hash();
  r.model_spec = spec.to_json();
  for (int l = 0; l < spec.layers; ++l) {
    for (int p = 0; p < kNumProj; ++p) {
      const std::string name = layer_tensor_name(l, proj_tensor_suffix(static_cast<Proj>(p))) + ".weight";
      const TensorView& t = ckpt.tensor(name);
      if (t.shape.size() != 2) RLP_THROW_INPUT("tensor {} is not 2-D", name);
      TensorInspection ti;
      ti.name = name;
      is_fp8_weight(name, &ti.layer, &ti.proj);
      ti.dtype = dtype_name(t.dtype);
      ti.rows = t.shape[0];
      ti.cols = t.shape[1];
      ti.blocks =
          ((ti.rows + options.block - 1) / options.block) * ((ti.cols + options.block - 1) / options.block);
      ti.stats = inspect_matrix(t.data, t.dtype, ti.rows, ti.cols, options.block, inspect_conventions(),
                                &ti.amax_min, &ti.amax_median, &ti.amax_max);
      r.bytes_per_pass += static_cast<int64_t>(t.nbytes);
      r.tensors.push_back(std::move(ti));
    }
  }
  // Sort key: worst SNR ascending, NaN first (a NaN SNR is the worst news), then name.
  auto key_less = [](double a, double b) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    return a < b;
  };
  std::stable_sort(r.tensors.begin(), r.tensors.end(),
                   [&](const TensorInspection& a, const TensorInspection& b) {
                     const double wa = a.worst_snr_db(), wb = b.worst_snr_db();
                     if (key_less(wa, wb)) return true;
                     if (key_less(wb, wa)) return false;
                     return a.name < b.name;
                   });

  std::map<int, LayerSummary> per_layer;
  for (const auto& t : r.tensors) {  // worst first: the first tensor seen per layer is its worst
    auto [it, inserted] = per_layer.try_emplace(t.layer);
    if (inserted) {
      it->second.layer = t.layer;
      it->second.worst_snr_db = t.worst_snr_db();
      it->second.worst_tensor = t.name;
    }
    const double spread = t.amax_median > 0.0 ? t.amax_max / t.amax_median : 0.0;
    it->second.max_amax_spread = std::max(it->second.max_amax_spread, spread);
  }
  std::vector<double> worst;
  for (const auto& [l, s] : per_layer) worst.push_back(s.worst_snr_db);
  std::vector<double> sorted = worst;
  std::sort(sorted.begin(), sorted.end(), key_less);
  const double median = sorted.empty() ? 0.0 : percentile_nearest_rank(sorted, 500);
  for (auto& [l, s] : per_layer) {
    s.flagged = std::isnan(s.worst_snr_db) || s.worst_snr_db < median - options.flag_margin_db ||
                s.max_amax_spread > options.flag_amax_spread;
    if (s.flagged) r.flagged_layers.push_back(l);
    r.layers.push_back(s);
  }
  std::stable_sort(r.layers.begin(), r.layers.end(), [&](const LayerSummary& a, const LayerSummary& b) {
    return key_less(a.worst_snr_db, b.worst_snr_db);
  });

  // Smallest F + K (then smallest F) whose bf16 edges cover every flagged layer.
  const int L = spec.layers;
  int bestF = 0, bestK = 0, best = L + 1;
  for (int F = 0; F <= L; ++F)
    for (int K = 0; F + K <= L; ++K) {
      bool covers = true;
      for (int l : r.flagged_layers) covers = covers && (l < F || l >= L - K);
      if (covers && F + K < best) {
        best = F + K;
        bestF = F;
        bestK = K;
      }
    }
  r.bf16_first_layers = bestF;
  r.bf16_last_layers = bestK;

  std::string ranked;
  for (std::size_t i = 0; i < r.layers.size() && i < 8; ++i)
    ranked += fmt::format("{}{} ({:.1f} dB)", i ? ", " : "", r.layers[i].layer, r.layers[i].worst_snr_db);
  std::string outliers;
  for (const auto& [l, s] : per_layer)
    if (s.max_amax_spread > options.flag_amax_spread)
      outliers += fmt::format("{}{} (x{:.0f})", outliers.empty() ? "" : ", ", l, s.max_amax_spread);
  if (r.flagged_layers.empty()) {
    r.recommendation = fmt::format(
        "layers by worst SNR: {}. No layer is more than {:.1f} dB below the median layer ({:.1f} dB) or has "
        "outlier blocks (amax max/median > {:.0f}): no bf16 layers indicated; confirm with `replay "
        "--attribute "
        "layers`.",
        ranked, options.flag_margin_db, median, options.flag_amax_spread);
  } else {
    std::string flagged;
    for (int l : r.flagged_layers) flagged += (flagged.empty() ? "" : ",") + std::to_string(l);
    r.recommendation = fmt::format(
        "layers by worst SNR: {}; outlier blocks (amax max/median > {:.0f}): {}. Keep in bf16: layer(s) {} "
        "(more than {:.1f} dB below the median layer, {:.1f} dB, or outlier blocks) -> --bf16-first-layers "
        "{} "
        "--bf16-last-layers {} ({} layer(s) in bf16); measure it with `replay --attribute layers`.",
        ranked, options.flag_amax_spread, outliers.empty() ? "none" : outliers, flagged,
        options.flag_margin_db, median, bestF, bestK, bestF + bestK);
  }
  return r;
}

std::string format_inspect(const InspectResult& r, std::size_t max_rows) {
  std::string s;
  s += fmt::format("{:<34} {:>11} {:>27} | {:^31} | {:^31} | {:>8} {:>7} {:>8} {:>6}\n",
                   "tensor (worst SNR first)", "shape", "block amax min/median/max", "SNR dB, fp32 scales",
                   "SNR dB, pow2 scales", "rel err", "sat", "flushed", "differ");
  s += fmt::format(
      "{:<34} {:>11} {:>27} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>8} {:>7} {:>8} {:>6}\n",
      "", "", "", "te", "vllm", "dg", "nemo", "te", "vllm", "dg", "nemo", "worst", "max", "max", "max");
  const std::size_t n = max_rows == 0 ? r.tensors.size() : std::min(max_rows, r.tensors.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = r.tensors[i];
    std::string shortname = t.name.rfind("model.", 0) == 0 ? t.name.substr(6) : t.name;
    if (shortname.size() > 7 && shortname.compare(shortname.size() - 7, 7, ".weight") == 0)
      shortname.resize(shortname.size() - 7);
    s += fmt::format("{:<34} {:>11} {:>27} |", shortname, fmt::format("{}x{}", t.rows, t.cols),
                     fmt::format("{:.2e}/{:.2e}/{:.2e}", t.amax_min, t.amax_median, t.amax_max));
    double worst_rel = 0.0, max_differ = 0.0;
    int64_t max_sat = 0, max_flush = 0;
    for (int mode = 0; mode < 2; ++mode) {
      for (auto c : inspect_conventions()) {
        const QuantStats& q = t.find(c, mode == 1);
        s += fmt::format(" {:>7.2f}", q.snr_db);
        worst_rel = std::max(worst_rel, q.rel_fro_err);
        max_sat = std::max(max_sat, q.saturated);
        max_flush = std::max(max_flush, q.flushed);
        max_differ = std::max(max_differ, q.blocks_differ_frac);
      }
      s += " |";
    }
    s += fmt::format(" {:>8.2e} {:>7} {:>8} {:>5.1f}%\n", worst_rel, max_sat, max_flush, 100.0 * max_differ);
  }
  if (n < r.tensors.size())
    s += fmt::format("... {} more tensors (all in the HDF5 output)\n", r.tensors.size() - n);
  s += "recommendation: " + r.recommendation + "\n";
  return s;
}

void write_inspect_file(const std::string& path, const InspectResult& r, const std::string& command_line,
                        bool force) {
  check_output_path(path, "inspect file", force);
  auto write = [&](hid_t file) {
    const int32_t format_version = 1;
    h5::write_attr_string(file, "format", "rlparity-inspect", "/format");
    h5::write_attr_scalar(file, "inspect_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &format_version,
                          "/inspect_version");
    h5::write_attr_string(file, "tool_version", version(), "/tool_version");
    h5::write_attr_string(file, "command_line", command_line, "/command_line");
    h5::write_attr_string(file, "checkpoint_path", r.checkpoint_path, "/checkpoint_path");
    h5::write_attr_string(file, "checkpoint_hash", r.checkpoint_hash, "/checkpoint_hash");
    h5::write_attr_string(file, "created", utc_now(), "/created");
    h5::write_attr_string(file, "model_spec", r.model_spec.dump(), "/model_spec");
    nlohmann::json order = nlohmann::json::array();
    for (const auto& t : r.tensors) order.push_back(t.name);
    h5::write_attr_string(file, "order", order.dump(), "/order");
    h5::write_attr_string(file, "recommendation", r.recommendation, "/recommendation");
    h5::write_attr_string(file, "flagged_layers", nlohmann::json(r.flagged_layers).dump(), "/flagged_layers");
    const int32_t F = r.bf16_first_layers, K = r.bf16_last_layers;
    h5::write_attr_scalar(file, "bf16_first_layers", H5T_STD_I32LE, H5T_NATIVE_INT32, &F,
                          "/bf16_first_layers");
    h5::write_attr_scalar(file, "bf16_last_layers", H5T_STD_I32LE, H5T_NATIVE_INT32, &K, "/bf16_last_layers");

    h5::Id tensors = h5::create_group(file, "tensors", "/tensors");
    auto f64 = [](hid_t g, const std::string& name, double v, const std::string& what) {
      h5::write_attr_scalar(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, what);
    };
    auto i64 = [](hid_t g, const std::string& name, int64_t v, const std::string& what) {
      h5::write_attr_scalar(g, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, what);
    };
    for (const auto& t : r.tensors) {
      const std::string base = "/tensors/" + t.name;
      h5::Id g = h5::create_group(tensors.get(), t.name, base);
      i64(g.get(), "layer", t.layer, base + "/layer");
      h5::write_attr_string(g.get(), "proj", t.proj, base + "/proj");
      h5::write_attr_string(g.get(), "dtype", t.dtype, base + "/dtype");
      i64(g.get(), "rows", t.rows, base + "/rows");
      i64(g.get(), "cols", t.cols, base + "/cols");
      i64(g.get(), "blocks", t.blocks, base + "/blocks");
      f64(g.get(), "amax_min", t.amax_min, base + "/amax_min");
      f64(g.get(), "amax_median", t.amax_median, base + "/amax_median");
      f64(g.get(), "amax_max", t.amax_max, base + "/amax_max");
      f64(g.get(), "worst_snr_db", t.worst_snr_db(), base + "/worst_snr_db");
      for (const auto& q : t.stats) {
        const std::string pre = std::string(convention_name(q.convention)) + (q.pow2 ? "_pow2_" : "_fp32_");
        f64(g.get(), pre + "snr_db", q.snr_db, base + "/" + pre + "snr_db");
        f64(g.get(), pre + "rel_fro_err", q.rel_fro_err, base + "/" + pre + "rel_fro_err");
        i64(g.get(), pre + "saturated", q.saturated, base + "/" + pre + "saturated");
        i64(g.get(), pre + "clipped", q.clipped, base + "/" + pre + "clipped");
        i64(g.get(), pre + "flushed", q.flushed, base + "/" + pre + "flushed");
        i64(g.get(), pre + "nonfinite", q.nonfinite, base + "/" + pre + "nonfinite");
        f64(g.get(), pre + "blocks_differ_frac", q.blocks_differ_frac,
            base + "/" + pre + "blocks_differ_frac");
      }
      g.close("close group " + base);
    }
    tensors.close("close group /tensors");

    h5::Id layers = h5::create_group(file, "layers", "/layers");
    std::vector<double> idx, snr, flagged, spread;
    std::vector<std::string> worst;
    for (const auto& l : r.layers) {
      idx.push_back(l.layer);
      snr.push_back(l.worst_snr_db);
      flagged.push_back(l.flagged ? 1.0 : 0.0);
      spread.push_back(l.max_amax_spread);
      worst.push_back(l.worst_tensor);
    }
    h5::write_dataset(layers.get(), "layer", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, idx.data(), idx.size(),
                      sizeof(double), "/layers/layer");
    h5::write_dataset(layers.get(), "worst_snr_db", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, snr.data(), snr.size(),
                      sizeof(double), "/layers/worst_snr_db");
    h5::write_dataset(layers.get(), "flagged", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, flagged.data(),
                      flagged.size(), sizeof(double), "/layers/flagged");
    h5::write_dataset(layers.get(), "max_amax_spread", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, spread.data(),
                      spread.size(), sizeof(double), "/layers/max_amax_spread");
    h5::write_string_dataset(layers.get(), "worst_tensor", worst, "/layers/worst_tensor");
    layers.close("close group /layers");
  };
  std::lock_guard<std::mutex> lock(h5::h5_mutex());
  try {
    h5::write_file_atomic(path, write);
  } catch (const std::exception& e) {
    RLP_THROW_INPUT("cannot write inspect file '{}': {}", path, e.what());
  }
}

namespace {

std::string read_format_attr(hid_t file) {
  return h5::attr_exists(file, "format") ? h5::read_attr_string(file, "format", "/format") : std::string();
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw h5::H5Failure(what + ": invalid JSON: " + e.what());
  }
}

}  // namespace

bool is_inspect_file(const std::string& path) {
  bool yes = false;
  try {
    h5::read_file(path, "inspect file",
                  [&](hid_t file) { yes = read_format_attr(file) == "rlparity-inspect"; });
  } catch (const std::exception&) {
    return false;
  }
  return yes;
}

InspectResult read_inspect_file(const std::string& path) {
  InspectResult r;
  h5::read_file(path, "inspect file", [&](hid_t file) {
    if (read_format_attr(file) != "rlparity-inspect")
      throw h5::H5Failure("not an inspect file (root attribute format is not \"rlparity-inspect\")");
    int64_t version = 0;
    h5::read_attr_scalar(file, "inspect_version", H5T_NATIVE_INT64, &version, "/inspect_version");
    if (version != 1)
      throw h5::H5Failure("inspect_version " + std::to_string(version) +
                          " not supported (this rlparity reads 1)");
    r.checkpoint_path = h5::read_attr_string(file, "checkpoint_path", "/checkpoint_path");
    r.checkpoint_hash = h5::read_attr_string(file, "checkpoint_hash", "/checkpoint_hash");
    r.model_spec = parse_json(h5::read_attr_string(file, "model_spec", "/model_spec"), "/model_spec");
    r.recommendation = h5::read_attr_string(file, "recommendation", "/recommendation");
    r.flagged_layers =
        parse_json(h5::read_attr_string(file, "flagged_layers", "/flagged_layers"), "/flagged_layers")
            .get<std::vector<int>>();
    int32_t F = 0, K = 0;
    h5::read_attr_scalar(file, "bf16_first_layers", H5T_NATIVE_INT32, &F, "/bf16_first_layers");
    h5::read_attr_scalar(file, "bf16_last_layers", H5T_NATIVE_INT32, &K, "/bf16_last_layers");
    r.bf16_first_layers = F;
    r.bf16_last_layers = K;
    const nlohmann::json order = parse_json(h5::read_attr_string(file, "order", "/order"), "/order");
    h5::Id tensors = h5::open_group(file, "tensors", "/tensors");
    for (const auto& name : order.get<std::vector<std::string>>()) {
      const std::string base = "/tensors/" + name;
      h5::Id g = h5::open_group(tensors.get(), name, base);
      auto f64 = [&](const std::string& a) {
        double v = 0.0;
        h5::read_attr_scalar(g.get(), a, H5T_NATIVE_DOUBLE, &v, base + "/" + a);
        return v;
      };
      auto i64 = [&](const std::string& a) {
        int64_t v = 0;
        h5::read_attr_scalar(g.get(), a, H5T_NATIVE_INT64, &v, base + "/" + a);
        return v;
      };
      TensorInspection t;
      t.name = name;
      t.layer = static_cast<int>(i64("layer"));
      t.proj = h5::read_attr_string(g.get(), "proj", base + "/proj");
      t.dtype = h5::read_attr_string(g.get(), "dtype", base + "/dtype");
      t.rows = i64("rows");
      t.cols = i64("cols");
      t.blocks = i64("blocks");
      t.amax_min = f64("amax_min");
      t.amax_median = f64("amax_median");
      t.amax_max = f64("amax_max");
      for (const ScaleConvention c : inspect_conventions())
        for (const bool pow2 : {false, true}) {
          const std::string pre = std::string(convention_name(c)) + (pow2 ? "_pow2_" : "_fp32_");
          QuantStats q;
          q.convention = c;
          q.pow2 = pow2;
          q.snr_db = f64(pre + "snr_db");
          q.rel_fro_err = f64(pre + "rel_fro_err");
          q.saturated = i64(pre + "saturated");
          q.clipped = i64(pre + "clipped");
          q.flushed = i64(pre + "flushed");
          q.nonfinite = i64(pre + "nonfinite");
          q.blocks_differ_frac = f64(pre + "blocks_differ_frac");
          q.blocks_differ =
              static_cast<int64_t>(std::llround(q.blocks_differ_frac * static_cast<double>(t.blocks)));
          t.stats.push_back(q);
        }
      r.tensors.push_back(std::move(t));
    }
    h5::Id layers = h5::open_group(file, "layers", "/layers");
    const auto idx = h5::read_dataset<double>(layers.get(), "layer", H5T_NATIVE_DOUBLE, "/layers/layer");
    const auto snr =
        h5::read_dataset<double>(layers.get(), "worst_snr_db", H5T_NATIVE_DOUBLE, "/layers/worst_snr_db");
    const auto flagged =
        h5::read_dataset<double>(layers.get(), "flagged", H5T_NATIVE_DOUBLE, "/layers/flagged");
    const auto spread = h5::read_dataset<double>(layers.get(), "max_amax_spread", H5T_NATIVE_DOUBLE,
                                                 "/layers/max_amax_spread");
    const auto worst = h5::read_string_dataset(layers.get(), "worst_tensor", "/layers/worst_tensor");
    if (snr.size() != idx.size() || flagged.size() != idx.size() || spread.size() != idx.size() ||
        worst.size() != idx.size())
      throw h5::H5Failure("/layers: datasets of different lengths");
    for (std::size_t i = 0; i < idx.size(); ++i)
      r.layers.push_back({static_cast<int>(idx[i]), snr[i], worst[i], spread[i], flagged[i] != 0.0});
  });
  return r;
}

}  // namespace rlp
