// Speed of `rlparity inspect` on the bf16 Llama-shaped generated checkpoint (hidden 1024,
// intermediate 2816, 8 layers, 16 heads, 8 kv heads, vocab 32000), generated into a temporary
// directory at start, against a plain read of the same mapped bytes (uint64 sums, same threads),
// in the same run. inspect reads each weight byte from the mapping once and runs all 4 scale
// conventions x 2 scale modes on each 128x128 block while it is in cache. The summary prints two
// ratios, both plain-read time / inspect time:
//   bytes actually read: inspect's read rate (weight bytes / inspect time) against one plain read
//     of those bytes;
//   per convention (the figure, goal >= 0.3): 4 x weight bytes / inspect time (each
//     convention streams the weights, from cache after the first) against 4 plain reads.
// --inspect_threads=N sets the thread count (default: all cores).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

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
        const auto& t = x.ckpt->tensor(
            rlp::layer_tensor_name(l, rlp::proj_tensor_suffix(static_cast<rlp::Proj>(p))) + ".weight");
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

constexpr int kConventions = 4;

double time_inspect(const Fixture& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const rlp::InspectResult r = rlp::inspect_checkpoint(*f.ckpt);
  benchmark::DoNotOptimize(r.tensors.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double time_plain(const Fixture& f, int passes) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t s = 0;
  for (int p = 0; p < passes; ++p) s += plain_read_once(f);
  benchmark::DoNotOptimize(s);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// bytes/s: weight bytes read from the mapping per second (inspect reads each once).
void BM_Inspect(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    const rlp::InspectResult r = rlp::inspect_checkpoint(*f.ckpt);
    benchmark::DoNotOptimize(r.tensors.data());
  }
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(f.bytes) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Inspect)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

void BM_PlainRead(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) benchmark::DoNotOptimize(plain_read_once(f));
  state.counters["bytes/s"] = benchmark::Counter(
      static_cast<double>(f.bytes) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlainRead)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace

int main(int argc, char** argv) {
  // Our own flag, taken out before google benchmark sees the arguments.
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--inspect_threads=", 0) == 0)
      rlp::set_thread_count(std::stoi(arg.substr(18)));
    else
      argv[out++] = argv[i];
  }
  argc = out;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Fixture& f = fixture();
  plain_read_once(f);  // fault the mapping in
  benchmark::RunSpecifiedBenchmarks();
  // Interleaved, best of 7 each: the ratios, measured in this run.
  double best_i = 1e30, best_p1 = 1e30, best_p4 = 1e30;
  for (int i = 0; i < 7; ++i) {
    best_p1 = std::min(best_p1, time_plain(f, 1));
    best_i = std::min(best_i, time_inspect(f));
    best_p4 = std::min(best_p4, time_plain(f, kConventions));
  }
  const double bytes = static_cast<double>(f.bytes);
  std::printf("\nsummary: %d tensors, %.1f MB of bf16 weights, %d threads, best of 7 interleaved runs\n",
              static_cast<int>(f.tensors.size()), bytes / 1e6, rlp::thread_count());
  std::printf(
      "  inspect (each byte read once; 4 conventions x 2 scale modes per block): %.4f s -> %.2f GB/s read\n",
      best_i, bytes / best_i / 1e9);
  std::printf("  plain read, 1 pass:  %.4f s -> %.2f GB/s\n", best_p1, bytes / best_p1 / 1e9);
  std::printf("  plain read, %d passes: %.4f s -> %.2f GB/s\n", kConventions, best_p4,
              kConventions * bytes / best_p4 / 1e9);
  std::printf("  ratio, bytes actually read (plain 1 pass / inspect time): %.3f\n", best_p1 / best_i);
  std::printf(
      "  ratio, per convention (%d x bytes / inspect time vs %d plain reads = plain %d passes / inspect "
      "time): "
      "%.3f (goal >= 0.3)\n",
      kConventions, kConventions, kConventions, best_p4 / best_i);
  benchmark::Shutdown();
  delete &f;
  return 0;
}
