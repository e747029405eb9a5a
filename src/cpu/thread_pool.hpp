// A small persistent thread pool for the CPU ops. Creating threads per call
// would cost more than a whole decode-size (T = 1) matmul, so workers are
// started once, on first use, and sleep between calls.
#pragma once

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
  // and returns when all are done. n is clamped to [1, kMaxThreads]. Calls
  // from different threads are serialized. task must not throw.
  void run(int n, const std::function<void(int)>& task);

  ~ThreadPool();

 private:
  ThreadPool() = default;
  void worker_loop(int index);
  // Starts workers until there are `count`; false if the OS refuses.
  bool ensure_workers(int count);

  std::mutex call_mutex_;  // one run() at a time

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int active_ = 0;        // workers taking part in the current generation
  int pending_ = 0;       // of those, still running
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace nvfp4moe::cpu
