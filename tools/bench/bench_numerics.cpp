// Speed of the numerics emulation against the plain fp32 baselines it must stay close to:
// Eigen's fp32 GEMM vs gemm_f32acc (bf16 operands) vs gemm_fp8_blockscaled at 2048^3 and at the
// decode shape M=16, N=K=4096; quantize 4096x4096 to 128x128 blocks vs memcpy of the same bytes.
// Eigen runs single-threaded (no OpenMP), so the ratios compare our kernels at 1 thread; the
// all-thread rows are reported alongside. The summary at the end prints the ratios.
#include <benchmark/benchmark.h>

// GCC 12 reports false maybe-uninitialized warnings inside its own AVX-512 intrinsics when Eigen's
// GEMM kernels are instantiated with -march=native; they are not in our code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Dense>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/parallel.hpp"

namespace {

using namespace rlp::num;

std::vector<float> random_bf16(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = round_bf16(d(rng));
  return v;
}

struct Shape {
  int M, N, K;
};
Shape shape_of(const benchmark::State& s) {
  return {static_cast<int>(s.range(0)), static_cast<int>(s.range(1)), static_cast<int>(s.range(2))};
}
void set_flops(benchmark::State& s, const Shape& sh) {
  s.counters["FLOP/s"] = benchmark::Counter(2.0 * sh.M * sh.N * sh.K * static_cast<double>(s.iterations()),
                                            benchmark::Counter::kIsRate);
}

void BM_EigenF32Gemm(benchmark::State& s) {
  const Shape sh = shape_of(s);
  using RM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto xv = random_bf16(static_cast<std::size_t>(sh.M) * sh.K, 1),
             wv = random_bf16(static_cast<std::size_t>(sh.N) * sh.K, 2);
  Eigen::Map<const RM> X(xv.data(), sh.M, sh.K), W(wv.data(), sh.N, sh.K);
  RM Y(sh.M, sh.N);
  for (auto _ : s) {
    Y.noalias() = X * W.transpose();
    benchmark::DoNotOptimize(Y.data());
  }
  set_flops(s, sh);
}

void BM_EmulatedBf16Gemm(benchmark::State& s) {
  const Shape sh = shape_of(s);
  rlp::set_thread_count(static_cast<int>(s.range(3)));
  const auto X = random_bf16(static_cast<std::size_t>(sh.M) * sh.K, 1),
             W = random_bf16(static_cast<std::size_t>(sh.N) * sh.K, 2);
  // Weights as replay holds them: bf16 bit patterns, widened slice by slice inside the kernel.
  std::vector<uint16_t> W16(W.size());
  for (std::size_t i = 0; i < W.size(); ++i) W16[i] = rlp::num::float_to_bf16_bits(W[i]);
  std::vector<float> Y(static_cast<std::size_t>(sh.M) * sh.N);
  GemmConfig cfg;
  for (auto _ : s) {
    gemm_f32acc(X.data(), W16.data(), rlp::num::Half16::bf16, Y.data(), sh.M, sh.N, sh.K, cfg);
    benchmark::DoNotOptimize(Y.data());
  }
  rlp::set_thread_count(0);
  set_flops(s, sh);
}

// The same GEMM with the weights held as floats (4 B each), as replay held them before: the
// comparison behind holding act-dtype weights as 16-bit patterns.
void BM_EmulatedBf16GemmFloatW(benchmark::State& s) {
  const Shape sh = shape_of(s);
  rlp::set_thread_count(static_cast<int>(s.range(3)));
  const auto X = random_bf16(static_cast<std::size_t>(sh.M) * sh.K, 1),
             W = random_bf16(static_cast<std::size_t>(sh.N) * sh.K, 2);
  std::vector<float> Y(static_cast<std::size_t>(sh.M) * sh.N);
  GemmConfig cfg;
  for (auto _ : s) {
    gemm_f32acc(X.data(), W.data(), Y.data(), sh.M, sh.N, sh.K, cfg);
    benchmark::DoNotOptimize(Y.data());
  }
  rlp::set_thread_count(0);
  set_flops(s, sh);
}

void BM_EmulatedFp8Gemm(benchmark::State& s) {
  const Shape sh = shape_of(s);
  rlp::set_thread_count(static_cast<int>(s.range(3)));
  const auto xv = random_bf16(static_cast<std::size_t>(sh.M) * sh.K, 1),
             wv = random_bf16(static_cast<std::size_t>(sh.N) * sh.K, 2);
  ScaleOptions o;
  const Fp8Tensor X = quantize_blocks(xv.data(), sh.M, sh.K, 1, 128, o);
  const Fp8Tensor W = quantize_blocks(wv.data(), sh.N, sh.K, 128, 128, o);
  std::vector<float> Y(static_cast<std::size_t>(sh.M) * sh.N);
  GemmConfig cfg;
  for (auto _ : s) {
    gemm_fp8_blockscaled(X, W, Y.data(), cfg);
    benchmark::DoNotOptimize(Y.data());
  }
  rlp::set_thread_count(0);
  set_flops(s, sh);
}

constexpr int kQ = 4096;

void BM_Memcpy4096(benchmark::State& s) {
  const auto x = random_bf16(static_cast<std::size_t>(kQ) * kQ, 3);
  std::vector<float> y(x.size());
  for (auto _ : s) {
    std::memcpy(y.data(), x.data(), x.size() * sizeof(float));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations()) * static_cast<int64_t>(x.size() * sizeof(float)));
}

void BM_Quantize4096Blk128(benchmark::State& s) {
  rlp::set_thread_count(static_cast<int>(s.range(0)));
  const auto x = random_bf16(static_cast<std::size_t>(kQ) * kQ, 3);
  ScaleOptions o;
  Fp8Tensor t = quantize_blocks(x.data(), kQ, kQ, 128, 128, o);  // buffers reused, like memcpy's
  for (auto _ : s) {
    quantize_blocks_into(x.data(), kQ, kQ, 128, 128, o, t);
    benchmark::DoNotOptimize(t.codes.data());
  }
  rlp::set_thread_count(0);
  s.SetBytesProcessed(static_cast<int64_t>(s.iterations()) * static_cast<int64_t>(x.size() * sizeof(float)));
}

BENCHMARK(BM_EigenF32Gemm)
    ->Args({2048, 2048, 2048})
    ->Args({16, 4096, 4096})
    ->Args({8, 4096, 4096})
    ->Unit(benchmark::kMillisecond);
// Last arg: thread count. 1 = like Eigen, timed by CPU time (robust on a shared machine);
// 0 = all hardware threads, timed by wall clock (the only meaningful rate for several threads).
BENCHMARK(BM_EmulatedBf16Gemm)
    ->Args({2048, 2048, 2048, 1})
    ->Args({16, 4096, 4096, 1})
    ->Args({8, 4096, 4096, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EmulatedFp8Gemm)
    ->Args({2048, 2048, 2048, 1})
    ->Args({16, 4096, 4096, 1})
    ->Args({8, 4096, 4096, 1})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EmulatedBf16Gemm)
    ->Args({2048, 2048, 2048, 0})
    ->Args({16, 4096, 4096, 0})
    ->Args({8, 4096, 4096, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EmulatedBf16GemmFloatW)->Args({8, 4096, 4096, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EmulatedBf16GemmFloatW)->Args({8, 4096, 4096, 0})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EmulatedFp8Gemm)
    ->Args({2048, 2048, 2048, 0})
    ->Args({16, 4096, 4096, 0})
    ->Args({8, 4096, 4096, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Memcpy4096)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Quantize4096Blk128)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Quantize4096Blk128)->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// Collects every run's rate so main can print the ratios.
class Collector : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> rate;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const auto it = r.counters.find("FLOP/s");
      if (it != r.counters.end())
        rate[r.benchmark_name()] = it->second.value;
      else if (r.counters.count("bytes_per_second"))
        rate[r.benchmark_name()] = r.counters.at("bytes_per_second").value;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collector rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::Shutdown();
  auto get = [&](const std::string& k) {
    const auto it = rep.rate.find(k);
    return it == rep.rate.end() ? 0.0 : it->second;
  };
  std::printf("\nSummary (throughput ratio to Eigen fp32 GEMM, same shape; Eigen is single-threaded)\n");
  // 16 x 4096^2: the decode shape (packed kernel); 8 x 4096^2: a replay decode step of a
  // group of 8 sequences (the unpacked small-M kernels).
  const char* shapes[] = {"2048/2048/2048", "16/4096/4096", "8/4096/4096"};
  for (const char* sh : shapes) {
    const double e2 = get(std::string("BM_EigenF32Gemm/") + sh);
    for (const char* what : {"BM_EmulatedBf16Gemm", "BM_EmulatedFp8Gemm"})
      for (const char* th : {"1", "0"}) {
        const double v = get(std::string(what) + "/" + sh + "/" + th + (th[0] == '0' ? "/real_time" : ""));
        if (e2 > 0 && v > 0)
          std::printf("  %-20s %-15s threads=%-3s %7.2f GFLOP/s  ratio %.2f\n", what, sh,
                      th[0] == '0' ? "all" : th, v * 1e-9, v / e2);
        // threads=all rows are wall-clock rates: on a loaded machine they understate the kernel.
      }
    if (e2 > 0) std::printf("  %-20s %-15s threads=1   %7.2f GFLOP/s\n", "Eigen fp32", sh, e2 * 1e-9);
  }
  const double mc = get("BM_Memcpy4096");
  for (const char* th : {"1", "0"}) {
    const double q = get(std::string("BM_Quantize4096Blk128/") + th + (th[0] == '0' ? "/real_time" : ""));
    if (mc > 0 && q > 0)
      std::printf("  quantize 4096^2 128x128 threads=%-3s %6.2f GB/s  ratio to memcpy %.2f\n",
                  th[0] == '0' ? "all" : th, q * 1e-9, q / mc);
  }
  if (mc > 0) std::printf("  memcpy 64 MiB                       %6.2f GB/s\n", mc * 1e-9);
  return 0;
}
