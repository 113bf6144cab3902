#include "rlparity/util/parallel.hpp"

#include <atomic>

namespace rlp {
namespace {
std::atomic<int> g_threads{0};
// Set on worker threads: a parallel_for nested inside another runs serially on its caller, so
// sequence-level and GEMM-level parallelism compose without oversubscription.
thread_local bool t_in_worker = false;
}

void set_thread_count(int n) { g_threads = n < 0 ? 0 : n; }

int thread_count() {
  const int n = g_threads.load();
  if (n > 0) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<std::size_t>(grain, 1);
  const std::size_t max_tasks = (n + grain - 1) / grain;
  const std::size_t workers = std::min<std::size_t>(static_cast<std::size_t>(thread_count()), max_tasks);
  if (workers <= 1 || t_in_worker) {
    fn(0, n);
    return;
  }
  // Static contiguous partition: which thread computes an index never changes its value.
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  const std::size_t per = (n + workers - 1) / workers;
  for (std::size_t w = 0; w < workers; ++w) {
    const std::size_t b = w * per, e = std::min(n, b + per);
    if (b >= e) break;
    threads.emplace_back([&, b, e] {
      t_in_worker = true;
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace rlp
