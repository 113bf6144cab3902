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

#include "io/h5_util.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
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
using DV = double __attribute__((vector_size(128)));
using LV = int64_t __attribute__((vector_size(128)));
using BV = uint8_t __attribute__((vector_size(16)));

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

// Exact float -> double widening of the lanes.
RLP_VINLINE DV widen(FV v) { return __builtin_convertvector(v, DV); }

// satfinite (Sat) or non-saturating e4m3 of q: the code, exactly num::fp8_encode_fast_impl<3, 7,
// 0x7E, 0x7F> lane by lane, and the float value that code decodes to (num::fp8_to_float), obtained
// from the same rounding instead of decoding: RNE on the float bits (normal range) keeps the top 3
// mantissa bits of `rn`; the subnormal range's magic-number add leaves the rounded value in
// `sf - magic`. Overflow gives 448 (Sat) or NaN (code 0x7F); a NaN input gives 0x7F / NaN
// (CheckNaN false: the caller guarantees q is not NaN).
template <bool Sat, bool CheckNaN>
RLP_VINLINE void encode_e4m3(FV q, UV& code, FV& value) {
  constexpr uint32_t kMinNormBits = 121u << 23;  // 2^-6, the smallest e4m3 normal
  constexpr float kMagic = 0x1p14f;              // ulp(2^14) = 2^-9, the e4m3 subnormal unit
  const UV u = bits(q);
  const UV sign = (u >> 24) & 0x80u;
  const UV a = u & 0x7FFFFFFFu;
  const UV rn = a + 0x7FFFFu + ((a >> 20) & 1u);
  const UV cn = (rn >> 20) - (120u << 3);  // wraps when a is small (then unused)
  const FV sf = from_bits(a) + kMagic;
  const UV cs = bits(sf) - bits(splat(kMagic));
  const IV small = a < kMinNormBits;
  UV c = small ? cs : cn;
  UV mag = small ? bits(sf - kMagic) : (rn & 0xFFF00000u);
  const IV over = c > 0x7Eu;
  c = over ? UV{} + (Sat ? 0x7Eu : 0x7Fu) : c;
  mag = over ? UV{} + (Sat ? 0x43E00000u /* 448 */ : 0x7FC00000u) : mag;
  code = sign | c;
  mag |= sign << 24;
  if constexpr (CheckNaN) {
    const IV nan = a > 0x7F800000u;
    code = nan ? UV{} + 0x7Fu : code;
    mag = nan ? UV{} + 0x7FC00000u : mag;
  }
  value = from_bits(mag);
}

// One convention's scaled value v (what saturation is judged on), fp8 code and dequantized value
// deq = decode(code) * scale_inv (one fp32 multiply, as num::dequantize) for 8 elements.
template <ScaleConvention C, bool CheckNaN = true>
RLP_VINLINE void quantize_lanes(FV x, const BlockScale& s, FV& v, UV& code, FV& deq) {
  constexpr float m = kSatThreshold;
  FV val;
  if constexpr (C == ScaleConvention::te) {
    v = x * s.scale;  // satfinite(x * scale)
    encode_e4m3<true, CheckNaN>(v, code, val);
  } else if constexpr (C == ScaleConvention::vllm) {
    v = x / s.scale_inv;  // fminf(fmaxf(x / y_s, -448), 448): NaN -> -448
    FV q = v > -m ? v : splat(-m);
    q = q < m ? q : splat(m);
    encode_e4m3<false, false>(q, code, val);  // q is never NaN
  } else if constexpr (C == ScaleConvention::deepgemm) {
    v = x * s.scale;  // non-saturating cast
    encode_e4m3<false, CheckNaN>(v, code, val);
  } else {
    v = x * s.scale;  // torch.clamp(w * scale, -448, 448): NaN propagates
    FV q = v > m ? splat(m) : v;
    q = q < -m ? splat(-m) : q;
    encode_e4m3<false, CheckNaN>(q, code, val);
  }
  deq = val * s.scale_inv;
}

// Accumulators of one scale mode over one block row.
struct ModeAcc {
  DV se2 = {};
  int64_t sat = 0, clip = 0, flush = 0, blocks_differ = 0;
};

// n elements (a multiple of kLanes; padding zeros add nothing) of one block in convention C, into `acc`.
// Compare: `codes` holds TE's codes of the block, and a differing code counts the block in
// blocks_differ; otherwise the codes are stored there.
// Exact: the general path: nonfinite elements masked out of the sums and counts, the error x - deq
// taken in float64. Otherwise (a block without NaN/inf, whose scale comes from its amax) the error
// is taken in float: x - deq is then exact (deq = 0, or deq within a factor 2 of x, Sterbenz), as
// long as no element saturates past 464 (|v| <= 448 + 1 ulp with amax-derived scales); the caller
// redoes a block on the exact path when clip counts one.
// Count false: the caller knows no |v| exceeds 448 (the block amax's own v does not, and rounding is
// monotonic), so the saturated and clipped counts are 0 without looking.
template <ScaleConvention C, bool Exact, bool Compare, bool Count = true>
void block_kernel(const float* __restrict x, int n, const BlockScale& bs, uint8_t* __restrict codes, ModeAcc& acc) {
  const BlockScale s = bs;
  DV se2 = acc.se2;
  IV sat = {}, clip = {}, flush = {};
  BV differ = {};
  for (int i = 0; i < n; i += kLanes) {
    const FV xv = loadv(x + i);
    FV v, deq;
    UV code;
    quantize_lanes<C, Exact>(xv, s, v, code, deq);
    const BV c8 = __builtin_convertvector(code, BV);
    if constexpr (Compare) {
      BV ref;
      std::memcpy(&ref, codes + i, sizeof ref);
      differ |= c8 ^ ref;
    } else {
      std::memcpy(codes + i, &c8, sizeof c8);
    }
    const UV ax = bits(xv) & 0x7FFFFFFFu;
    const FV av = from_bits(bits(v) & 0x7FFFFFFFu);
    IV fin = IV{} - 1;
    DV e;
    if constexpr (Exact) {
      fin = ax < 0x7F800000u;
      e = widen(xv) - widen(deq);
      e = __builtin_convertvector(fin, LV) != 0 ? e : DV{};
    } else {
      e = widen(xv - deq);
    }
    se2 += e * e;
    // Comparisons give -1 per true lane: subtracting counts.
    if constexpr (Count) {
      sat -= fin & (av > kSatThreshold);
      clip -= fin & (av > kClipThreshold);
    }
    flush -= fin & (ax != 0u) & ((code & 0x7Fu) == 0u);
  }
  acc.se2 = se2;
  for (int j = 0; j < kLanes; ++j) {
    acc.sat += sat[j];
    acc.clip += clip[j];
    acc.flush += flush[j];
  }
  if constexpr (Compare) {
    uint64_t d[sizeof differ / 8] = {};
    std::memcpy(d, &differ, sizeof differ);
    uint64_t any = 0;
    for (uint64_t w : d) any |= w;
    acc.blocks_differ += any != 0 ? 1 : 0;
  }
}

using BlockKernel = void (*)(const float*, int, const BlockScale&, uint8_t*, ModeAcc&);
template <bool Exact, bool Compare, bool Count = true>
BlockKernel pick_kernel(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::te: return &block_kernel<ScaleConvention::te, Exact, Compare, Count>;
    case ScaleConvention::vllm: return &block_kernel<ScaleConvention::vllm, Exact, Compare, Count>;
    case ScaleConvention::deepgemm: return &block_kernel<ScaleConvention::deepgemm, Exact, Compare, Count>;
    case ScaleConvention::nemo_refit: return &block_kernel<ScaleConvention::nemo_refit, Exact, Compare, Count>;
  }
  return &block_kernel<ScaleConvention::te, Exact, Compare, Count>;
}

template <ScaleConvention C>
void quantize_elements(const float* x, std::size_t n, const BlockScale& s, uint8_t* codes, float* deq) {
  for (std::size_t i = 0; i < n; i += kLanes) {
    FV v, d;
    UV code;
    quantize_lanes<C>(loadv(x + i), s, v, code, d);
    const BV c8 = __builtin_convertvector(code, BV);
    std::memcpy(codes + i, &c8, sizeof c8);
    std::memcpy(deq + i, &d, sizeof d);
  }
}

// Converts n elements of `dtype` to float.
inline void load_elems(const uint8_t* p, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::f32: std::memcpy(out, p, 4 * n); break;
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

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

const char* convention_name(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::te: return "te";
    case ScaleConvention::vllm: return "vllm";
    case ScaleConvention::deepgemm: return "deepgemm";
    case ScaleConvention::nemo_refit: return "nemo-refit";
  }
  return "?";
}

const std::vector<ScaleConvention>& inspect_conventions() {
  static const std::vector<ScaleConvention> v{ScaleConvention::te, ScaleConvention::vllm, ScaleConvention::deepgemm,
                                              ScaleConvention::nemo_refit};
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
    case ScaleConvention::te: quantize_elements<ScaleConvention::te>(x, n, s, codes, deq); break;
    case ScaleConvention::vllm: quantize_elements<ScaleConvention::vllm>(x, n, s, codes, deq); break;
    case ScaleConvention::deepgemm: quantize_elements<ScaleConvention::deepgemm>(x, n, s, codes, deq); break;
    case ScaleConvention::nemo_refit: quantize_elements<ScaleConvention::nemo_refit>(x, n, s, codes, deq); break;
  }
}

std::vector<QuantStats> inspect_matrix(const uint8_t* data, DType dtype, int64_t rows, int64_t cols, int block,
                                       const std::vector<ScaleConvention>& conventions, double* amax_min,
                                       double* amax_median, double* amax_max) {
  RLP_CHECK(rows > 0 && cols > 0, "inspect: empty matrix {}x{}", rows, cols);
  RLP_CHECK(block > 0, "inspect: block size {} must be positive", block);
  RLP_CHECK(data != nullptr, "inspect: null data");
  const size_t esize = dtype_size(dtype);
  Geometry g{rows, cols, block, static_cast<int>((rows + block - 1) / block),
             static_cast<int>((cols + block - 1) / block), (block + kLanes - 1) / kLanes * kLanes};
  const size_t nblocks = static_cast<size_t>(g.rb) * static_cast<size_t>(g.cb);
  const bool have_te = !conventions.empty() && conventions[0] == ScaleConvention::te;

  // The last element's |value|: NeMo RL pads partial edge blocks with it (see quantize.hpp).
  float last = 0.0f;
  load_elems(data + (static_cast<size_t>(rows) * static_cast<size_t>(cols) - 1) * esize, dtype, 1, &last);

  std::vector<double> block_amax(nblocks, 0.0);
  std::vector<uint8_t> te_codes[2];
  if (have_te && conventions.size() > 1)
    for (auto& v : te_codes) v.assign(nblocks * g.block_elems(), 0);

  // Per block row: the element-only sums (shared by every convention and mode), and per mode the
  // convention's sums and counts.
  struct RowCommon {
    DV sx2 = {};
    int64_t nonfinite = 0;
  };
  std::vector<RowCommon> common(static_cast<size_t>(g.rb));
  std::vector<QuantStats> out;
  for (size_t ci = 0; ci < conventions.size(); ++ci) {
    const ScaleConvention conv = conventions[ci];
    const bool store_te = ci == 0 && have_te && !te_codes[0].empty();
    const bool compare_te = ci > 0 && have_te;
    const BlockKernel fast_kernel = compare_te ? pick_kernel<false, true>(conv) : pick_kernel<false, false>(conv);
    const BlockKernel fast_nosat_kernel =
        compare_te ? pick_kernel<false, true, false>(conv) : pick_kernel<false, false, false>(conv);
    const BlockKernel exact_kernel = compare_te ? pick_kernel<true, true>(conv) : pick_kernel<true, false>(conv);
    const bool first_pass = ci == 0;
    std::vector<ModeAcc> partial(static_cast<size_t>(g.rb) * 2);

    parallel_for(static_cast<size_t>(g.rb), 1, [&](size_t b0, size_t b1) {
      std::vector<float> buf(g.block_elems(), 0.0f);
      std::vector<uint8_t> codes(g.block_elems());
      for (size_t br = b0; br < b1; ++br) {
        const int64_t r0 = static_cast<int64_t>(br) * block;
        const int nr = static_cast<int>(std::min<int64_t>(rows - r0, block));
        const int n = nr * g.bcp;  // the block's padded elements, contiguous in buf
        for (int bc = 0; bc < g.cb; ++bc) {
          const int64_t c0 = static_cast<int64_t>(bc) * block;
          const int nc = static_cast<int>(std::min<int64_t>(cols - c0, block));
          // Load the block (padding columns stay zero: the buffer is reused only for same-width
          // blocks, and a narrower edge block is the last of its row of blocks).
          if (nc < g.bcp)
            for (int r = 0; r < nr; ++r)
              std::fill(buf.begin() + static_cast<std::ptrdiff_t>(r) * g.bcp + nc,
                        buf.begin() + static_cast<std::ptrdiff_t>(r + 1) * g.bcp, 0.0f);
          for (int r = 0; r < nr; ++r)
            load_elems(data + (static_cast<size_t>(r0 + r) * static_cast<size_t>(cols) + static_cast<size_t>(c0)) * esize,
                       dtype, static_cast<size_t>(nc), buf.data() + static_cast<size_t>(r) * static_cast<size_t>(g.bcp));
          // amax as quantize_blocks reduces it: NaN-ignoring max of |x| on the bits.
          UV mv = {}, allv = {};
          for (int i = 0; i < n; i += kLanes) {
            const UV a = bits(loadv(buf.data() + i)) & 0x7FFFFFFFu;
            const UV keep = as_u(a <= 0x7F800000u);  // all ones where a is not NaN
            const UV ak = a & keep;
            mv = ak > mv ? ak : mv;
            allv = a > allv ? a : allv;
          }
          uint32_t m = 0, all = 0;
          for (int j = 0; j < kLanes; ++j) {
            m = std::max(m, mv[j]);
            all = std::max(all, allv[j]);
          }
          const bool all_finite = all < 0x7F800000u;
          const size_t bidx = br * static_cast<size_t>(g.cb) + static_cast<size_t>(bc);
          if (first_pass) {
            block_amax[bidx] = static_cast<double>(std::bit_cast<float>(m));
            DV sx2 = common[br].sx2;
            IV nonfin = {};
            for (int i = 0; i < n; i += kLanes) {
              const FV xv = loadv(buf.data() + i);
              const IV fin = (bits(xv) & 0x7FFFFFFFu) < 0x7F800000u;
              const DV xd = __builtin_convertvector(fin, LV) != 0 ? __builtin_convertvector(xv, DV) : DV{};
              sx2 += xd * xd;
              nonfin += fin + 1;  // fin is -1 (finite) or 0
            }
            common[br].sx2 = sx2;
            for (int j = 0; j < kLanes; ++j) common[br].nonfinite += nonfin[j];
          }
          const bool partial_block = nr < block || nc < block;
          if (conv == ScaleConvention::nemo_refit && partial_block) {
            const uint32_t a = std::bit_cast<uint32_t>(last) & 0x7FFFFFFFu;
            if (a <= 0x7F800000u) m = std::max(m, a);
            all = std::max(all, a);
          }
          const float amax = num::finish_amax(std::bit_cast<float>(m), all > 0x7F800000u, conv);
          for (int mode = 0; mode < 2; ++mode) {
            ScaleOptions o;
            o.convention = conv;
            o.pow2 = mode == 1;
            const BlockScale s = num::compute_block_scale(amax, o);
            ModeAcc& acc = partial[2 * br + static_cast<size_t>(mode)];
            uint8_t* te = te_codes[mode].empty() ? nullptr : te_codes[mode].data() + bidx * g.block_elems();
            // TE's codes: stored (first pass) or compared against (later passes).
            uint8_t* dst = store_te || compare_te ? te : codes.data();
            bool done = false;
            if (all_finite) {
              // The largest |v| of the block: its amax element's (v is monotonic in |x|).
              const float vmax = conv == ScaleConvention::vllm ? amax / s.scale_inv : amax * s.scale;
              ModeAcc fast = acc;
              (vmax <= kSatThreshold ? fast_nosat_kernel : fast_kernel)(buf.data(), n, s, dst, fast);
              if (fast.clip == acc.clip) {  // no element past 464: the float error was exact
                acc = fast;
                done = true;
              }
            }
            if (!done) exact_kernel(buf.data(), n, s, dst, acc);
          }
        }
      }
    });

    for (int mode = 0; mode < 2; ++mode) {
      QuantStats q;
      q.convention = conv;
      q.pow2 = mode == 1;
      for (int br = 0; br < g.rb; ++br) {
        const ModeAcc& acc = partial[2 * static_cast<size_t>(br) + static_cast<size_t>(mode)];
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
      q.rel_fro_err = q.sum_sq_x == 0.0 ? (q.sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity())
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
      ti.blocks = ((ti.rows + options.block - 1) / options.block) * ((ti.cols + options.block - 1) / options.block);
      ti.stats = inspect_matrix(t.data, t.dtype, ti.rows, ti.cols, options.block, inspect_conventions(), &ti.amax_min,
                                &ti.amax_median, &ti.amax_max);
      r.bytes_per_pass += static_cast<int64_t>(t.nbytes);
      r.tensors.push_back(std::move(ti));
    }
  }
  // Sort key: worst SNR ascending, NaN first (a NaN SNR is the worst news), then name.
  auto key_less = [](double a, double b) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    return a < b;
  };
  std::stable_sort(r.tensors.begin(), r.tensors.end(), [&](const TensorInspection& a, const TensorInspection& b) {
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
  std::stable_sort(r.layers.begin(), r.layers.end(),
                   [&](const LayerSummary& a, const LayerSummary& b) { return key_less(a.worst_snr_db, b.worst_snr_db); });

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
        "outlier blocks (amax max/median > {:.0f}): no bf16 layers indicated; confirm with `replay --attribute "
        "layers`.",
        ranked, options.flag_margin_db, median, options.flag_amax_spread);
  } else {
    std::string flagged;
    for (int l : r.flagged_layers) flagged += (flagged.empty() ? "" : ",") + std::to_string(l);
    r.recommendation = fmt::format(
        "layers by worst SNR: {}; outlier blocks (amax max/median > {:.0f}): {}. Keep in bf16: layer(s) {} "
        "(more than {:.1f} dB below the median layer, {:.1f} dB, or outlier blocks) -> --bf16-first-layers {} "
        "--bf16-last-layers {} ({} layer(s) in bf16); measure it with `replay --attribute layers`.",
        ranked, options.flag_amax_spread, outliers.empty() ? "none" : outliers, flagged, options.flag_margin_db,
        median, bestF, bestK, bestF + bestK);
  }
  return r;
}

std::string format_inspect(const InspectResult& r, std::size_t max_rows) {
  std::string s;
  s += fmt::format("{:<34} {:>11} {:>27} | {:^31} | {:^31} | {:>8} {:>7} {:>8} {:>6}\n", "tensor (worst SNR first)",
                   "shape", "block amax min/median/max", "SNR dB, fp32 scales", "SNR dB, pow2 scales", "rel err",
                   "sat", "flushed", "differ");
  s += fmt::format("{:<34} {:>11} {:>27} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>8} {:>7} {:>8} {:>6}\n",
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
  if (n < r.tensors.size()) s += fmt::format("... {} more tensors (all in the HDF5 output)\n", r.tensors.size() - n);
  s += "recommendation: " + r.recommendation + "\n";
  return s;
}

void write_inspect_file(const std::string& path, const InspectResult& r, const std::string& command_line,
                        bool force) {
  namespace fs = std::filesystem;
  if (path.empty()) RLP_THROW_INPUT("output path is empty");
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    RLP_THROW_INPUT("cannot write inspect file '{}': directory '{}' does not exist", path, dir.string());
  const auto st = fs::symlink_status(p, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) RLP_THROW_INPUT("cannot write inspect file '{}': it is a directory", path);
    if (!force) RLP_THROW_INPUT("output file '{}' already exists (use --force to overwrite)", path);
  }
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
    h5::write_attr_scalar(file, "bf16_first_layers", H5T_STD_I32LE, H5T_NATIVE_INT32, &F, "/bf16_first_layers");
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
        f64(g.get(), pre + "blocks_differ_frac", q.blocks_differ_frac, base + "/" + pre + "blocks_differ_frac");
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
    h5::write_dataset(layers.get(), "layer", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, idx.data(), idx.size(), sizeof(double),
                      "/layers/layer");
    h5::write_dataset(layers.get(), "worst_snr_db", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, snr.data(), snr.size(),
                      sizeof(double), "/layers/worst_snr_db");
    h5::write_dataset(layers.get(), "flagged", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, flagged.data(), flagged.size(),
                      sizeof(double), "/layers/flagged");
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
    h5::read_file(path, "inspect file", [&](hid_t file) { yes = read_format_attr(file) == "rlparity-inspect"; });
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
    if (version != 1) throw h5::H5Failure("inspect_version " + std::to_string(version) + " not supported (this rlparity reads 1)");
    r.checkpoint_path = h5::read_attr_string(file, "checkpoint_path", "/checkpoint_path");
    r.checkpoint_hash = h5::read_attr_string(file, "checkpoint_hash", "/checkpoint_hash");
    r.model_spec = parse_json(h5::read_attr_string(file, "model_spec", "/model_spec"), "/model_spec");
    r.recommendation = h5::read_attr_string(file, "recommendation", "/recommendation");
    r.flagged_layers = parse_json(h5::read_attr_string(file, "flagged_layers", "/flagged_layers"), "/flagged_layers")
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
          q.blocks_differ = static_cast<int64_t>(std::llround(q.blocks_differ_frac * static_cast<double>(t.blocks)));
          t.stats.push_back(q);
        }
      r.tensors.push_back(std::move(t));
    }
    h5::Id layers = h5::open_group(file, "layers", "/layers");
    const auto idx = h5::read_dataset<double>(layers.get(), "layer", H5T_NATIVE_DOUBLE, "/layers/layer");
    const auto snr = h5::read_dataset<double>(layers.get(), "worst_snr_db", H5T_NATIVE_DOUBLE, "/layers/worst_snr_db");
    const auto flagged = h5::read_dataset<double>(layers.get(), "flagged", H5T_NATIVE_DOUBLE, "/layers/flagged");
    const auto spread =
        h5::read_dataset<double>(layers.get(), "max_amax_spread", H5T_NATIVE_DOUBLE, "/layers/max_amax_spread");
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
