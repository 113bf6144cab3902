// Resource bounds a user can rely on (docs/robustness.md): size caps on headers, JSON and lines, a
// checkpoint whose declared sizes exceed its file refused before any allocation, and the replay
// memory estimate behind --max-memory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/memory_estimate.hpp"
#include "rlparity/util/error.hpp"
#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;
const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

using Bounds = rlp_test::ScratchDirTest;

std::string safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k)
    out[static_cast<std::size_t>(k)] = static_cast<char>((header.size() >> (8 * k)) & 0xFF);
  return out + header + data;
}

TEST_F(Bounds, DeclaredTensorSizeBeyondFileIsRefusedBeforeAllocation) {
  // 2^20 x 2^20 F32 = 4 TiB declared, 16 bytes present: refused from the header alone (an attempt to
  // allocate or read it would abort under the sanitizers or fault).
  fs::create_directories(dir_ / "ck");
  fs::copy_file(fs::path(kStories) / "config.json", dir_ / "ck" / "config.json");
  write(
      "ck/model.safetensors",
      safetensors(
          R"({"model.embed_tokens.weight":{"dtype":"F32","shape":[1048576,1048576],"data_offsets":[0,4398046511104]}})",
          std::string(16, '\0')));
  const std::string e = input_error([&] { rlp::Checkpoint::open((dir_ / "ck").string()); });
  EXPECT_NE(e.find("past the end of the file"), std::string::npos) << e;
}

TEST_F(Bounds, ConfigJsonOverCapIsRefused) {
  fs::create_directories(dir_ / "ck");
  fs::copy_file(fs::path(kStories) / "model.safetensors", dir_ / "ck" / "model.safetensors");
  fs::resize_file(write("ck/config.json", "{}"), (16u << 20) + 1);
  const std::string e = input_error([&] { rlp::Checkpoint::open((dir_ / "ck").string()); });
  EXPECT_NE(e.find("16 MiB limit"), std::string::npos) << e;
}

TEST_F(Bounds, InputsLineOverCapIsRefused) {
  std::string line = R"({"id": "a", "prompt": [1], "pad": ")";
  line.append(rlp::kMaxInputLineBytes, 'x');
  const std::string p = write("in.jsonl", line);
  const std::string e = input_error([&] { rlp::read_inputs_jsonl(p, 512, 512); });
  EXPECT_NE(e.find("longer than 64 MiB"), std::string::npos) << e;
}

TEST_F(Bounds, DumpLineOverCapIsRefused) {
  std::string line = R"({"id": "a", "pad": ")";
  line.append(rlp::compare::kMaxDumpLineBytes, 'x');
  const std::string p = write("d.jsonl", line);
  const std::string e = input_error([&] { rlp::compare::read_combined_dump(p); });
  EXPECT_NE(e.find("longer than 64 MiB"), std::string::npos) << e;
  EXPECT_NE(e.find(p + ":1"), std::string::npos) << e;
}

TEST_F(Bounds, ThresholdsFileOverCapIsRefused) {
  const std::string p = write("t.toml", "[default]\n");
  fs::resize_file(p, rlp::gate::kMaxThresholdsFileBytes + 1);
  const std::string e = input_error([&] { rlp::gate::load_thresholds_file(p); });
  EXPECT_NE(e.find("over the 1024 KiB limit"), std::string::npos) << e;
}

TEST(MemoryEstimate, ParsesSizes) {
  EXPECT_EQ(rlp::parse_memory_size("8G"), 8ull << 30);
  EXPECT_EQ(rlp::parse_memory_size("512M"), 512ull << 20);
  EXPECT_EQ(rlp::parse_memory_size("512mb"), 512ull << 20);
  EXPECT_EQ(rlp::parse_memory_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(rlp::parse_memory_size("64k"), 64ull << 10);
  EXPECT_EQ(rlp::parse_memory_size("1000000"), 1000000ull);
  EXPECT_EQ(rlp::parse_memory_size("2T"), 2ull << 40);
  for (const char* bad : {"", "G", "8X", "-1G", "0", "1.2.3G", "8 G", "1e3", "99999999999T"})
    EXPECT_THROW(rlp::parse_memory_size(bad), rlp::InputError) << bad;
  EXPECT_EQ(rlp::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(rlp::format_bytes(100), "100 B");
}

rlp::ModelSpec llama8b() {
  rlp::ModelSpec s;
  s.hidden = 4096, s.intermediate = 14336, s.layers = 32, s.heads = 32, s.kv_heads = 8, s.head_dim = 128;
  s.vocab = 128256, s.max_positions = 8192;
  return s;
}

// The estimate of the plan of `o` with `threads` workers.
rlp::MemoryEstimate estimate(const rlp::ModelSpec& s, const std::vector<rlp::InputSequence>& in,
                             rlp::ReplayOptions o, int threads) {
  o.threads = threads;
  return rlp::estimate_replay_memory(rlp::make_replay_plan(s, o), in);
}

std::vector<rlp::InputSequence> seqs(int n, int prompt, int response) {
  std::vector<rlp::InputSequence> v(static_cast<std::size_t>(n));
  for (auto& s : v) {
    s.prompt.assign(static_cast<std::size_t>(prompt), 1);
    s.response.assign(static_cast<std::size_t>(response), 2);
    s.has_response = true;
  }
  return v;
}

TEST(MemoryEstimate, CountsEachWeightFormAndTheOracle) {
  const rlp::ModelSpec s = llama8b();
  // Llama-3-8B (untied lm_head): ~8.03e9 parameters.
  rlp::ReplayOptions o;
  o.recipes = {"bf16"};
  o.oracle = false;
  const auto bf16 = estimate(s, seqs(1, 16, 16), o, 1);
  o.oracle = true;
  const auto with_oracle = estimate(s, seqs(1, 16, 16), o, 1);
  const double params = 8.03e9;
  // The oracle adds 8 B per parameter (and a float64 forward).
  EXPECT_GT(static_cast<double>(with_oracle.total - bf16.total), 8 * params * 0.99);
  // One act form: decoder linears as 16-bit patterns (2 B per parameter), embedding and lm_head
  // counted at 4 B per parameter.
  const double decoder = 32 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336);
  const double other = 2 * 4096.0 * 128256;
  EXPECT_GT(static_cast<double>(bf16.total), (2 * decoder + 4 * other) * 0.99);
  EXPECT_LT(static_cast<double>(bf16.total), (2 * decoder + 4 * other) * 1.1);
  // An fp8 form adds ~1 B per decoder-linear parameter (+ 4 B per param for embeddings/lm_head).
  o.oracle = false;
  o.recipes = {"bf16", "fp8-gen"};
  const auto fp8 = estimate(s, seqs(1, 16, 16), o, 1);
  const double extra = static_cast<double>(fp8.total - bf16.total);
  EXPECT_GT(extra, 6.9e9 * 1.0 + 2 * 4 * 4096.0 * 128256 * 0.99);
  EXPECT_LT(extra, 6.9e9 * 1.1 + 2 * 4 * 4096.0 * 128256 * 1.1);
  // Workers multiply the per-sequence working set; long sequences grow it.
  auto part = [](const rlp::MemoryEstimate& e, const std::string& key) {
    for (const auto& [what, bytes] : e.parts)
      if (what.find(key) != std::string::npos) return static_cast<double>(bytes);
    return -1.0;
  };
  const auto t1 = estimate(s, seqs(8, 2000, 2000), o, 1);
  const auto t8 = estimate(s, seqs(8, 2000, 2000), o, 8);
  EXPECT_DOUBLE_EQ(part(t8, "worker(s)"), 8 * part(t1, "worker(s)"));
  EXPECT_GT(part(t1, "worker(s)"), part(fp8, "worker(s)") * 100);  // 4000 vs 32 tokens
  EXPECT_GT(t8.total, t1.total);
  EXPECT_NE(t8.describe().find("8 worker(s)"), std::string::npos) << t8.describe();
  EXPECT_NE(t8.describe().find("total"), std::string::npos);
  // A group keeps every sequence's log-prob rows (R x vocab x (4 + 4) B without the oracle) for up
  // to kReplayGroup = 16 sequences, fewer when their rows would pass kGroupRowBytes: 2000-token
  // responses over Llama 3's 128256-token vocabulary (2.05 GB each) replay one at a time.
  ASSERT_EQ(rlp::kReplayGroup, 16u);
  EXPECT_EQ(rlp::replay_group_size(s, 8, 2000), 1u);
  EXPECT_EQ(rlp::replay_group_size(s, 20, 16), 16u);
  EXPECT_EQ(rlp::replay_group_size(s, 3, 16), 3u);
  EXPECT_EQ(rlp::replay_group_size(s, 20, 500), 4u);  // 513 MB each: 4 fit in 2 GiB
  const auto g1 = estimate(s, seqs(1, 2000, 2000), o, 1);
  EXPECT_DOUBLE_EQ(part(t1, "one group of 1"), part(g1, "one group of 1"));
  EXPECT_GT(part(g1, "one group of 1"), 2000.0 * 128256 * 8);
  const auto short1 = estimate(s, seqs(1, 16, 16), o, 1);
  const auto short20 = estimate(s, seqs(20, 16, 16), o, 1);
  EXPECT_DOUBLE_EQ(part(short20, "one group of 16"), 16 * part(short1, "one group of 1"));
  // Responses still to be sampled may come out shorter and form larger groups: the bound covers it.
  auto unsampled = seqs(20, 16, 500);
  for (auto& in : unsampled) {
    in.response.clear();
    in.has_response = false;
  }
  rlp::ReplayOptions os = o;
  os.max_new_tokens = 500;
  const auto given = estimate(s, seqs(20, 16, 500), o, 1);
  const auto sampled = estimate(s, unsampled, os, 1);
  EXPECT_DOUBLE_EQ(part(given, "one group of 4"),
                   4 * part(estimate(s, seqs(1, 16, 500), o, 1), "one group of 1"));
  EXPECT_GE(part(sampled, "one group of 16"), static_cast<double>(rlp::kGroupRowBytes));
  // The oracle keeps its hidden states and one log-prob per token (double), not full rows.
  o.oracle = true;
  const auto g1o = estimate(s, seqs(1, 2000, 2000), o, 1);
  EXPECT_DOUBLE_EQ(part(g1o, "one group of 1") - part(g1, "one group of 1"),
                   8.0 * (32 * 2000.0 * 4096 + 2000));
}

TEST(MemoryEstimate, AbsurdShapesSaturateInsteadOfWrapping) {
  rlp::ModelSpec s = llama8b();
  s.hidden = 1 << 30, s.intermediate = 1 << 30, s.vocab = 1 << 30, s.layers = 1 << 20;
  rlp::ReplayOptions o;
  const auto e = estimate(s, seqs(1, 4, 4), o, 64);
  EXPECT_EQ(e.total, UINT64_MAX);
}

using CliResult = rlp_test::CommandResult;
CliResult run(const std::string& cmd) { return rlp_test::run_command(cmd); }

TEST_F(Bounds, ReplayMaxMemoryRefusesWithTheEstimate) {
  const std::string out = (dir_ / "run.h5").string();
  const std::string base = std::string(RLPARITY_CLI_PATH) + " replay --quiet --max-new-tokens 4 --out " + out;
  const CliResult refused = run(base + " --max-memory 1M");
  EXPECT_NE(refused.code, 0) << refused.output;
  EXPECT_NE(refused.code, 3) << refused.output;
  EXPECT_NE(refused.output.find("estimated peak memory"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("oracle weights"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("exceeds --max-memory 1M"), std::string::npos) << refused.output;
  EXPECT_FALSE(fs::exists(out));
  const CliResult bad = run(base + " --max-memory lots");
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_NE(bad.code, 3) << bad.output;
  EXPECT_NE(bad.output.find("not a memory size"), std::string::npos) << bad.output;
  const CliResult ok = run(base + " --max-memory 8G");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_TRUE(fs::exists(out));
}

}  // namespace
