// Checkpoint loading: the stories260K fixture, generated checkpoints of every architecture, and
// every kind of bad input, each error checked for the file and the tensor/key it must name.
#include "rlparity/model/checkpoint.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using rlp::Checkpoint;
using rlp::DType;

namespace {

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("rlp_ckpt_test_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path operator/(const std::string& s) const { return path_ / s; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// Runs f, expects an InputError whose message contains every one of `parts`.
void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const rlp::InputError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message lacks '" << p << "': " << msg;
    return;
  } catch (const std::exception& e) {
    FAIL() << "expected InputError, got other exception: " << e.what();
  }
  FAIL() << "expected InputError, nothing thrown";
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& p) {
  std::ifstream i(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(i), {});
}

// A raw safetensors file: given header text (unpadded) and `data` bytes; `len` overrides the length field.
std::string raw_safetensors(const std::string& header, const std::string& data, int64_t len = -1) {
  const uint64_t n = len < 0 ? header.size() : static_cast<uint64_t>(len);
  std::string s(8, '\0');
  for (int k = 0; k < 8; ++k) s[static_cast<std::size_t>(k)] = static_cast<char>((n >> (8 * k)) & 0xFF);
  return s + header + data;
}

rlp::RandomCheckpointOptions small(const std::string& arch, const std::string& out) {
  rlp::RandomCheckpointOptions o;
  o.arch = arch;
  o.hidden = 32;
  o.intermediate = 48;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 64;
  o.max_pos = 128;
  o.seed = 7;
  o.out = out;
  return o;
}

std::vector<rlp::TensorData> tensors_of(const Checkpoint& c) {
  std::vector<rlp::TensorData> r;
  for (const auto& [name, v] : c.tensors()) {
    rlp::TensorData t;
    t.name = name;
    t.dtype = v.dtype;
    t.shape = v.shape;
    t.bytes.assign(v.data, v.data + v.nbytes);
    r.push_back(std::move(t));
  }
  return r;
}

// Rewrites dir/model.safetensors after `edit` changes its tensor list.
void rewrite(const std::string& dir, const std::function<void(std::vector<rlp::TensorData>&)>& edit) {
  std::vector<rlp::TensorData> ts;
  {
    rlp::CheckpointOptions opt;
    opt.allow_nonfinite = true;
    const Checkpoint c = Checkpoint::open(dir, opt);
    ts = tensors_of(c);
  }
  edit(ts);
  rlp::write_safetensors(dir + "/model.safetensors", ts);
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  json c = json::parse(read_file(fs::path(dir) / "config.json"));
  edit(c);
  write_file(fs::path(dir) / "config.json", c.dump(2));
}

json base_config() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
    "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "hidden_act": "silu"})");
}

}  // namespace

// ---- stories260K --------------------------------------------------------------------------------
TEST(Checkpoint, Stories260KF32) {
  const Checkpoint c = Checkpoint::open(kStories);
  const rlp::ModelSpec& s = c.spec();
  EXPECT_EQ(s.arch, rlp::Arch::llama);
  EXPECT_EQ(s.arch_name, "LlamaForCausalLM");
  EXPECT_EQ(s.hidden, 64);
  EXPECT_EQ(s.intermediate, 172);
  EXPECT_EQ(s.layers, 5);
  EXPECT_EQ(s.heads, 8);
  EXPECT_EQ(s.kv_heads, 4);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.vocab, 512);
  EXPECT_EQ(s.max_positions, 512);
  EXPECT_DOUBLE_EQ(s.rms_eps, 1e-5);
  EXPECT_DOUBLE_EQ(s.rope_theta, 10000.0);
  EXPECT_TRUE(s.tied_embeddings);
  EXPECT_FALSE(s.qkv_bias);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.rope_scaling.type, rlp::RopeScaling::Type::none);
  EXPECT_EQ(s.bos_token, 1);
  EXPECT_EQ(s.eos_token, 2);
  EXPECT_TRUE(c.unused_tensors().empty());
  EXPECT_EQ(c.tensors().size(), 1u + 5u * 9u + 1u);
  const auto& emb = c.tensor("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype, DType::fp32);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(emb.numel(), 512 * 64);
  EXPECT_EQ(c.content_hash().size(), 16u);
  const Checkpoint again = Checkpoint::open(kStories);
  EXPECT_EQ(c.content_hash(), again.content_hash());
  EXPECT_FALSE(c.has("lm_head.weight"));
  expect_input_error([&] { (void)c.tensor("nope"); }, {"nope"});
  const json j = s.to_json();
  EXPECT_EQ(j.at("hidden"), 64);
  EXPECT_EQ(j.at("tied_embeddings"), true);
}

TEST(Checkpoint, Stories260KBf16IsF32RoundedToNearestEven) {
  const Checkpoint f = Checkpoint::open(kStories);
  const Checkpoint b = Checkpoint::open(kStories + "/bf16");
  EXPECT_NE(f.content_hash(), b.content_hash());
  EXPECT_EQ(b.tensors().size(), f.tensors().size());
  std::size_t checked = 0;
  for (const auto& [name, bv] : b.tensors()) {
    ASSERT_EQ(bv.dtype, DType::bf16) << name;
    const auto& fv = f.tensor(name);
    ASSERT_EQ(bv.shape, fv.shape);
    const int64_t n = fv.numel();
    std::vector<float> fb(static_cast<std::size_t>(n));
    std::vector<double> db(static_cast<std::size_t>(n));
    bv.to_float(fb.data());
    bv.to_double(db.data());
    for (int64_t i = 0; i < n; i += 7) {
      const float want = rlp::num::round_bf16(fv.at(i));
      ASSERT_EQ(bv.at(i), want) << name << "[" << i << "]";
      ASSERT_EQ(fb[static_cast<std::size_t>(i)], want);
      ASSERT_EQ(db[static_cast<std::size_t>(i)], static_cast<double>(want));
      ++checked;
    }
  }
  EXPECT_GT(checked, 10000u);
}

TEST(Checkpoint, Xxh64KnownValues) {
  EXPECT_EQ(rlp::xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(rlp::xxh64("abc", 3), 0x44BC2CF5AD770999ull);
  const std::string s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(rlp::xxh64(s.data(), s.size()), 0xFBCEA83C8A378BF1ull);
}

// ---- generated checkpoints ---------------------------------------------------------------------
TEST(Checkpoint, EveryArchitectureDtypeAndLayoutOpens) {
  TempDir tmp;
  int k = 0;
  for (const std::string arch : {"llama", "llama3", "qwen2", "qwen3", "mistral"}) {
    for (const DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
      for (const int shards : {1, 3}) {
        std::string sub = "c";
        sub += std::to_string(k++);
        auto o = small(arch, (tmp / sub).string());
        o.dtype = dt;
        o.shards = shards;
        o.tied = (k % 2) == 0;
        if (arch == "qwen3") o.head_dim = 16;  // heads * head_dim != hidden, as in real Qwen3
        rlp::write_random_checkpoint(o);
        const Checkpoint c = Checkpoint::open(o.out);
        const auto& s = c.spec();
        SCOPED_TRACE(arch + " shards " + std::to_string(shards));
        EXPECT_EQ(s.qkv_bias, arch == "qwen2");
        EXPECT_EQ(s.qk_norm, arch == "qwen3");
        EXPECT_EQ(s.tied_embeddings, o.tied);
        EXPECT_EQ(s.head_dim, arch == "qwen3" ? 16 : 8);
        EXPECT_EQ(s.rope_scaling.type,
                  arch == "llama3" ? rlp::RopeScaling::Type::llama3 : rlp::RopeScaling::Type::none);
        EXPECT_EQ(fs::exists(fs::path(o.out) / "model.safetensors.index.json"), shards > 1);
        EXPECT_TRUE(c.unused_tensors().empty());
        EXPECT_EQ(c.has("lm_head.weight"), !o.tied);
        EXPECT_EQ(c.tensor("model.layers.1.mlp.down_proj.weight").dtype, dt);
        if (arch == "qwen3") {
          EXPECT_EQ(c.tensor("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<int64_t>{64, 32}));
        }
      }
    }
  }
}

// The streaming writer writes what its header announced, in order, or refuses.
TEST(Checkpoint, SafetensorsWriterTakesTheAnnouncedTensorsInOrder) {
  TempDir tmp;
  const std::string path = (tmp / "x.safetensors").string();
  const rlp::TensorData a = rlp::make_tensor("a", DType::fp32, {2}, {1.0f, 2.0f});
  const rlp::TensorData b = rlp::make_tensor("b", DType::bf16, {3}, {1.0f, 2.0f, 3.0f});
  const std::vector<rlp::TensorHeader> both = {{"a", DType::fp32, {2}}, {"b", DType::bf16, {3}}};
  {
    rlp::SafetensorsWriter w(path, both);
    EXPECT_THROW(w.write(b), rlp::Error);  // announced second
  }
  {
    rlp::SafetensorsWriter w(path, both);
    w.write(a);
    EXPECT_THROW(w.close(), rlp::Error);  // b never came
  }
  {
    rlp::SafetensorsWriter w(path, both);
    w.write(a);
    w.write(b);
    EXPECT_THROW(w.write(b), rlp::Error);  // nothing left to write
    w.close();
  }
  // The same bytes as the whole-list writer.
  const std::string whole = (tmp / "y.safetensors").string();
  rlp::write_safetensors(whole, {a, b});
  EXPECT_EQ(read_file(path), read_file(whole));
}

TEST(Checkpoint, GeneratorIsDeterministicAndDtypesShareValues) {
  TempDir tmp;
  auto a = small("qwen2", (tmp / "a").string());
  auto b = a;
  b.out = (tmp / "b").string();
  auto c16 = a;
  c16.out = (tmp / "c").string();
  c16.dtype = DType::bf16;
  auto sh = a;
  sh.out = (tmp / "d").string();
  sh.shards = 4;
  for (const auto* o : {&a, &b, &c16, &sh}) rlp::write_random_checkpoint(*o);
  const Checkpoint ca = Checkpoint::open(a.out), cb = Checkpoint::open(b.out), cc = Checkpoint::open(c16.out),
                   cd = Checkpoint::open(sh.out);
  EXPECT_EQ(ca.content_hash(), cb.content_hash());
  EXPECT_EQ(read_file(fs::path(a.out) / "model.safetensors"),
            read_file(fs::path(b.out) / "model.safetensors"));
  for (const auto& [name, v] : ca.tensors()) {
    const auto& w = cc.tensor(name);
    const auto& s = cd.tensor(name);
    for (int64_t i = 0; i < v.numel(); ++i) {
      ASSERT_EQ(w.at(i), rlp::num::round_bf16(v.at(i))) << name;
      ASSERT_EQ(s.at(i), v.at(i)) << name;
    }
  }
  // Different seed, different weights.
  auto e = a;
  e.out = (tmp / "e").string();
  e.seed = 8;
  rlp::write_random_checkpoint(e);
  EXPECT_NE(Checkpoint::open(e.out).content_hash(), ca.content_hash());
  // Values are sensible: norm weights near 1, projections small and not degenerate.
  const auto& n = ca.tensor("model.layers.0.input_layernorm.weight");
  for (int64_t i = 0; i < n.numel(); ++i) EXPECT_NEAR(n.at(i), 1.0, 0.6);
  const auto& q = ca.tensor("model.layers.0.self_attn.q_proj.weight");
  double ss = 0;
  for (int64_t i = 0; i < q.numel(); ++i) ss += double(q.at(i)) * q.at(i);
  const double rms = std::sqrt(ss / static_cast<double>(q.numel()));
  EXPECT_NEAR(rms, 1.0 / std::sqrt(32.0), 0.03);
}

TEST(Checkpoint, OutlierChannelIsScaled) {
  TempDir tmp;
  auto a = small("llama", (tmp / "a").string());
  auto b = a;
  b.out = (tmp / "b").string();
  b.outlier_layer = 1;
  b.outlier_scale = 50.0;
  b.outlier_channel = 5;
  rlp::write_random_checkpoint(a);
  rlp::write_random_checkpoint(b);
  const Checkpoint ca = Checkpoint::open(a.out), cb = Checkpoint::open(b.out);
  for (const char* t :
       {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "self_attn.o_proj.weight"}) {
    const bool scaled = std::string(t).find("down") == std::string::npos &&
                        std::string(t).find("o_proj") == std::string::npos;
    for (int layer : {0, 1}) {
      const auto& va = ca.tensor(rlp::layer_tensor_name(layer, t));
      const auto& vb = cb.tensor(rlp::layer_tensor_name(layer, t));
      const int64_t cols = va.shape[1];
      for (int64_t i = 0; i < va.numel(); ++i) {
        const bool outlier = scaled && layer == 1 && i % cols == 5;
        ASSERT_EQ(vb.at(i), outlier ? static_cast<float>(va.at(i) * 50.0) : va.at(i))
            << t << " " << layer << " " << i;
      }
    }
  }
}

TEST(Checkpoint, HashIndependentOfThreadCountAndSensitiveToBytes) {
  TempDir tmp;
  auto o = small("llama", (tmp / "a").string());
  o.vocab = 8192;  // embeddings 8192 x 32 x 4 bytes = 1 MiB: several hash units with lm_head
  o.hidden = 64;
  o.heads = 4;
  o.shards = 2;
  rlp::write_random_checkpoint(o);
  const int before = rlp::thread_count();
  rlp::set_thread_count(1);
  const std::string h1 = Checkpoint::open(o.out).content_hash();
  rlp::set_thread_count(2);
  const std::string h2 = Checkpoint::open(o.out).content_hash();
  rlp::set_thread_count(5);
  const std::string h5 = Checkpoint::open(o.out).content_hash();
  rlp::set_thread_count(before);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(h1, h5);
  // One flipped bit deep in a tensor changes the hash.
  const fs::path f = fs::path(o.out) / "model-00001-of-00002.safetensors";
  std::string bytes = read_file(f);
  bytes[bytes.size() - 1000] = static_cast<char>(bytes[bytes.size() - 1000] ^ 1);
  write_file(f, bytes);
  EXPECT_NE(Checkpoint::open(o.out).content_hash(), h1);
}

TEST(Checkpoint, UnusedTensorsAreListed) {
  TempDir tmp;
  auto o = small("llama", (tmp / "a").string());
  o.tied = true;
  rlp::write_random_checkpoint(o);
  rewrite(o.out, [](std::vector<rlp::TensorData>& ts) {
    ts.push_back(
        rlp::make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", DType::fp32, {4}, {1, 2, 3, 4}));
  });
  const Checkpoint c = Checkpoint::open(o.out);
  EXPECT_EQ(c.unused_tensors(), (std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"}));
  // Tied, but lm_head present with the wrong shape: refused.
  rewrite(o.out, [](std::vector<rlp::TensorData>& ts) {
    ts.push_back(
        rlp::make_tensor("lm_head.weight", DType::fp32, {32, 64}, std::vector<float>(64 * 32, 0.5f)));
  });
  expect_input_error([&] { Checkpoint::open(o.out); }, {"model.safetensors", "lm_head.weight", "[32, 64]"});
}

// A tied checkpoint may store the shared matrix as lm_head.weight only, as embed_tokens only, or as
// both when they are equal (transformers ties them on load); two different matrices are refused.
TEST(Checkpoint, TiedEmbeddingStoredUnderEitherName) {
  TempDir tmp;
  auto o = small("llama", (tmp / "a").string());
  o.tied = true;
  rlp::write_random_checkpoint(o);
  const std::string embed = "model.embed_tokens.weight", head = "lm_head.weight";
  std::string embed_bytes;
  {
    const Checkpoint c = Checkpoint::open(o.out);
    const rlp::TensorView& t = c.tensor(embed);
    embed_bytes.assign(reinterpret_cast<const char*>(t.data), t.nbytes);
    EXPECT_FALSE(c.has(head));
  }
  // lm_head.weight only (the TinyStories-656K layout): embed_tokens is served from it.
  rewrite(o.out, [&](std::vector<rlp::TensorData>& ts) {
    for (auto& t : ts)
      if (t.name == embed) t.name = head;
  });
  {
    const Checkpoint c = Checkpoint::open(o.out);
    ASSERT_TRUE(c.has(embed));
    const rlp::TensorView& t = c.tensor(embed);
    EXPECT_EQ(t.name, head);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data), t.nbytes), embed_bytes);
    EXPECT_TRUE(c.unused_tensors().empty());
    EXPECT_EQ(c.tensors().count(embed), 0u);  // an alias, not a second stored tensor
  }
  // Both, equal: accepted, neither unused.
  rewrite(o.out, [&](std::vector<rlp::TensorData>& ts) {
    rlp::TensorData copy = ts.front();
    for (const auto& t : ts)
      if (t.name == head) copy = t;
    copy.name = embed;
    ts.push_back(copy);
  });
  {
    const Checkpoint c = Checkpoint::open(o.out);
    EXPECT_TRUE(c.unused_tensors().empty());
    EXPECT_EQ(c.tensor(embed).name, embed);
  }
  // Both, one value different: refused, naming both tensors.
  std::vector<rlp::TensorData> equal;
  rewrite(o.out, [&](std::vector<rlp::TensorData>& ts) {
    equal = ts;
    for (auto& t : ts)
      if (t.name == head) t.bytes[5] ^= 0x01;
  });
  expect_input_error([&] { Checkpoint::open(o.out); }, {embed, head, "tie_word_embeddings", "different"});
  // Neither: the embedding is named as missing.
  std::erase_if(equal, [&](const rlp::TensorData& t) { return t.name == embed || t.name == head; });
  rlp::write_safetensors(o.out + "/model.safetensors", equal);
  expect_input_error([&] { Checkpoint::open(o.out); }, {embed, "missing"});
}

// generation_config.json's eos ids join config.json's as stop ids (in that order, without repeats);
// a malformed one is refused by name.
TEST(Checkpoint, GenerationConfigStopTokens) {
  TempDir tmp;
  auto o = small("llama", (tmp / "a").string());
  rlp::write_random_checkpoint(o);
  const std::string hash_before = Checkpoint::open(o.out).content_hash();
  write_file(tmp / "a" / "generation_config.json", R"({"eos_token_id": [7, 2, 9], "temperature": 0.6})");
  const Checkpoint c = Checkpoint::open(o.out);
  EXPECT_EQ(c.spec().eos_token, 2);
  EXPECT_EQ(c.spec().stop_tokens, (std::vector<int>{2, 7, 9}));
  EXPECT_NE(c.content_hash(), hash_before);
  write_file(tmp / "a" / "generation_config.json", R"({"eos_token_id": "two"})");
  expect_input_error([&] { Checkpoint::open(o.out); }, {"generation_config.json", "eos_token_id"});
  write_file(tmp / "a" / "generation_config.json", R"({"eos_token_id": [1, -3]})");
  expect_input_error([&] { Checkpoint::open(o.out); }, {"generation_config.json", "eos_token_id[1]"});
}

// ---- bad safetensors files ---------------------------------------------------------------------
class BadFile : public ::testing::Test {
 protected:
  void SetUp() override {
    auto o = small("llama", tmp.str());
    rlp::write_random_checkpoint(o);
    file = (tmp / "model.safetensors").string();
  }
  void expect(const std::vector<std::string>& parts) {
    std::vector<std::string> all = parts;
    all.push_back(file);
    expect_input_error([&] { Checkpoint::open(tmp.str()); }, all);
  }
  TempDir tmp;
  std::string file;
};

TEST_F(BadFile, Truncated) {
  const auto size = fs::file_size(file);
  fs::resize_file(file, size - 100);
  expect({"lm_head.weight", "past the end"});  // the last tensor written
}

TEST_F(BadFile, TooShortForLength) {
  write_file(file, "abc");
  expect({"too short"});
}

TEST_F(BadFile, HeaderLengthPastEndOfFile) {
  std::string b = read_file(file);
  const uint64_t n = b.size();  // > size - 8
  for (int k = 0; k < 8; ++k) b[static_cast<std::size_t>(k)] = static_cast<char>((n >> (8 * k)) & 0xFF);
  write_file(file, b);
  expect({"header length", "past the end"});
}

TEST_F(BadFile, HeaderOverCap) {
  write_file(file, raw_safetensors("{}", "", int64_t{200} << 20));
  expect({"header length", "100 MiB"});
}

TEST_F(BadFile, InvalidJson) {
  write_file(file, raw_safetensors(R"({"a": {"dtype": "F32", )", "        "));
  expect({"not valid JSON"});
}

TEST_F(BadFile, OverlappingRanges) {
  write_file(file, raw_safetensors(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                       "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                   std::string(12, '\0')));
  expect({"'x'", "'y'", "overlap"});
}

TEST_F(BadFile, UnsupportedAndUnknownDtype) {
  write_file(file, raw_safetensors(R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})",
                                   std::string(8, '\0')));
  expect({"'x'", "F64", "not supported"});
  write_file(file, raw_safetensors(R"({"w": {"dtype": "FLOAT", "shape": [2], "data_offsets": [0, 8]}})",
                                   std::string(8, '\0')));
  expect({"'w'", "unknown dtype 'FLOAT'"});
}

TEST_F(BadFile, ByteSizeMismatch) {
  write_file(file, raw_safetensors(R"({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})",
                                   std::string(8, '\0')));
  expect({"'x'", "needs 6 bytes", "span 8 bytes"});
}

TEST_F(BadFile, HugeShapeOverflows) {
  write_file(
      file,
      raw_safetensors(R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})",
                      std::string(8, '\0')));
  expect({"'x'", "too large"});
}

TEST_F(BadFile, NegativeShapeAndBadOffsets) {
  write_file(file, raw_safetensors(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", ""));
  expect({"'x'", "shape"});
  write_file(file, raw_safetensors(R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
                                   std::string(8, '\0')));
  expect({"'x'", "begin after end"});
}

TEST_F(BadFile, DuplicateTensorInHeader) {
  write_file(file, raw_safetensors(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                       "x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                                   std::string(8, '\0')));
  expect({"'x'", "twice"});
}

TEST_F(BadFile, MissingTensor) {
  rewrite(tmp.str(), [](std::vector<rlp::TensorData>& ts) {
    std::erase_if(ts, [](const rlp::TensorData& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  expect({"model.layers.1.mlp.up_proj.weight", "missing"});
}

TEST_F(BadFile, ShapeMismatch) {
  edit_config(tmp.str(), [](json& c) { c["intermediate_size"] = 40; });
  expect({"model.layers.0.mlp.gate_proj.weight", "[48, 32]", "[40, 32]"});
}

TEST_F(BadFile, NonFiniteWeights) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    for (const DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
      rewrite(tmp.str(), [&](std::vector<rlp::TensorData>& ts) {
        for (auto& t : ts) {
          if (t.name != "model.layers.1.self_attn.k_proj.weight") continue;
          std::vector<float> v(static_cast<std::size_t>(16 * 32), 0.25f);
          v[37] = bad;
          v[100] = bad;
          t = rlp::make_tensor(t.name, dt, t.shape, v);
        }
      });
      expect({"model.layers.1.self_attn.k_proj.weight", "non-finite", "index 37"});
      rlp::CheckpointOptions opt;
      opt.allow_nonfinite = true;
      const Checkpoint c = Checkpoint::open(tmp.str(), opt);
      EXPECT_TRUE(std::isnan(bad) ? std::isnan(c.tensor("model.layers.1.self_attn.k_proj.weight").at(37))
                                  : std::isinf(c.tensor("model.layers.1.self_attn.k_proj.weight").at(37)));
    }
  }
}

TEST(CheckpointNonFinite, LastElementOutsideWholeWords) {
  TempDir tmp;
  auto o = small("llama", tmp.str());
  o.hidden = 34;  // 34 x 2 bytes: the last elements are not in a whole 8-byte word
  o.heads = 1;
  o.kv_heads = 1;
  for (const DType dt : {DType::bf16, DType::fp16}) {
    o.dtype = dt;
    rlp::write_random_checkpoint(o);
    ASSERT_NO_THROW(Checkpoint::open(tmp.str()));
    rewrite(tmp.str(), [&](std::vector<rlp::TensorData>& ts) {
      for (auto& t : ts) {
        if (t.name != "model.norm.weight") continue;
        std::vector<float> v(34, 1.0f);
        v[33] = std::numeric_limits<float>::infinity();
        t = rlp::make_tensor(t.name, dt, t.shape, v);
      }
    });
    expect_input_error([&] { Checkpoint::open(tmp.str()); },
                       {"model.norm.weight", "index 33", "model.safetensors"});
  }
}

TEST_F(BadFile, NonFiniteInUnusedTensorIsAccepted) {
  rewrite(tmp.str(), [](std::vector<rlp::TensorData>& ts) {
    ts.push_back(
        rlp::make_tensor("extra.weight", DType::fp32, {2}, {1.0f, std::numeric_limits<float>::infinity()}));
  });
  const Checkpoint c = Checkpoint::open(tmp.str());
  EXPECT_EQ(c.unused_tensors(), std::vector<std::string>{"extra.weight"});
}

// ---- bad directories and configs ---------------------------------------------------------------
TEST(CheckpointDir, MissingConfigAndWeights) {
  TempDir tmp;
  expect_input_error([&] { Checkpoint::open((tmp / "nope").string()); }, {"nope", "not found"});
  auto o = small("llama", tmp.str());
  rlp::write_random_checkpoint(o);
  fs::remove(tmp / "config.json");
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {(tmp / "config.json").string(), "not found"});
  write_file(tmp / "config.json", "{\"architectures\": [");
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {(tmp / "config.json").string(), "invalid JSON"});
  fs::remove(tmp / "model.safetensors");
  rlp::write_random_checkpoint(o);
  fs::remove(tmp / "model.safetensors");
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {tmp.str(), "no weights"});
}

TEST(CheckpointDir, Shards) {
  TempDir tmp;
  auto o = small("qwen3", tmp.str());
  o.head_dim = 8;
  o.shards = 3;
  rlp::write_random_checkpoint(o);
  const fs::path s2 = tmp / "model-00002-of-00003.safetensors";
  const std::string s2_bytes = read_file(s2);
  const fs::path index = tmp / "model.safetensors.index.json";
  const std::string index_text = read_file(index);

  // Missing shard.
  fs::remove(s2);
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {s2.string(), "does not exist"});
  write_file(s2, s2_bytes);
  ASSERT_NO_THROW(Checkpoint::open(tmp.str()));

  // Index maps a tensor to another shard than the one holding it.
  json ix = json::parse(index_text);
  ix["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors";
  write_file(index, ix.dump());
  expect_input_error([&] { Checkpoint::open(tmp.str()); },
                     {"model.norm.weight", "model-00003-of-00003.safetensors"});

  // Index lists a tensor no shard has.
  ix = json::parse(index_text);
  ix["weight_map"]["model.extra"] = "model-00001-of-00003.safetensors";
  write_file(index, ix.dump());
  expect_input_error([&] { Checkpoint::open(tmp.str()); },
                     {"model.extra", "model-00001-of-00003.safetensors", "missing"});

  // A tensor in a shard that the index does not list.
  ix = json::parse(index_text);
  ix["weight_map"].erase("model.norm.weight");
  write_file(index, ix.dump());
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {"model.norm.weight", "not listed"});

  // Duplicate across shards.
  write_file(index, index_text);
  {
    const Checkpoint c = Checkpoint::open(tmp.str());
    std::vector<rlp::TensorData> part;
    for (const auto& t : tensors_of(c))
      if (c.tensor(t.name).file == s2.string() || t.name == "model.norm.weight") part.push_back(t);
    rlp::write_safetensors(s2.string(), part);
  }
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {"model.norm.weight", "duplicate"});

  // Shard names must stay inside the directory; index must be valid JSON.
  ix = json::parse(index_text);
  ix["weight_map"]["model.norm.weight"] = "../evil.safetensors";
  write_file(index, ix.dump());
  expect_input_error([&] { Checkpoint::open(tmp.str()); },
                     {index.string(), "model.norm.weight", "plain file name"});
  write_file(index, "{");
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {index.string(), "invalid JSON"});

  // Both layouts at once.
  write_file(index, index_text);
  write_file(tmp / "model.safetensors", s2_bytes);
  expect_input_error([&] { Checkpoint::open(tmp.str()); },
                     {"both model.safetensors and model.safetensors.index.json"});
}

TEST(CheckpointDir, BadConfigInDirectoryNamesFile) {
  TempDir tmp;
  rlp::write_random_checkpoint(small("mistral", tmp.str()));
  edit_config(tmp.str(), [](json& c) { c["sliding_window"] = 4096; });
  expect_input_error([&] { Checkpoint::open(tmp.str()); }, {(tmp / "config.json").string(), "sliding_window",
                                                            "sliding-window attention is not supported"});
}

TEST(ModelSpec, RefusesUnsupportedConfigsByName) {
  const std::string src = "/x/config.json";
  auto expect_bad = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    json c = base_config();
    edit(c);
    std::vector<std::string> all = parts;
    all.push_back(src);
    expect_input_error([&] { rlp::parse_model_spec(c, src); }, all);
  };
  expect_bad([](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; },
             {"architectures", "GPT2LMHeadModel", "not supported"});
  expect_bad([](json& c) { c.erase("architectures"); }, {"architectures", "missing"});
  expect_bad([](json& c) { c["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"});
  expect_bad(
      [](json& c) {
        c["architectures"] = {"MistralForCausalLM"};
        c["model_type"] = "mistral";
        c["sliding_window"] = 4096;
      },
      {"sliding_window", "not supported"});
  expect_bad(
      [](json& c) {
        c["architectures"] = {"Qwen2ForCausalLM"};
        c["model_type"] = "qwen2";
        c["use_sliding_window"] = true;
      },
      {"use_sliding_window", "not supported"});
  expect_bad(
      [](json& c) {
        c["architectures"] = {"Qwen3ForCausalLM"};
        c["model_type"] = "qwen3";
      },
      {"head_dim", "missing"});
  expect_bad([](json& c) { c["model_type"] = "qwen2"; }, {"model_type"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
      },
      {"rope_scaling", "yarn"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
      },
      {"rope_scaling", "linear"});
  expect_bad(
      [](json& c) {
        c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
      },
      {"rope_scaling.low_freq_factor"});
  expect_bad([](json& c) { c["attention_bias"] = true; }, {"attention_bias"});
  expect_bad([](json& c) { c["mlp_bias"] = true; }, {"mlp_bias"});
  expect_bad([](json& c) { c["num_key_value_heads"] = 3; }, {"num_key_value_heads"});
  expect_bad([](json& c) { c["num_attention_heads"] = 7; }, {"hidden_size", "num_attention_heads"});
  expect_bad([](json& c) { c["hidden_size"] = 0; }, {"hidden_size", "positive"});
  expect_bad([](json& c) { c["vocab_size"] = "512"; }, {"vocab_size", "integer"});
  expect_bad([](json& c) { c.erase("intermediate_size"); }, {"intermediate_size", "missing"});
  expect_bad([](json& c) { c["quantization_config"] = {{"quant_method", "fp8"}}; }, {"quantization_config"});
  expect_bad([](json& c) { c["layer_types"] = {"full_attention", "sliding_attention"}; }, {"layer_types[1]"});
  expect_bad([](json& c) { c["tie_word_embeddings"] = "yes"; }, {"tie_word_embeddings"});
  expect_input_error([&] { rlp::parse_model_spec(json::array(), src); }, {src});
}

TEST(ModelSpec, AcceptsHuggingFaceVariants) {
  const std::string src = "config.json";
  json c = base_config();
  c["rope_scaling"] = nullptr;
  c["bos_token_id"] = nullptr;
  c["eos_token_id"] = {128001, 128008};
  rlp::ModelSpec s = rlp::parse_model_spec(c, src);
  EXPECT_EQ(s.bos_token, -1);
  EXPECT_EQ(s.eos_token, 128001);
  EXPECT_EQ(s.stop_tokens, (std::vector<int>{128001, 128008}));
  EXPECT_EQ(s.rope_scaling.type, rlp::RopeScaling::Type::none);
  EXPECT_FALSE(s.tied_embeddings);  // HF default when absent

  c["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c["rope_theta"] = 500000.0;
  c["head_dim"] = 16;  // explicit head_dim on Llama: heads * head_dim may differ from hidden
  s = rlp::parse_model_spec(c, src);
  EXPECT_EQ(s.rope_scaling.type, rlp::RopeScaling::Type::llama3);
  EXPECT_DOUBLE_EQ(s.rope_scaling.factor, 32.0);
  EXPECT_EQ(s.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(s.rope_theta, 500000.0);
  EXPECT_EQ(s.head_dim, 16);
  EXPECT_EQ(s.to_json().at("rope_scaling").at("factor"), 32.0);

  c["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(rlp::parse_model_spec(c, src).rope_scaling.type, rlp::RopeScaling::Type::none);

  json q = base_config();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["model_type"] = "qwen2";
  q["use_sliding_window"] = false;
  q["sliding_window"] = 131072;
  q.erase("num_key_value_heads");
  s = rlp::parse_model_spec(q, src);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_EQ(s.kv_heads, s.heads);

  json m = base_config();
  m["architectures"] = {"MistralForCausalLM"};
  m["model_type"] = "mistral";
  m["sliding_window"] = nullptr;
  EXPECT_EQ(rlp::parse_model_spec(m, src).arch, rlp::Arch::mistral);
  EXPECT_EQ(rlp::layer_tensor_name(3, "mlp.up_proj.weight"), "model.layers.3.mlp.up_proj.weight");
}
