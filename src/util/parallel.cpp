#include "rlparity/util/parallel.hpp"

#include <atomic>
#include <condition_variable>
#include <memory>

namespace rlp {
namespace {

std::atomic<int> g_threads{0};
// Set on pool threads: a parallel_for nested inside another runs serially on its caller, so
// sequence-level and GEMM-level parallelism compose without oversubscription.
thread_local bool t_in_worker = false;

// A persistent pool: decode runs thousands of small parallel regions, and creating threads (and
// their thread-local buffers) for each costs more than the work. Task w of a region always gets the
// same contiguous index range, whichever thread runs it.
class Pool {
 public:
  explicit Pool(int workers) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { loop(w + 1); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Runs fn over [0, n) split into `tasks` contiguous ranges; range 0 on the caller.
  void run(std::size_t n, std::size_t tasks, const std::function<void(std::size_t, std::size_t)>& fn) {
    std::lock_guard<std::mutex> region(region_m_);  // one region at a time from outside the pool
    {
      std::lock_guard<std::mutex> lock(m_);
      fn_ = &fn;
      n_ = n;
      tasks_ = tasks;
      per_ = (n + tasks - 1) / tasks;
      pending_ = static_cast<int>(tasks) - 1;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    run_task(0);
    std::unique_lock<std::mutex> lock(m_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void run_task(std::size_t w) {
    const std::size_t b = w * per_, e = std::min(n_, b + per_);
    if (b >= e) return;
    const bool was = t_in_worker;
    t_in_worker = true;
    try {
      (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_worker = was;
  }
  void loop(int w) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (static_cast<std::size_t>(w) >= tasks_) continue;
      }
      run_task(static_cast<std::size_t>(w));
      {
        std::lock_guard<std::mutex> lock(m_);
        --pending_;
      }
      done_cv_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex m_, region_m_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(std::size_t, std::size_t)>* fn_ = nullptr;
  std::size_t n_ = 0, tasks_ = 0, per_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

std::mutex g_pool_mutex;
std::unique_ptr<Pool> g_pool;

Pool& pool_for(int threads) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool || g_pool->size() != threads) {
    g_pool.reset();
    g_pool = std::make_unique<Pool>(threads - 1);
  }
  return *g_pool;
}

}  // namespace

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
  const int threads = thread_count();
  const std::size_t tasks = std::min<std::size_t>(static_cast<std::size_t>(threads), max_tasks);
  if (tasks <= 1 || t_in_worker) {
    fn(0, n);
    return;
  }
  pool_for(threads).run(n, tasks, fn);
}

}  // namespace rlp
