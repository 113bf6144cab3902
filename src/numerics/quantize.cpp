#include "rlparity/numerics/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>

#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::num {
namespace {

using std::size_t;

// NaN-ignoring amax over a row segment on the float bits: for non-NaN values the unsigned order
// of |x|'s bits is the float order, so an integer max (which vectorizes) gives the fmaxf result.
struct AmaxAcc {
  uint32_t bits = 0;
  uint32_t nan = 0;
};

// Fresh accumulators per call keep the loop a plain max reduction, which GCC vectorizes.
inline void amax_row(const float* x, int n, AmaxAcc& acc) {
  uint32_t m = 0, all = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu;
    const uint32_t keep = 0u - static_cast<uint32_t>(a <= 0x7F800000u);  // all ones unless NaN
    m = std::max(m, a & keep);
    all = std::max(all, a);  // > 0x7F800000 iff the row holds a NaN
  }
  acc.bits = std::max(acc.bits, m);
  acc.nan |= all > 0x7F800000u ? 1u : 0u;
}

template <ScaleConvention C, Fp8Kind K>
void quantize_row(const float* x, uint8_t* q, int n, BlockScale s) {
  ScaleOptions o;
  o.convention = C;
  o.kind = K;
  for (int i = 0; i < n; ++i) q[i] = quantize_with(x[i], s, o);
}

using RowFn = void (*)(const float*, uint8_t*, int, BlockScale);

template <ScaleConvention C>
RowFn pick_kind(Fp8Kind k) {
  return k == Fp8Kind::e4m3 ? &quantize_row<C, Fp8Kind::e4m3> : &quantize_row<C, Fp8Kind::e5m2>;
}

RowFn pick_row_fn(const ScaleOptions& o) {
  switch (o.convention) {
    case ScaleConvention::te: return pick_kind<ScaleConvention::te>(o.kind);
    case ScaleConvention::vllm: return pick_kind<ScaleConvention::vllm>(o.kind);
    case ScaleConvention::deepgemm: return pick_kind<ScaleConvention::deepgemm>(o.kind);
    case ScaleConvention::nemo_refit: return pick_kind<ScaleConvention::nemo_refit>(o.kind);
  }
  return pick_kind<ScaleConvention::te>(o.kind);
}

}  // namespace

Fp8Tensor quantize_blocks(const float* x, int rows, int cols, int block_rows, int block_cols,
                          const ScaleOptions& opt) {
  Fp8Tensor t;
  quantize_blocks_into(x, rows, cols, block_rows, block_cols, opt, t);
  return t;
}

namespace {

// The block-row loop of quantize_blocks_into over a matrix whose rows `block_rows_of(r0, r1, buf)`
// supplies (a pointer to rows [r0, r1), cols floats each, possibly written into buf); `last` is the
// matrix's last element (NeMo RL's edge padding, block_amax).
template <class BlockRows>
void quantize_block_rows(const BlockRows& block_rows_of, float last, int rows, int cols, int block_rows,
                         int block_cols, const ScaleOptions& opt, Fp8Tensor& t) {
  const int rb = t.row_blocks(), cb = t.col_blocks();
  const RowFn row_fn = pick_row_fn(opt);
  // Both passes walk whole rows of the block row (amax of every column block, then the codes):
  // long contiguous streams that the hardware prefetchers follow, instead of 128-float pieces of
  // 128 rows. The second pass reads the block row back from cache.
  rlp::parallel_for(static_cast<size_t>(rb), 1, [&](size_t b0, size_t b1) {
    std::vector<AmaxAcc> acc(static_cast<size_t>(cb));
    std::vector<BlockScale> scales(static_cast<size_t>(cb));
    for (size_t br = b0; br < b1; ++br) {
      const int r0 = static_cast<int>(br) * block_rows;
      const int r1 = std::min(rows, r0 + block_rows);
      const float* xb = block_rows_of(r0, r1);
      std::fill(acc.begin(), acc.end(), AmaxAcc{});
      for (int r = r0; r < r1; ++r) {
        const float* row = xb + static_cast<size_t>(r - r0) * static_cast<size_t>(cols);
        for (int bc = 0; bc < cb; ++bc) {
          const int c0 = bc * block_cols;
          amax_row(row + c0, std::min(cols, c0 + block_cols) - c0, acc[static_cast<size_t>(bc)]);
        }
      }
      for (int bc = 0; bc < cb; ++bc) {
        const int c0 = bc * block_cols, c1 = std::min(cols, c0 + block_cols);
        const AmaxAcc& a = acc[static_cast<size_t>(bc)];
        const bool partial = (r1 - r0) < block_rows || (c1 - c0) < block_cols;
        const float amax = block_amax(a.bits, a.nan != 0, partial, last, opt.convention);
        scales[static_cast<size_t>(bc)] = compute_block_scale(amax, opt);
        t.scale_inv[br * static_cast<size_t>(cb) + static_cast<size_t>(bc)] =
            scales[static_cast<size_t>(bc)].scale_inv;
      }
      for (int r = r0; r < r1; ++r) {
        const size_t in = static_cast<size_t>(r - r0) * static_cast<size_t>(cols);
        const size_t off = static_cast<size_t>(r) * static_cast<size_t>(cols);
        for (int bc = 0; bc < cb; ++bc) {
          const int c0 = bc * block_cols;
          row_fn(xb + in + static_cast<size_t>(c0), t.codes.data() + off + static_cast<size_t>(c0),
                 std::min(cols, c0 + block_cols) - c0, scales[static_cast<size_t>(bc)]);
        }
      }
    }
  });
}

// Shape checks and the output's buffers; false when there is nothing to quantize.
bool shape_output(int rows, int cols, int block_rows, int block_cols, const ScaleOptions& opt, Fp8Tensor& t) {
  RLP_CHECK(rows >= 0 && cols >= 0, "quantize_blocks: negative shape {}x{}", rows, cols);
  RLP_CHECK(block_rows > 0 && block_cols > 0, "quantize_blocks: block shape {}x{} must be positive",
            block_rows, block_cols);
  t.rows = rows;
  t.cols = cols;
  t.block_rows = block_rows;
  t.block_cols = block_cols;
  t.kind = opt.kind;
  t.codes.resize(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  t.scale_inv.resize(static_cast<size_t>(t.row_blocks()) * static_cast<size_t>(t.col_blocks()));
  return rows != 0 && cols != 0;
}

}  // namespace

void quantize_blocks_into(const float* x, int rows, int cols, int block_rows, int block_cols,
                          const ScaleOptions& opt, Fp8Tensor& t) {
  RLP_CHECK(x != nullptr || rows * cols == 0, "quantize_blocks: null input");
  if (!shape_output(rows, cols, block_rows, block_cols, opt, t)) return;
  const float last = x[static_cast<size_t>(rows) * static_cast<size_t>(cols) - 1];
  quantize_block_rows([&](int r0, int) { return x + static_cast<size_t>(r0) * static_cast<size_t>(cols); },
                      last, rows, cols, block_rows, block_cols, opt, t);
}

void quantize_blocks_into(const std::function<void(int r0, int r1, float* dst)>& rows_of, int rows, int cols,
                          int block_rows, int block_cols, const ScaleOptions& opt, Fp8Tensor& t) {
  if (!shape_output(rows, cols, block_rows, block_cols, opt, t)) return;
  std::vector<float> last_row(static_cast<size_t>(cols));
  rows_of(rows - 1, rows, last_row.data());
  // One block row at a time per thread, in a buffer that keeps its capacity across calls (a fresh
  // multi-megabyte allocation per block row would be fresh pages, i.e. page faults, every time).
  quantize_block_rows(
      [&](int r0, int r1) {
        thread_local std::vector<float> buf;
        buf.resize(static_cast<size_t>(r1 - r0) * static_cast<size_t>(cols));
        rows_of(r0, r1, buf.data());
        return static_cast<const float*>(buf.data());
      },
      last_row.back(), rows, cols, block_rows, block_cols, opt, t);
}

void quantize_per_token_vllm(const float* x, int rows, int cols, Fp8Tensor& t) {
  RLP_CHECK(rows >= 0 && cols > 0, "quantize_per_token_vllm: shape {}x{}", rows, cols);
  RLP_CHECK(x != nullptr || rows == 0, "quantize_per_token_vllm: null input");
  t.rows = rows;
  t.cols = cols;
  t.block_rows = 1;
  t.block_cols = cols;
  t.kind = Fp8Kind::e4m3;
  t.codes.resize(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  t.scale_inv.resize(static_cast<size_t>(rows));
  rlp::parallel_for(static_cast<size_t>(rows), 1, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* row = x + r * static_cast<size_t>(cols);
      AmaxAcc a;
      amax_row(row, cols, a);  // fmaxf's NaN-ignoring max, as the kernel's per-thread fmaxf
      const float scale = vllm_token_scale(std::bit_cast<float>(a.bits));
      t.scale_inv[r] = scale;
      uint8_t* q = t.codes.data() + r * static_cast<size_t>(cols);
      for (int c = 0; c < cols; ++c) q[c] = vllm_token_quantize(row[c], scale);
    }
  });
}

void dequantize(const Fp8Tensor& t, float* out) {
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8_to_float(static_cast<uint8_t>(c), t.kind);
  const int cb = t.col_blocks();
  rlp::parallel_for(static_cast<size_t>(t.rows), 16, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* srow =
          t.scale_inv.data() + (r / static_cast<size_t>(t.block_rows)) * static_cast<size_t>(cb);
      const uint8_t* q = t.codes.data() + r * static_cast<size_t>(t.cols);
      float* o = out + r * static_cast<size_t>(t.cols);
      for (int c = 0; c < t.cols; ++c) o[c] = lut[q[c]] * srow[c / t.block_cols];
    }
  });
}

std::vector<float> scales_for_cublaslt_vec128(const Fp8Tensor& t) {
  RLP_CHECK(t.block_rows == 1 && t.block_cols == 128,
            "scales_for_cublaslt_vec128 needs 1x128 blocks, tensor has {}x{}", t.block_rows, t.block_cols);
  const int kb = t.col_blocks(), ld = cublaslt_scale_ld(t.rows);
  std::vector<float> out(static_cast<size_t>(kb) * static_cast<size_t>(ld));
  for (size_t i = 0; i < out.size(); ++i) out[i] = vec128_scale_entry(t.scale_inv.data(), t.rows, kb, ld, i);
  return out;
}

std::vector<float> scales_for_cublaslt_blk128(const Fp8Tensor& t) {
  RLP_CHECK(t.block_rows == 128 && t.block_cols == 128,
            "scales_for_cublaslt_blk128 needs 128x128 blocks, tensor has {}x{}", t.block_rows, t.block_cols);
  const size_t mb = static_cast<size_t>(t.row_blocks()), kb = static_cast<size_t>(t.col_blocks());
  const size_t ld = static_cast<size_t>(cublaslt_scale_ld(static_cast<int>(kb)));
  std::vector<float> out(mb * ld, 0.0f);
  for (size_t r = 0; r < mb; ++r)
    for (size_t b = 0; b < kb; ++b) out[r * ld + b] = t.scale_inv[r * kb + b];
  return out;
}

}  // namespace rlp::num
