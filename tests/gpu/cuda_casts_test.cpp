// GPU casts and block quantization against the CPU emulator, bitwise: the kernels call the same
// numerics headers, so any difference is a bug (or a device flush-to-zero setting). Skips with a
// message when no CUDA device is usable.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/numerics/scaling.hpp"

#if RLPARITY_HAVE_CUDA
#include "cuda_casts.hpp"
#endif

namespace rlp::num {
namespace {

#if RLPARITY_HAVE_CUDA
#define RLP_REQUIRE_GPU()                                                              \
  do {                                                                                 \
    std::string why;                                                                   \
    if (!rlp::cuda::device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)
#else
#define RLP_REQUIRE_GPU() GTEST_SKIP() << "built without the CUDA toolkit (kernels/ not compiled)"
#endif

[[maybe_unused]] std::vector<float> sample_floats() {
  std::vector<float> v;
  std::mt19937 rng(1u);
  for (uint32_t e = 0; e < 256; ++e)
    for (int i = 0; i < 512; ++i)
      v.push_back(bits_f32((e << 23) | (static_cast<uint32_t>(rng()) & 0x807FFFFFu)));
  return v;
}

[[maybe_unused]] std::vector<float> random_matrix(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (float& v : x) v = d(rng) * (rng() % 7 == 0 ? 50.0f : 1.0f);
  return x;
}

TEST(CudaCasts, Fp8AndBf16MatchHost) {
  RLP_REQUIRE_GPU();
#if RLPARITY_HAVE_CUDA
  const auto x = sample_floats();
  for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2})
    for (Saturation s : {Saturation::none, Saturation::satfinite}) {
      std::vector<uint8_t> out(x.size());
      rlp::cuda::cast_to_fp8(x.data(), out.data(), x.size(), k, s);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(out[i], float_to_fp8(x[i], k, s)) << std::hexfloat << x[i];
    }
  std::vector<uint16_t> b(x.size());
  rlp::cuda::cast_to_bf16(x.data(), b.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(b[i], float_to_bf16_bits(x[i])) << std::hexfloat << x[i];
#endif
}

TEST(CudaCasts, BlockQuantizeMatchesHost) {
  RLP_REQUIRE_GPU();
#if RLPARITY_HAVE_CUDA
  struct Case {
    int rows, cols, br, bc;
  };
  const Case cases[] = {
      {130, 200, 128, 128}, {3, 172, 1, 128}, {256, 384, 128, 128}, {17, 1000, 1, 128}, {5, 9, 5, 9}};
  for (ScaleConvention c :
       {ScaleConvention::te, ScaleConvention::vllm, ScaleConvention::deepgemm, ScaleConvention::nemo_refit})
    for (bool pow2 : {false, true})
      for (const Case& cs : cases) {
        ScaleOptions o;
        o.convention = c;
        o.pow2 = pow2;
        auto x = random_matrix(cs.rows, cs.cols, 3);
        x[7] = 0.0f;
        const Fp8Tensor h = quantize_blocks(x.data(), cs.rows, cs.cols, cs.br, cs.bc, o);
        const Fp8Tensor d = rlp::cuda::quantize_blocks(x.data(), cs.rows, cs.cols, cs.br, cs.bc, o);
        ASSERT_EQ(h.scale_inv.size(), d.scale_inv.size());
        for (size_t i = 0; i < h.scale_inv.size(); ++i)
          ASSERT_EQ(f32_bits(h.scale_inv[i]), f32_bits(d.scale_inv[i]))
              << "block " << i << " conv " << static_cast<int>(c) << " pow2 " << pow2;
        ASSERT_EQ(h.codes, d.codes) << "conv " << static_cast<int>(c) << " pow2 " << pow2 << " " << cs.rows
                                    << "x" << cs.cols;
      }
#endif
}

}  // namespace
}  // namespace rlp::num
