#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <system_error>

namespace nvfp4moe::cpu {

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

int ThreadPool::default_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(hw, 1, kMaxThreads));
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ThreadPool::ensure_workers(int count) {
  while (static_cast<int>(workers_.size()) < count) {
    try {
      const int index = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, index] { worker_loop(index); });
    } catch (const std::system_error&) {
      return false;
    }
  }
  return true;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || (generation_ != seen && index <= active_); });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    (*task)(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& task) {
  n = std::clamp(n, 1, kMaxThreads);
  if (n == 1) {
    task(0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  int helpers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Fewer helpers than asked if the OS will not start more threads: the
    // callers split work dynamically, so any count computes the same result.
    ensure_workers(n - 1);
    helpers = std::min<int>(n - 1, static_cast<int>(workers_.size()));
    task_ = &task;
    active_ = helpers;
    pending_ = helpers;
    ++generation_;
  }
  wake_.notify_all();
  task(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
}

}  // namespace nvfp4moe::cpu
