#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <system_error>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace nvfp4moe::cpu {
namespace {

// Long enough to bridge the gap between consecutive ops of a decode step,
// short enough not to matter when the process goes idle.
constexpr auto kSpin = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls done() for up to kSpin; true if it became true. Yields the CPU
// between polls after the first few microseconds, so that on an oversubscribed
// machine the thread being waited for can run.
template <typename Done>
bool spin_until(const Done& done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (i < 2048) {
      cpu_relax();
      continue;
    }
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() - start > kSpin) return done();
  }
}

}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

int ThreadPool::default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(hw, 1, kMaxThreads));
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ensure_workers(int count) {
  while (static_cast<int>(workers_.size()) < count) {
    try {
      const int index = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, index] { worker_loop(index); });
    } catch (const std::system_error&) {
      return;
    }
  }
}

// Sequentially consistent with the sleeper's increment-then-check: either the
// sleeper sees the new value before waiting, or we see it counted and notify
// under the mutex it holds until it waits.
void ThreadPool::wake(std::condition_variable& cv) {
  if (sleepers_.load() == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
  }
  cv.notify_all();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto has_work = [&] {
      const uint64_t g = generation_.load();
      return stop_.load() || (g != seen && g % 2 == 0);
    };
    if (!spin_until(has_work)) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      work_cv_.wait(lock, has_work);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    const uint64_t g = generation_.load();
    const std::function<void(int)>* task = task_.load();
    const int active = active_.load();
    if (g % 2 != 0 || generation_.load() != g) continue;  // changed while reading: read again
    seen = g;
    if (index > active) continue;  // not needed this time
    (*task)(index);
    if (pending_.fetch_sub(1) == 1) wake(done_cv_);
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  n = std::clamp(n, 1, kMaxThreads);
  if (n == 1) {
    task(0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  ensure_workers(n - 1);
  const int helpers = std::min<int>(n - 1, static_cast<int>(workers_.size()));
  generation_.fetch_add(1);  // odd: being rewritten
  task_.store(&task);
  active_.store(helpers);
  pending_.store(helpers);
  generation_.fetch_add(1);  // even: published
  wake(work_cv_);
  task(0);
  const auto all_done = [&] { return pending_.load() == 0; };
  if (!spin_until(all_done)) {
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1);
    done_cv_.wait(lock, all_done);
    sleepers_.fetch_sub(1);
  }
}

}  // namespace nvfp4moe::cpu
