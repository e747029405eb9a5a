// A small persistent thread pool for the CPU ops. Creating threads per call
// would cost more than a whole decode-size (T = 1) matmul, and so would a
// sleep/wake-up round trip through the kernel on every call: workers spin
// briefly after each task (ops tend to come back to back, layer after
// layer) and only then sleep on a condition variable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace nvfp4moe::cpu {

class ThreadPool {
 public:
  // The process-wide pool. Grows on demand up to kMaxThreads.
  static ThreadPool& instance();

  static constexpr int kMaxThreads = 256;

  // Default parallelism: std::thread::hardware_concurrency(), at least 1.
  static int default_threads();

  // Runs task(i) for every i in [0, n) on n threads, the caller being i = 0,
  // and returns when all are done. n is clamped to [1, kMaxThreads]. If the
  // OS refuses to start more threads, fewer indices run (callers split work
  // dynamically, so that changes nothing but speed). Calls from different
  // threads are serialized. task must not throw.
  void run(int n, const std::function<void(int)>& task);

  ~ThreadPool();

 private:
  ThreadPool() = default;
  void worker_loop(int index);
  // Starts workers until there are `count` (or the OS refuses).
  void ensure_workers(int count);
  // Wakes sleepers of `cv` after an atomic they wait on has changed.
  void wake(std::condition_variable& cv);

  std::mutex call_mutex_;  // one run() at a time

  std::mutex mutex_;  // guards sleeping on the condition variables
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::atomic<int> sleepers_{0};

  std::vector<std::thread> workers_;
  // The current call, published seqlock-style: generation_ is odd while run()
  // rewrites task_ and active_, and a worker that read them across a change
  // reads again. A worker that takes part is counted in pending_, so its
  // generation cannot end before it has run.
  std::atomic<const std::function<void(int)>*> task_{nullptr};
  std::atomic<int> active_{0};  // worker indices 1..active_ take part
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace nvfp4moe::cpu
