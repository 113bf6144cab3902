// Speed of `rlparity inspect` on the bf16 Llama-shaped generated checkpoint (hidden 1024,
// intermediate 2816, 8 layers, 16 heads, 8 kv heads, vocab 32000), generated into a temporary
// directory at start. inspect streams the decoder weights once per scale convention (4 passes; fp32
// and pow2 scales share a pass); its effective bandwidth (4 x weight bytes / time) is compared with
// a plain read of the same bytes (4 passes over the same mapped tensors, same threads) in the same
// run. The summary at the end prints the ratio (goal >= 0.3).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "bench_util.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/util/parallel.hpp"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path dir;
  std::unique_ptr<rlp::Checkpoint> ckpt;
  std::vector<const rlp::TensorView*> tensors;
  int64_t bytes = 0;
  ~Fixture() {
    ckpt.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* px = new Fixture;  // lives until exit (the destructor removes the directory)
    Fixture& x = *px;
    x.dir = fs::temp_directory_path() / ("rlp_bench_inspect_" + std::to_string(::getpid()));
    rlp::RandomCheckpointOptions o = rlp::bench::bench_model(x.dir.string());
    o.seed = 1;
    rlp::write_random_checkpoint(o);
    x.ckpt = std::make_unique<rlp::Checkpoint>(rlp::Checkpoint::open(x.dir.string()));
    for (int l = 0; l < x.ckpt->spec().layers; ++l)
      for (int p = 0; p < rlp::kNumProj; ++p) {
        const auto& t = x.ckpt->tensor(rlp::layer_tensor_name(l, rlp::proj_tensor_suffix(static_cast<rlp::Proj>(p))) + ".weight");
        x.tensors.push_back(&t);
        x.bytes += static_cast<int64_t>(t.nbytes);
      }
    return px;
  }();
  return *f;
}

// One plain read of every decoder weight byte (uint64 sums, parallel over 256 KiB chunks).
uint64_t plain_read_once(const Fixture& f) {
  uint64_t total = 0;
  for (const auto* t : f.tensors) {
    const std::size_t words = t->nbytes / 8;
    const std::size_t chunk = 32768;
    const std::size_t nchunks = (words + chunk - 1) / chunk;
    std::vector<uint64_t> part(nchunks, 0);
    rlp::parallel_for(nchunks, 1, [&](std::size_t c0, std::size_t c1) {
      for (std::size_t c = c0; c < c1; ++c) {
        uint64_t s = 0;
        const std::size_t b = c * chunk, e = std::min(words, b + chunk);
        for (std::size_t i = b; i < e; ++i) {
          uint64_t w;
          std::memcpy(&w, t->data + 8 * i, 8);
          s += w;
        }
        part[c] = s;
      }
    });
    for (uint64_t s : part) total += s;
  }
  return total;
}

constexpr int kPasses = 4;  // conventions

double time_inspect(const Fixture& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const rlp::InspectResult r = rlp::inspect_checkpoint(*f.ckpt);
  benchmark::DoNotOptimize(r.tensors.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double time_plain(const Fixture& f) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t s = 0;
  for (int p = 0; p < kPasses; ++p) s += plain_read_once(f);
  benchmark::DoNotOptimize(s);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_Inspect(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    const rlp::InspectResult r = rlp::inspect_checkpoint(*f.ckpt);
    benchmark::DoNotOptimize(r.tensors.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(kPasses * f.bytes) *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Inspect)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_PlainRead4Passes(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    uint64_t s = 0;
    for (int p = 0; p < kPasses; ++p) s += plain_read_once(f);
    benchmark::DoNotOptimize(s);
  }
  state.counters["bytes/s"] = benchmark::Counter(static_cast<double>(kPasses * f.bytes) *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlainRead4Passes)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Fixture& f = fixture();
  plain_read_once(f);  // fault the mapping in
  benchmark::RunSpecifiedBenchmarks();
  // Interleaved, best of 5 each: the ratio the issue asks for, measured in this run.
  double best_i = 1e30, best_p = 1e30;
  for (int i = 0; i < 5; ++i) {
    best_p = std::min(best_p, time_plain(f));
    best_i = std::min(best_i, time_inspect(f));
  }
  const double bytes = static_cast<double>(kPasses) * static_cast<double>(f.bytes);
  std::printf("\nsummary: %d tensors, %.1f MB of bf16 weights, %d passes (one per convention), %d threads\n",
              static_cast<int>(f.tensors.size()), static_cast<double>(f.bytes) / 1e6, kPasses, rlp::thread_count());
  std::printf("  inspect:    %.3f s  -> %.2f GB/s effective\n", best_i, bytes / best_i / 1e9);
  std::printf("  plain read: %.3f s  -> %.2f GB/s\n", best_p, bytes / best_p / 1e9);
  std::printf("  ratio inspect / plain read: %.3f (goal >= 0.3)\n", best_p / best_i);
  benchmark::Shutdown();
  delete &f;
  return 0;
}
