// Where prepared weights live (issue 15's memory plan): act-dtype forms of a checkpoint stored in the
// act dtype are views of the mapping, other forms own their converted bits; the float64 oracle holds
// no matrix and widens rows from the mapping. Checked against the stored bytes and hand conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

class WeightMemory : public rlp_test::ScratchDirTest {
 protected:
  std::string make(DType dtype, bool tied = false) {
    RandomCheckpointOptions o;
    o.dtype = dtype;
    o.tied = tied;
    o.out = (dir_ / dtype_name(dtype)).string() + (tied ? "_tied" : "");
    write_random_checkpoint(o);
    return o.out;
  }
};

PathStyle style(num::Half16 act) {
  PathStyle s = default_training_style();
  s.act = act;
  return s;
}

// Every 16-bit matrix of a form, with the checkpoint tensor it came from.
template <class Fn>
void each_matrix(const Checkpoint& ck, const PreparedWeights& w, const Fn& fn) {
  fn(ck.tensor("model.embed_tokens.weight"), w.embed);
  fn(ck.tensor(ck.spec().tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"), w.lm_head.w);
  for (int l = 0; l < ck.spec().layers; ++l)
    for (int p = 0; p < kNumProj; ++p)
      fn(ck.tensor(layer_tensor_name(l, proj_tensor_suffix(static_cast<Proj>(p))) + ".weight"),
         w.layers[static_cast<std::size_t>(l)].proj[p].w);
}

TEST_F(WeightMemory, ABf16FormOfABf16CheckpointIsTheMappingItself) {
  for (const bool tied : {false, true}) {
    const Checkpoint ck = Checkpoint::open(make(DType::bf16, tied));
    const PreparedWeights w = prepare_weights(ck, style(num::Half16::bf16));
    each_matrix(ck, w, [](const TensorView& t, const Half16Bits& b) {
      EXPECT_TRUE(b.mapped()) << t.name;
      EXPECT_EQ(static_cast<const void*>(b.data()), static_cast<const void*>(t.data)) << t.name;
      EXPECT_EQ(b.size(), static_cast<std::size_t>(t.numel())) << t.name;
      EXPECT_EQ(b.owned_bytes(), 0u);
    });
    // An fp16 path reads the same checkpoint through its own converted copy.
    const PreparedWeights h = prepare_weights(ck, style(num::Half16::fp16));
    each_matrix(ck, h, [](const TensorView& t, const Half16Bits& b) {
      EXPECT_FALSE(b.mapped()) << t.name;
      for (std::size_t i = 0; i < b.size(); i += 97)
        ASSERT_EQ(b[i], num::float_to_fp16_bits(t.at(static_cast<int64_t>(i)))) << t.name << " " << i;
    });
  }
}

TEST_F(WeightMemory, AnFp32CheckpointIsConvertedOnce) {
  const Checkpoint ck = Checkpoint::open(make(DType::fp32));
  const PreparedWeights w = prepare_weights(ck, style(num::Half16::bf16));
  each_matrix(ck, w, [](const TensorView& t, const Half16Bits& b) {
    EXPECT_FALSE(b.mapped()) << t.name;
    EXPECT_EQ(b.owned_bytes(), 2u * static_cast<std::size_t>(t.numel()));
    for (std::size_t i = 0; i < b.size(); i += 89)
      ASSERT_EQ(b[i], num::float_to_bf16_bits(t.at(static_cast<int64_t>(i)))) << t.name << " " << i;
  });
}

// A stored NaN with a payload would reach the kernels as stored through a view, while the conversion
// canonicalises it (0x7FFF): such a tensor is copied, so both give the same bits.
TEST_F(WeightMemory, ATensorHoldingANaNIsCopiedWithTheCanonicalNaN) {
  const std::string dir = make(DType::bf16);
  const std::string file = dir + "/model.safetensors";
  {
    const Checkpoint ck = Checkpoint::open(dir);
    const TensorView& t = ck.tensor("model.layers.0.mlp.up_proj.weight");
    std::vector<TensorData> tensors;
    for (const auto& [name, v] : ck.tensors()) {
      TensorData d{name, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)};
      if (name == t.name) {
        const uint16_t nan = 0x7FC1;  // a quiet NaN with a payload
        std::memcpy(d.bytes.data() + 6, &nan, 2);
      }
      tensors.push_back(std::move(d));
    }
    write_safetensors(file, tensors);
  }
  CheckpointOptions co;
  co.allow_nonfinite = true;
  const Checkpoint ck = Checkpoint::open(dir, co);
  const PreparedWeights w = prepare_weights(ck, style(num::Half16::bf16));
  const Half16Bits& up = w.layers[0][Proj::up].w;
  EXPECT_FALSE(up.mapped());
  EXPECT_EQ(up[3], 0x7FFF);
  EXPECT_TRUE(w.layers[0][Proj::gate].w.mapped());
}

TEST_F(WeightMemory, TheOracleWidensRowsFromTheMapping) {
  const Checkpoint ck = Checkpoint::open(make(DType::bf16));
  const OracleWeights o = prepare_oracle_weights(ck);
  const TensorView& q = ck.tensor("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(o.layers[1][Proj::q].w, &q);
  EXPECT_EQ(o.embed, &ck.tensor("model.embed_tokens.weight"));
  const int64_t cols = q.shape[1];
  std::vector<double> row(static_cast<std::size_t>(cols));
  q.to_double(5 * cols, cols, row.data());
  for (int64_t c = 0; c < cols; ++c) {
    uint16_t bits;
    std::memcpy(&bits, q.data + 2 * (5 * cols + c), 2);
    ASSERT_EQ(row[static_cast<std::size_t>(c)], static_cast<double>(num::bf16_bits_to_float(bits))) << c;
  }
}

}  // namespace
}  // namespace rlp
