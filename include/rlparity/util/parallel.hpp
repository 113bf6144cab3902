// Deterministic parallelism: work is split into index ranges whose results do not depend on which
// thread runs them (each output element is computed by exactly one task, in a fixed order), so
// results are bit-identical for any thread count.
#pragma once
#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlp {

// Number of worker threads used by parallel_for; 0 means hardware concurrency.
void set_thread_count(int n);
int thread_count();

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` items, on up to thread_count()
// threads. fn must write disjoint outputs. Exceptions are rethrown on the calling thread.
void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);

}  // namespace rlp
