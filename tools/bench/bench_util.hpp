// Helpers shared by the benchmarks: wall clock, this process's RSS from /proc, Eigen's fp32 GEMM
// rate (the yardstick the issues' speed goals are stated against), and the generated Llama-shaped
// benchmark checkpoint, written in a child process so that the generator's buffers never count
// toward the benchmark's peak RSS.
#pragma once
// GCC 12 flags Eigen's AVX-512 packet transposes (the _mm512_undefined_ps idiom) as
// maybe-uninitialized once inlined into a benchmark; the warning is about the compiler's own header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/util/process_memory.hpp"

namespace rlp::bench {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// /proc/self/status field (kB) as bytes; -1 if absent.
inline double proc_status_bytes(const char* key) { return static_cast<double>(rlp::proc_status_bytes(key)); }
using rlp::reset_peak_rss;

// Best-of-`reps` Eigen fp32 GEMM rate (FLOP/s) at 2048^3, on one thread and split over `threads`
// threads by column blocks of C.
struct EigenRate {
  double one_thread = 0, n_threads = 0;
};
inline EigenRate eigen_gemm_rate(int threads, int reps = 3) {
  const int n = 2048;
  threads = std::max(1, threads);
  Eigen::MatrixXf A = Eigen::MatrixXf::Random(n, n), B = Eigen::MatrixXf::Random(n, n), C(n, n);
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  double best1 = 1e30, bestn = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    C.noalias() = A * B;
    best1 = std::min(best1, seconds_since(t0));
    t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const int c0 = n * t / threads, c1 = n * (t + 1) / threads;
        C.middleCols(c0, c1 - c0).noalias() = A * B.middleCols(c0, c1 - c0);
      });
    for (auto& th : pool) th.join();
    bestn = std::min(bestn, seconds_since(t0));
  }
  return {flops / best1, flops / bestn};
}

// The issues' benchmark model: Llama-shaped, hidden 1024, intermediate 2816, 8 layers, 16 heads,
// 8 KV heads, vocab 32000, untied lm_head, bf16.
inline RandomCheckpointOptions bench_model(const std::string& out) {
  RandomCheckpointOptions o;
  o.arch = "llama";
  o.hidden = 1024;
  o.intermediate = 2816;
  o.layers = 8;
  o.heads = 16;
  o.kv_heads = 8;
  o.vocab = 32000;
  o.max_pos = 8192;
  o.dtype = DType::bf16;
  o.tied = false;
  o.seed = 3;
  o.out = out;
  return o;
}

// Issue 16's MoE benchmark model: Qwen3-MoE-shaped, hidden 1024, 16 experts, top-4, expert
// intermediate 512, 8 layers (all sparse), 16 heads, 8 KV heads (head_dim 64), vocab 32000, bf16.
inline RandomCheckpointOptions moe_bench_model(const std::string& out) {
  RandomCheckpointOptions o = bench_model(out);
  o.arch = "qwen3-moe";
  o.experts = 16;
  o.top_k = 4;
  o.moe_intermediate = 512;
  return o;
}

// Issue 15's model: Llama-3.1-8B-shaped (hidden 4096, intermediate 14336, 32 layers, 32 heads,
// 8 KV heads, vocab 128256, rope llama3 scaling), bf16, untied: a 16 GB checkpoint.
inline RandomCheckpointOptions llama8b_bench_model(const std::string& out) {
  RandomCheckpointOptions o = bench_model(out);
  o.arch = "llama3";
  o.hidden = 4096;
  o.intermediate = 14336;
  o.layers = 32;
  o.heads = 32;
  o.kv_heads = 8;
  o.vocab = 128256;
  return o;
}

// Model GEMM FLOPs per token: 2 x the parameters of the decoder linears and the lm_head a token
// passes through (in a MoE layer: the router, its k experts and a shared expert, not the others).
inline double linear_flops_per_token(const ModelSpec& sp) {
  const double qo = static_cast<double>(sp.heads) * sp.head_dim,
               kv = static_cast<double>(sp.kv_heads) * sp.head_dim, H = sp.hidden;
  double params = static_cast<double>(sp.vocab) * H;
  for (int l = 0; l < sp.layers; ++l) {
    params += H * (2 * qo + 2 * kv);
    if (!sp.is_moe_layer(l)) {
      params += 3.0 * H * sp.intermediate;
      continue;
    }
    params += H * sp.num_experts + 3.0 * H * sp.moe_intermediate * sp.experts_per_tok;
    if (sp.shared_expert_intermediate > 0) params += 3.0 * H * sp.shared_expert_intermediate + H;
  }
  return 2.0 * params;
}

// A scratch directory holding the benchmark checkpoint, removed on destruction. `ok` is false (and
// a message printed) if the child that writes it failed.
class BenchCheckpoint {
 public:
  explicit BenchCheckpoint(const std::string& tag,
                           RandomCheckpointOptions (*model)(const std::string&) = &bench_model) {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / fmt::format("rlp_{}_{}_{}", tag, getpid(), rd());
    const auto t0 = Clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        write_random_checkpoint(model(dir_.string()));
      } catch (const std::exception& e) {
        fmt::print(stderr, "{}: writing the checkpoint failed: {}\n", tag, e.what());
        _exit(1);
      }
      _exit(0);
    }
    int status = 0;
    ok_ = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok_) {
      fmt::print(stderr, "{}: could not write the benchmark checkpoint to {}\n", tag, dir_.string());
      return;
    }
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      bytes_ += std::filesystem::file_size(e.path());
    write_s_ = seconds_since(t0);
  }
  ~BenchCheckpoint() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  BenchCheckpoint(const BenchCheckpoint&) = delete;
  BenchCheckpoint& operator=(const BenchCheckpoint&) = delete;

  bool ok() const { return ok_; }
  std::string dir() const { return dir_.string(); }
  uint64_t bytes() const { return bytes_; }
  double write_seconds() const { return write_s_; }

 private:
  std::filesystem::path dir_;
  bool ok_ = false;
  uint64_t bytes_ = 0;
  double write_s_ = 0;
};

}  // namespace rlp::bench
