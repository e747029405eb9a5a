// The CPU backend: MUL_MAT_ID and the fused MoE layer over the compact job
// list of the routing plan.
//
// Work is split into units = (job, range of weight rows). Threads take units
// from a shared counter, so the split adapts to ragged routing; every output
// element is still one canonical chain (kernels.hpp) computed by one thread,
// so the result does not depend on the thread count or the schedule.
//
// Per unit, with R = the job's activation rows:
//  - R <= kMaxDirectRows (decode, sparse routing): the kernel decodes the
//    packed weights in registers and dots them with the R rows directly. The
//    op is bound by weight bandwidth here; nothing is written back to memory.
//  - larger R: the unit's weight rows are dequantized once (up to kDequantK
//    at a time) into an F32 tile that stays in L2 and is reused by all R rows
//    through a register-blocked microkernel, kPanel elements of K at a time.
// Activations are rounded to BF16 and permuted into chunk order once per row
// (per token when x is broadcast) before any unit runs.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "cpu/fp_mode.hpp"
#include "cpu/kernels.hpp"
#include "cpu/ops_internal.hpp"
#include "cpu/thread_pool.hpp"
#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"

namespace nvfp4moe::cpu {
namespace {

constexpr int32_t kBlockRows = 128;       // activation rows per job
constexpr int64_t kDequantK = 2048;       // K elements of a unit's weights dequantized at once (rows stream)
constexpr int64_t kPanel = 512;           // K elements per microkernel pass (activations stay in L1)
constexpr int kTiledUnitRows = 48;        // weight rows per unit, tiled path (4 x 3 microkernel)
constexpr int kDirectUnitRows = 64;       // weight rows per unit, direct path
constexpr int kMaxUnitRows = std::max(kTiledUnitRows, kDirectUnitRows);

bool use_direct(int num_x) { return num_x <= kMaxDirectRows; }

// One projection: rows [row0, row0 + rows) of every expert of a weight view
// (row0 = F selects the up half of a merged gate_up).
struct Projection {
  ExpertWeightsView w;
  int64_t row0 = 0;

  WeightRows at(int32_t expert, int64_t n) const {
    const int64_t row = expert * w.rows + row0 + n;
    return {w.codes + row * w.row_code_bytes(), w.scales + row * w.row_scale_bytes(), w.cols};
  }
};

struct Unit {
  int32_t job;
  int32_t rows;  // weight rows, <= kMaxUnitRows
  int64_t n0;    // first weight row
};

std::vector<Unit> make_units(const std::vector<ExpertJob>& jobs, int64_t num_rows) {
  std::vector<Unit> units;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t step = use_direct(jobs[j].num_rows) ? kDirectUnitRows : kTiledUnitRows;
    for (int64_t n0 = 0; n0 < num_rows; n0 += step) {
      units.push_back(Unit{static_cast<int32_t>(j), static_cast<int32_t>(std::min(step, num_rows - n0)), n0});
    }
  }
  return units;
}

// A float buffer that only grows and is never zero-filled: scratch is fully
// written before it is read, and clearing ~0.5 MB per call would cost a
// noticeable part of a decode-size op.
class FloatBuffer {
 public:
  float* get(size_t n) {
    if (n > size_) {
      data_.reset(new float[n]);
      size_ = n;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<float[]> data_;
  size_t size_ = 0;
};

// Per-thread buffers, kept between calls by each thread (pool workers and
// callers alike), sized for activation rows of K elements.
struct Scratch {
  float* tile;     // [kTiledUnitRows][kDequantK]
  float* partial;  // [kBlockRows][kTiledUnitRows][kLanes]
  float* scales;   // [kDirectGroup][K / 16]
  float* sums[2];  // [kBlockRows][kMaxUnitRows]
  const float* x[kBlockRows];
  const float* x_panel[kBlockRows];

  static Scratch& for_this_thread(int64_t K) {
    thread_local FloatBuffer buffer;
    thread_local Scratch scratch;
    const size_t tile = static_cast<size_t>(kTiledUnitRows) * kDequantK;
    const size_t partial = static_cast<size_t>(kBlockRows) * kTiledUnitRows * kLanes;
    const size_t scales = static_cast<size_t>(kDirectGroup) * (K / 16) + kLanes;  // + padding for vector loads
    const size_t sums = static_cast<size_t>(kBlockRows) * kMaxUnitRows;
    float* base = buffer.get(tile + partial + scales + 2 * sums);
    scratch.tile = base;
    scratch.partial = scratch.tile + tile;
    scratch.scales = scratch.partial + partial;
    scratch.sums[0] = scratch.scales + scales;
    scratch.sums[1] = scratch.sums[0] + sums;
    return scratch;
  }
};

// sums[r * rows + n] = canonical dot of x[r] and weight row n0 + n of
// `expert`, for r < num_x, n < rows. Returns the rejected-scale flag.
bool compute_sums(const Kernels& kernels, const Projection& proj, int32_t expert, int64_t n0, int rows,
                  const float* const* x, int num_x, Scratch& s, float* sums) {
  const WeightRows w = proj.at(expert, n0);
  if (use_direct(num_x)) return kernels.gemv_direct(w, rows, x, num_x, sums, rows, s.scales);
  bool bad = false;
  const int64_t K = w.cols;
  // Whole rows at a time (contiguous in memory: streams well from DRAM),
  // then L1-sized panels of them through the microkernel.
  for (int64_t kd = 0; kd < K; kd += kDequantK) {
    const int64_t dk = std::min(kDequantK, K - kd);
    bad |= kernels.dequant_panel(w, rows, kd, dk, s.tile, dk);
    for (int64_t k0 = kd; k0 < kd + dk; k0 += kPanel) {
      const int64_t kp = std::min(kPanel, kd + dk - k0);
      for (int r = 0; r < num_x; ++r) s.x_panel[r] = x[r] + k0;
      kernels.gemm_panel(s.x_panel, num_x, s.tile + (k0 - kd), dk, rows, kp, s.partial,
                         k0 == 0, k0 + kp == K, sums, rows);
    }
  }
  return bad;
}

struct RunFlags {
  std::atomic<bool> bad_scale{false};
  std::atomic<bool> out_of_memory{false};
};

int resolve_threads(const CpuOptions& opt, int64_t num_units) {
  const int wanted = opt.num_threads > 0 ? opt.num_threads : ThreadPool::default_threads();
  return static_cast<int>(std::clamp<int64_t>(num_units, 1, std::min(wanted, ThreadPool::kMaxThreads)));
}

// body(unit_index, scratch) -> rejected-scale flag, for every unit, on
// `threads` threads taking units dynamically.
template <typename Body>
void run_units(int threads, int64_t num_units, int64_t K, RunFlags& flags, const Body& body) {
  std::atomic<int64_t> next{0};
  const std::function<void(int)> task = [&](int) {
    const ScopedIeeeMode ieee;
    Scratch* scratch = nullptr;
    try {
      scratch = &Scratch::for_this_thread(K);
    } catch (const std::bad_alloc&) {
      return;  // the threads that have scratch take this one's units
    }
    bool bad = false;
    for (int64_t u = next.fetch_add(1, std::memory_order_relaxed); u < num_units;
         u = next.fetch_add(1, std::memory_order_relaxed)) {
      bad |= body(u, *scratch);
    }
    if (bad) flags.bad_scale.store(true, std::memory_order_relaxed);
  };
  ThreadPool::instance().run(threads, task);
  // Units are either all done or, when no thread got scratch, none: a failed
  // allocation never leaves the output half written.
  if (next.load() < num_units) flags.out_of_memory.store(true);
}

// fn(begin, end) over [0, n) split evenly over `threads` threads.
template <typename Fn>
void parallel_ranges(int threads, int64_t n, const Fn& fn) {
  threads = static_cast<int>(std::clamp<int64_t>(n, 1, threads));
  const std::function<void(int)> task = [&](int i) {
    const ScopedIeeeMode ieee;
    fn(n * i / threads, n * (i + 1) / threads);
  };
  ThreadPool::instance().run(threads, task);
}

// Rows of x rounded to BF16 and stored in chunk order.
void convert_activations(const void* x, DType dtype, int64_t num_rows, int64_t K, int threads, float* out) {
  const int64_t work_threads = std::max<int64_t>(1, std::min<int64_t>(threads, num_rows * K / (1 << 16)));
  parallel_ranges(static_cast<int>(work_threads), num_rows, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      float* dst = out + row * K;
      if (dtype == DType::kBF16) {
        const uint16_t* src = static_cast<const uint16_t*>(x) + row * K;
        for (int64_t c = 0; c < K; c += kChunk) {
          for (int i = 0; i < kChunk; ++i) dst[c + i] = bf16_to_float(src[c + kChunkOrder[i]]);
        }
      } else {
        const float* src = static_cast<const float*>(x) + row * K;
        for (int64_t c = 0; c < K; c += kChunk) {
          for (int i = 0; i < kChunk; ++i) dst[c + i] = round_to_bf16(src[c + kChunkOrder[i]]);
        }
      }
    }
  });
}

std::vector<ExpertJob> scheduled_jobs(const RoutingPlan& plan, Schedule schedule) {
  if (schedule != Schedule::kRect) return plan.jobs;
  std::vector<ExpertJob> jobs = rect_jobs(plan);
  // Empty rectangular tiles have nothing to compute.
  jobs.erase(std::remove_if(jobs.begin(), jobs.end(), [](const ExpertJob& j) { return j.num_rows == 0; }),
             jobs.end());
  return jobs;
}

// The error to return after a run: allocation failure, or the exact message
// for a rejected scale byte (the kernels only flag it; validate_weights finds
// and names it).
Status run_status(const RunFlags& flags, std::initializer_list<std::pair<const ExpertWeightsView*, const char*>> views) {
  if (flags.out_of_memory.load()) return make_status(StatusCode::kOutOfMemory, "CPU op: scratch allocation failed");
  if (!flags.bad_scale.load()) return ok_status();
  for (const auto& [view, name] : views) NVFP4MOE_RETURN_IF_ERROR(validate_weights(*view, name));
  return make_status(StatusCode::kInternal, "a CPU kernel flagged a scale byte that validate_weights accepts");
}

Status check_schedule(Schedule s) {
  if (s != Schedule::kCompact && s != Schedule::kRect) {
    return invalid_argument("schedule = ", static_cast<int>(s), " is not a Schedule");
  }
  return ok_status();
}

}  // namespace

Status mul_mat_id_with(const MulMatIdArgs& a, const CpuOptions& opt, const Kernels& kernels) {
  NVFP4MOE_RETURN_IF_ERROR(validate_mul_mat_id(a));
  NVFP4MOE_RETURN_IF_ERROR(check_schedule(opt.schedule));
  if (a.num_tokens == 0) return ok_status();
  NVFP4MOE_RETURN_IF_ERROR(detail::check_alpha(a.weights, "weights"));
  try {
    RoutingPlan plan;
    NVFP4MOE_RETURN_IF_ERROR(build_routing_plan(a.ids, a.num_tokens, a.top_k, a.weights.num_experts,
                                                PlanOptions{kBlockRows}, &plan));
    const std::vector<ExpertJob> jobs = scheduled_jobs(plan, opt.schedule);
    const int64_t K = a.weights.cols, N = a.weights.rows, top_k = a.top_k;
    const std::vector<Unit> units = make_units(jobs, N);
    const int threads = resolve_threads(opt, static_cast<int64_t>(units.size()));

    const int64_t x_rows = a.x_per_slot ? a.num_tokens * top_k : a.num_tokens;
    std::vector<float> xc(static_cast<size_t>(x_rows * K));
    convert_activations(a.x, a.x_dtype, x_rows, K, threads, xc.data());

    const Projection proj{a.weights, 0};
    RunFlags flags;
    run_units(threads, static_cast<int64_t>(units.size()), K, flags, [&](int64_t ui, Scratch& s) {
      const Unit& u = units[ui];
      const ExpertJob& job = jobs[u.job];
      for (int r = 0; r < job.num_rows; ++r) {
        const int64_t pair = plan.sorted_src[job.row_begin + r];
        s.x[r] = xc.data() + (a.x_per_slot ? pair : pair / top_k) * K;
      }
      float* sums = s.sums[0];
      const bool bad = compute_sums(kernels, proj, job.expert, u.n0, u.rows, s.x, job.num_rows, s, sums);
      const float alpha = a.weights.alpha_of(job.expert);
      for (int r = 0; r < job.num_rows; ++r) {
        float* y = a.y + plan.sorted_src[job.row_begin + r] * N + u.n0;
        for (int c = 0; c < u.rows; ++c) y[c] = sums[r * u.rows + c] * alpha;
      }
      return bad;
    });
    return run_status(flags, {{&a.weights, "weights"}});
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "mul_mat_id_cpu: host allocation failed");
  }
}

Status moe_layer_with(const MoeLayerArgs& a, const CpuOptions& opt, const Kernels& kernels) {
  NVFP4MOE_RETURN_IF_ERROR(validate_moe_layer(a));
  NVFP4MOE_RETURN_IF_ERROR(check_schedule(opt.schedule));
  if (a.num_tokens == 0) return ok_status();
  const MoeLayerWeights& lw = a.weights;
  const bool merged = lw.merged();
  const int64_t H = lw.down.rows, F = lw.down.cols, top_k = a.top_k, T = a.num_tokens;
  const Projection gate{merged ? lw.gate_up : lw.gate, 0};
  const Projection up{merged ? lw.gate_up : lw.up, merged ? F : 0};
  const Projection down{lw.down, 0};
  if (merged) {
    NVFP4MOE_RETURN_IF_ERROR(detail::check_alpha(lw.gate_up, "gate_up"));
  } else {
    NVFP4MOE_RETURN_IF_ERROR(detail::check_alpha(lw.gate, "gate"));
    NVFP4MOE_RETURN_IF_ERROR(detail::check_alpha(lw.up, "up"));
  }
  NVFP4MOE_RETURN_IF_ERROR(detail::check_alpha(lw.down, "down"));
  try {
    RoutingPlan plan;
    NVFP4MOE_RETURN_IF_ERROR(
        build_routing_plan(a.ids, T, top_k, lw.down.num_experts, PlanOptions{kBlockRows}, &plan));
    const std::vector<ExpertJob> jobs = scheduled_jobs(plan, opt.schedule);

    // Stage 1: h = bf16(act(alpha_g * gate.x, alpha_u * up.x)), compact rows,
    // chunk order (it is the activation of stage 2).
    const std::vector<Unit> units_f = make_units(jobs, F);
    const int threads = resolve_threads(opt, static_cast<int64_t>(units_f.size()));
    std::vector<float> xc(static_cast<size_t>(T * H));
    convert_activations(a.x, a.x_dtype, T, H, threads, xc.data());
    std::vector<float> h(static_cast<size_t>(T * top_k * F));
    RunFlags flags_f;
    run_units(threads, static_cast<int64_t>(units_f.size()), H, flags_f, [&](int64_t ui, Scratch& s) {
      const Unit& unit = units_f[ui];
      const ExpertJob& job = jobs[unit.job];
      for (int r = 0; r < job.num_rows; ++r) s.x[r] = xc.data() + plan.sorted_src[job.row_begin + r] / top_k * H;
      float* gate_sums = s.sums[0];
      float* up_sums = s.sums[1];
      bool bad = compute_sums(kernels, gate, job.expert, unit.n0, unit.rows, s.x, job.num_rows, s, gate_sums);
      bad |= compute_sums(kernels, up, job.expert, unit.n0, unit.rows, s.x, job.num_rows, s, up_sums);
      const float alpha_g = gate.w.alpha_of(job.expert), alpha_u = up.w.alpha_of(job.expert);
      for (int r = 0; r < job.num_rows; ++r) {
        float* hr = h.data() + (job.row_begin + r) * F;
        for (int c = 0; c < unit.rows; ++c) {
          const float g = gate_sums[r * unit.rows + c] * alpha_g;
          const float u = up_sums[r * unit.rows + c] * alpha_u;
          hr[chunk_order_index(unit.n0 + c)] = round_to_bf16(apply_activation(a.act, g, u));
        }
      }
      return bad;
    });
    // A corrupt scale byte is reported after the whole layer has run, so that
    // out is fully written on that error as on success (ops.hpp).
    const Status status_f = merged ? run_status(flags_f, {{&lw.gate_up, "gate_up"}})
                                   : run_status(flags_f, {{&lw.gate, "gate"}, {&lw.up, "up"}});
    if (status_f.code() == StatusCode::kOutOfMemory) return status_f;

    // Stage 2: y[pair] = alpha_d * down.h rounded to BF16 (the GPU's slot
    // rows), then out[t] = the sum over slots, in slot order, of w_route * y.
    // With k = 1, y is out itself, weighted in place.
    const std::vector<Unit> units_h = make_units(jobs, H);
    std::vector<float> y_pairs;
    float* y = a.out;
    if (top_k > 1) {
      y_pairs.resize(static_cast<size_t>(T * top_k * H));
      y = y_pairs.data();
    }
    RunFlags flags_h;
    run_units(threads, static_cast<int64_t>(units_h.size()), F, flags_h, [&](int64_t ui, Scratch& s) {
      const Unit& u = units_h[ui];
      const ExpertJob& job = jobs[u.job];
      for (int r = 0; r < job.num_rows; ++r) s.x[r] = h.data() + (job.row_begin + r) * F;
      float* sums = s.sums[0];
      const bool bad = compute_sums(kernels, down, job.expert, u.n0, u.rows, s.x, job.num_rows, s, sums);
      const float alpha_d = lw.down.alpha_of(job.expert);
      for (int r = 0; r < job.num_rows; ++r) {
        const int64_t pair = plan.sorted_src[job.row_begin + r];
        float* yr = y + pair * H + u.n0;
        for (int c = 0; c < u.rows; ++c) yr[c] = round_to_bf16(sums[r * u.rows + c] * alpha_d);
      }
      return bad;
    });
    const Status status_h = run_status(flags_h, {{&lw.down, "down"}});
    if (status_h.code() == StatusCode::kOutOfMemory) return status_h;

    if (top_k > 1 || a.route_weights) {
      const int reduce_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, T * top_k * H >> 16)));
      parallel_ranges(reduce_threads, T, [&](int64_t begin, int64_t end) {
        std::vector<float> sum(static_cast<size_t>(H));
        for (int64_t t = begin; t < end; ++t) {
          const float* yt = y + t * top_k * H;
          std::fill(sum.begin(), sum.end(), 0.0f);
          for (int64_t j = 0; j < top_k; ++j) {
            const float w = a.route_weights ? a.route_weights[t * top_k + j] : 1.0f;
            for (int64_t n = 0; n < H; ++n) sum[n] += w * yt[j * H + n];
          }
          std::copy(sum.begin(), sum.end(), a.out + t * H);
        }
      });
    }
    return status_f.ok() ? status_h : status_f;
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "moe_layer_cpu: host allocation failed");
  }
}

}  // namespace nvfp4moe::cpu

namespace nvfp4moe {

Status mul_mat_id_cpu(const MulMatIdArgs& a, const CpuOptions& opt) {
  return cpu::mul_mat_id_with(a, opt, cpu::best_kernels());
}

Status moe_layer_cpu(const MoeLayerArgs& a, const CpuOptions& opt) {
  return cpu::moe_layer_with(a, opt, cpu::best_kernels());
}

}  // namespace nvfp4moe
