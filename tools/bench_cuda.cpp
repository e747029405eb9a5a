// The CUDA runner of `nvfp4moe bench`. Per case: random packed weights made
// on the device (several copies when the tensor is small next to L2), a few
// routings and activation sets, each op captured in a CUDA graph; the median
// of graph replays timed with device events, rotating through the copies so
// that no replay finds its weights in L2. The cases of one preset, op and T
// (its routings and schedules) are timed in turns, one call each per round.
// Ceilings (cuBLAS BF16 GEMM, read stream) and a cuBLAS BF16 grouped-GEMM
// peer are measured in the same run.
#include "bench.hpp"

#if defined(NVFP4MOE_WITH_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "cuda/bench_support.hpp"
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "nvfp4moe/cuda.hpp"

namespace nvfp4moe::bench {
namespace {

namespace nc = nvfp4moe::cuda;
namespace bs = nvfp4moe::cuda::bench_support;

constexpr int kRotations = 4;  // routings / activation sets / graphs per case

struct Env {
  std::unique_ptr<nc::Context> ctx;
  cudaStream_t stream = nullptr;
  double peak_tflops = 0, read_gbps = 0;
  int64_t l2_bytes = 0;
  // Weights per (preset, op, copy).
  std::map<std::string, std::vector<nc::DeviceExpertWeights>> weights;
  std::map<std::string, std::vector<nc::DeviceMoeLayer>> layers;
  std::map<std::string, std::unique_ptr<bs::CublasGroupedPeer>> peers;
  nc::DeviceBuffer floor_bytes, floor_sink;  // read_floor_in_graph's buffer
};

Status get_env(Env** out) {
  static std::unique_ptr<Env> env;
  if (!env) {
    auto e = std::make_unique<Env>();
    NVFP4MOE_RETURN_IF_ERROR(nc::Context::create(0, &e->ctx));
    NVFP4MOE_CUDA_TRY(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking));
    nc::DeviceInfo info;
    NVFP4MOE_RETURN_IF_ERROR(nc::device_info(0, &info));
    e->l2_bytes = info.l2_bytes;
    std::fprintf(stderr, "bench: measuring ceilings on %s ...\n", info.name.c_str());
    NVFP4MOE_RETURN_IF_ERROR(bs::measure_bf16_gemm(8192, 10, e->stream, &e->peak_tflops));
    NVFP4MOE_RETURN_IF_ERROR(bs::measure_read_bandwidth(size_t(4) << 30, 10, e->stream, &e->read_gbps));
    std::fprintf(stderr, "bench: BF16 GEMM 8192^3 %.0f TFLOP/s, read stream %.0f GB/s\n", e->peak_tflops,
                 e->read_gbps);
    env = std::move(e);
  }
  *out = env.get();
  return ok_status();
}

// Enough copies that the rotation spans 3x the L2.
int copies_for(int64_t bytes, int64_t l2) {
  return int(std::clamp<int64_t>((3 * l2 + bytes - 1) / std::max<int64_t>(bytes, 1), 1, kRotations));
}

Status weights_for(Env& env, const Preset& p, Op op, std::vector<nc::DeviceExpertWeights>** out) {
  const std::string key = p.name + "." + op_name(op);
  auto it = env.weights.find(key);
  if (it == env.weights.end()) {
    int64_t rows, cols;
    op_shape(p, op, &rows, &cols);
    const int64_t bytes = p.num_experts * rows * (cols / 2 + cols / 16);
    std::vector<nc::DeviceExpertWeights> copies(size_t(copies_for(bytes, env.l2_bytes)));
    for (size_t i = 0; i < copies.size(); ++i)
      NVFP4MOE_RETURN_IF_ERROR(bs::random_device_weights(p.num_experts, rows, cols, 1000 + i, &copies[i]));
    it = env.weights.emplace(key, std::move(copies)).first;
  }
  *out = &it->second;
  return ok_status();
}

Status layers_for(Env& env, const Preset& p, std::vector<nc::DeviceMoeLayer>** out) {
  auto it = env.layers.find(p.name);
  if (it == env.layers.end()) {
    const int64_t bytes = p.num_experts * 3 * p.ffn * (p.hidden / 2 + p.hidden / 16);
    std::vector<nc::DeviceMoeLayer> copies(size_t(copies_for(bytes, env.l2_bytes)));
    for (size_t i = 0; i < copies.size(); ++i) {
      nc::DeviceMoeLayer& L = copies[i];
      NVFP4MOE_RETURN_IF_ERROR(bs::random_device_weights(p.num_experts, 2 * p.ffn, p.hidden, 2000 + i, &L.gate_up));
      L.gate_up.gate_up_interleaved = true;
      NVFP4MOE_RETURN_IF_ERROR(bs::random_device_weights(p.num_experts, p.hidden, p.ffn, 3000 + i, &L.down));
      L.hidden = p.hidden;
      L.ffn = p.ffn;
      L.num_experts = p.num_experts;
    }
    it = env.layers.emplace(p.name, std::move(copies)).first;
  }
  *out = &it->second;
  return ok_status();
}

template <typename T>
Status upload_vec(const std::vector<T>& v, nc::DeviceBuffer* out) {
  NVFP4MOE_RETURN_IF_ERROR(nc::DeviceBuffer::allocate(std::max<size_t>(v.size(), 1) * sizeof(T), out));
  if (!v.empty()) NVFP4MOE_CUDA_TRY(cudaMemcpy(out->get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return ok_status();
}

struct Graphs {
  std::vector<cudaGraphExec_t> exec;
  ~Graphs() {
    for (auto g : exec) cudaGraphExecDestroy(g);
  }
};

// Captures enqueue(r) for each rotation r, then times replays (r = i % n).
// With calls_per_graph > 1 each graph holds that many calls, enqueue(r),
// enqueue(r + 1), ..., and *us is the time per call: the cost of a call
// inside a longer graph, as in a model's captured forward pass, without the
// launch of a graph that holds nothing else.
Status capture_graphs(Env& env, const std::function<Status(int)>& enqueue, int calls_per_graph, Graphs* graphs) {
  for (int r = 0; r < kRotations; ++r) {
    cudaGraph_t g;
    NVFP4MOE_CUDA_TRY(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeGlobal));
    Status st = ok_status();
    for (int i = 0; i < calls_per_graph && st.ok(); ++i) st = enqueue((r + i) % kRotations);
    const cudaError_t end = cudaStreamEndCapture(env.stream, &g);
    NVFP4MOE_RETURN_IF_ERROR(st);
    NVFP4MOE_RETURN_IF_ERROR(nc::cuda_status(end, "cudaStreamEndCapture"));
    cudaGraphExec_t exec;
    NVFP4MOE_CUDA_TRY(cudaGraphInstantiate(&exec, g, 0));
    cudaGraphDestroy(g);
    graphs->exec.push_back(exec);
  }
  return ok_status();
}

Status launch_rotation(Env& env, const Graphs& graphs, int i) {
  const cudaError_t e = cudaGraphLaunch(graphs.exec[size_t(i) % graphs.exec.size()], env.stream);
  return nc::cuda_status(e, "cudaGraphLaunch");
}

Status time_graphs(Env& env, int reps, const std::function<Status(int)>& enqueue, double* us,
                   int calls_per_graph = 1) {
  Graphs graphs;
  NVFP4MOE_RETURN_IF_ERROR(capture_graphs(env, enqueue, calls_per_graph, &graphs));
  NVFP4MOE_RETURN_IF_ERROR(
      bs::median_us(env.stream, 3, reps, [&](int i) { return launch_rotation(env, graphs, i); }, us, kRotations));
  *us /= calls_per_graph;
  return ok_status();
}

// Calls per graph for the in-graph figures (plan_in_graph_us, us_in_graph).
constexpr int kCallsPerGraph = 8;

// The memory system's floor for a decode case: a plain read stream over the
// case's hit-expert weight bytes (no dequant, no MMA, no ids), timed like
// us_in_graph, per call in a graph of kCallsPerGraph. Every captured call
// reads its own region of a buffer, at least 4x the L2 apart before a region
// comes back, so the reads come from DRAM as the op's do.
Status read_floor_in_graph(Env& env, int reps, double bytes, double* us) {
  constexpr int64_t kAlign = 256;
  const int64_t region = std::max<int64_t>((int64_t(bytes) + kAlign - 1) / kAlign * kAlign, kAlign);
  const int64_t regions = std::clamp<int64_t>((4 * env.l2_bytes + region - 1) / region + 1, 2,
                                              int64_t(kRotations) * kCallsPerGraph);
  if (env.floor_bytes.bytes() < size_t(regions * region)) {
    env.floor_bytes = nc::DeviceBuffer();
    NVFP4MOE_RETURN_IF_ERROR(nc::DeviceBuffer::allocate(size_t(regions * region), &env.floor_bytes));
    NVFP4MOE_CUDA_TRY(cudaMemsetAsync(env.floor_bytes.get(), 0x3c, size_t(regions * region), env.stream));
  }
  if (!env.floor_sink.get()) NVFP4MOE_RETURN_IF_ERROR(nc::DeviceBuffer::allocate(64, &env.floor_sink));
  int64_t call = 0;  // captured calls so far: each gets the next region
  const auto read = [&](int) {
    const uint8_t* p = env.floor_bytes.as<uint8_t>() + (call++ % regions) * region;
    return bs::enqueue_read_stream(p, size_t(int64_t(bytes) / 16 * 16), env.floor_sink.as<float>(), env.stream);
  };
  return time_graphs(env, reps, read, us, kCallsPerGraph);
}

// Decode and small batches (T <= kInGraphMaxTokens), where a graph's own
// launch is a large part of a single call: us_in_graph, the time per call
// in a graph of kCallsPerGraph calls (rotating routings, activations and
// weight copies as above), and read_floor_in_graph_us, the same bytes read
// by a plain read stream.
constexpr int64_t kInGraphMaxTokens = 32;
Status time_in_graph(Env& env, int reps, int64_t num_tokens, const std::function<Status(int)>& enqueue,
                     BenchResult* out) {
  if (num_tokens > kInGraphMaxTokens) return ok_status();
  double us = 0, floor_us = 0;
  NVFP4MOE_RETURN_IF_ERROR(time_graphs(env, reps, enqueue, &us, kCallsPerGraph));
  out->extra.push_back({"us_in_graph", us});
  NVFP4MOE_RETURN_IF_ERROR(read_floor_in_graph(env, reps, out->weight_bytes, &floor_us));
  out->extra.push_back({"read_floor_in_graph_us", floor_us});
  return ok_status();
}

// Timed calls per figure: the case's own, or fewer for the longest calls.
int timed_reps(const BenchCase& c) { return c.reps > 0 ? c.reps : (c.tokens >= 4096 ? 10 : 30); }

// One case's inputs, its call, and its graphs: alive while its group is
// timed.
struct CaseRun {
  BenchCase c;
  std::vector<std::vector<int32_t>> ids;
  std::vector<nc::DeviceBuffer> dids, dx;
  nc::DeviceBuffer dw, dout, dy;  // layer: router weights, F32 out; MUL_MAT_ID: BF16 y
  std::vector<nc::DeviceMoeLayer>* layers = nullptr;
  std::vector<nc::DeviceExpertWeights>* weights = nullptr;
  int64_t rows = 0, cols = 0;  // MUL_MAT_ID's N and K
  Graphs graphs;               // one call per rotation

  // One call on rotation r.
  Status enqueue(Env& env, int r) const {
    const Preset& p = c.preset;
    if (c.op == Op::kLayer) {
      nc::CudaMoeLayerArgs a;
      a.layer = &(*layers)[size_t(r) % layers->size()];
      a.x = dx[size_t(r)].get();
      a.x_dtype = c.x_dtype;
      a.ids = dids[size_t(r)].as<int32_t>();
      a.route_weights = dw.as<float>();
      a.num_tokens = c.tokens;
      a.top_k = p.top_k;
      a.out = dout.as<float>();
      a.schedule = c.schedule;
      a.unfused = c.unfused;
      return nc::moe_layer(*env.ctx, a, env.stream);
    }
    nc::CudaMulMatIdArgs a;
    a.weights = &(*weights)[size_t(r) % weights->size()];
    a.x = dx[size_t(r)].get();
    a.x_dtype = c.x_dtype;
    a.x_per_slot = c.op == Op::kDown;
    a.ids = dids[size_t(r)].as<int32_t>();
    a.num_tokens = c.tokens;
    a.top_k = p.top_k;
    a.y = dy.get();
    a.y_dtype = DType::kBF16;
    a.schedule = c.schedule;
    return nc::mul_mat_id(*env.ctx, a, env.stream);
  }
};

Status prepare_case(Env& env, const BenchCase& c, CaseRun* run) {
  const Preset& p = c.preset;
  const int64_t T = c.tokens, k = p.top_k, E = p.num_experts, pairs = T * k;
  run->c = c;
  run->ids.resize(kRotations);
  run->dids.resize(kRotations);
  run->dx.resize(kRotations);
  for (int r = 0; r < kRotations; ++r) {
    run->ids[size_t(r)] = make_routing(c.routing, T, k, E, c.seed + uint64_t(r));
    NVFP4MOE_RETURN_IF_ERROR(upload_vec(run->ids[size_t(r)], &run->dids[size_t(r)]));
  }
  if (c.op != Op::kLayer) op_shape(p, c.op, &run->rows, &run->cols);
  const int64_t x_elems = c.op == Op::kLayer ? T * p.hidden : (c.op == Op::kDown ? pairs : T) * run->cols;
  const bool f32 = c.x_dtype == DType::kF32;
  for (int r = 0; r < kRotations; ++r) {
    NVFP4MOE_RETURN_IF_ERROR(
        nc::DeviceBuffer::allocate(size_t(std::max<int64_t>(x_elems, 1)) * (f32 ? 4 : 2), &run->dx[size_t(r)]));
    NVFP4MOE_RETURN_IF_ERROR(f32 ? bs::fill_random_f32(run->dx[size_t(r)].as<float>(), x_elems, 50 + r, env.stream)
                                 : bs::fill_random_bf16(run->dx[size_t(r)].as<uint16_t>(), x_elems, 50 + r,
                                                        env.stream));
  }
  if (c.op == Op::kLayer) {
    NVFP4MOE_RETURN_IF_ERROR(layers_for(env, p, &run->layers));
    NVFP4MOE_RETURN_IF_ERROR(upload_vec(random_route_weights(T, k, c.seed), &run->dw));
    NVFP4MOE_RETURN_IF_ERROR(nc::DeviceBuffer::allocate(size_t(std::max<int64_t>(T * p.hidden, 1)) * 4, &run->dout));
  } else {
    NVFP4MOE_RETURN_IF_ERROR(weights_for(env, p, c.op, &run->weights));
    NVFP4MOE_RETURN_IF_ERROR(
        nc::DeviceBuffer::allocate(size_t(std::max<int64_t>(pairs * run->rows, 1)) * 2, &run->dy));
  }
  return ok_status();
}

// Everything of a case but its main timing: the work, the in-graph time,
// the cuBLAS peer, the plan's own cost and the roofline.
Status finish_case(Env& env, CaseRun& run, double us, BenchResult* out) {
  const BenchCase& c = run.c;
  const Preset& p = c.preset;
  const int64_t T = c.tokens, k = p.top_k, E = p.num_experts;
  const int reps = timed_reps(c);
  const auto enqueue = [&](int r) { return run.enqueue(env, r); };
  // The timed calls cycle through the kRotations routings, so the work is
  // their mean: with Zipf routing at small T the experts hit differ between
  // them (mixtral T = 8: 5, 6, 7 and 6 experts in the four routings), and
  // the first routing's count alone understated the bytes.
  out->flops = out->weight_bytes = 0;
  for (int r = 0; r < kRotations; ++r) {
    double flops = 0, bytes = 0;
    count_work(c, run.ids[size_t(r)], &flops, &bytes);
    out->flops += flops / kRotations;
    out->weight_bytes += bytes / kRotations;
  }
  NVFP4MOE_RETURN_IF_ERROR(time_in_graph(env, reps, T, enqueue, out));
  if (c.op != Op::kLayer) {
    // Peer: cuBLAS BF16 grouped GEMM on the first routing, rows pre-sorted.
    const std::string key = p.name + "." + op_name(c.op);
    if (!env.peers.count(key)) {
      std::unique_ptr<bs::CublasGroupedPeer> peer;
      NVFP4MOE_RETURN_IF_ERROR(bs::CublasGroupedPeer::create(E, run.rows, run.cols, 77, &peer));
      env.peers[key] = std::move(peer);
    }
    std::vector<int32_t> counts(size_t(E), 0);
    for (int32_t e : run.ids[0]) ++counts[size_t(e)];
    double peer_us = 0;
    NVFP4MOE_RETURN_IF_ERROR(env.peers[key]->time_us(counts, reps, env.stream, &peer_us));
    out->extra.push_back({"cublas_bf16_us", peer_us});
    out->extra.push_back({"x_vs_cublas", peer_us / us});
  }
  // The routing plan alone, for the plan-overhead target: in a graph of its
  // own (plan_us, which also pays that graph's launch, ~3 us on an H200) and
  // as one node of a longer graph (plan_in_graph_us).
  const PlanOptions plan_options = nc::choose_plan_options(T, k, E);
  const auto plan = [&](int r) {
    return nc::build_plan(*env.ctx, run.dids[size_t(r)].as<int32_t>(), T, k, E, plan_options, env.stream);
  };
  double plan_us = 0, plan_in_graph_us = 0;
  NVFP4MOE_RETURN_IF_ERROR(time_graphs(env, reps, plan, &plan_us));
  NVFP4MOE_RETURN_IF_ERROR(time_graphs(env, reps, plan, &plan_in_graph_us, kCallsPerGraph));

  out->us_median = us;
  const double roofline_us =
      std::max(out->flops / (env.peak_tflops * 1e12), out->weight_bytes / (env.read_gbps * 1e9)) * 1e6;
  out->extra.push_back({"roofline", roofline_us / us});
  out->extra.push_back({"plan_us", plan_us});
  out->extra.push_back({"plan_in_graph_us", plan_in_graph_us});
  // 0: the case runs the weight streamer, which needs no plan (plan_us is then
  // what the plan would cost, not part of us).
  const bool streams = nc::use_weight_streamer(T, k, E);
  out->extra.push_back({"plan_used", streams && !c.unfused ? 0.0 : 1.0});
  out->extra.push_back({"peak_tflops", env.peak_tflops});
  out->extra.push_back({"read_gbps", env.read_gbps});
  return ok_status();
}

}  // namespace

Status run_cases_cuda(const std::vector<BenchCase>& group, std::vector<BenchResult>* out) {
  if (out == nullptr) return invalid_argument("run_cases_cuda: out is null");
  if (group.empty()) return invalid_argument("run_cases_cuda: no cases");
  if (nc::device_count() == 0) return make_status(StatusCode::kNoDevice, "no CUDA device found");
  const BenchCase& c0 = group[0];
  for (const BenchCase& c : group)
    if (!same_timing_group(c, c0))
      return invalid_argument("run_cases_cuda: a group's cases share preset, op, T, unfused and reps");
  Env* env = nullptr;
  NVFP4MOE_RETURN_IF_ERROR(get_env(&env));
  const Preset& p = c0.preset;
  // Sized before any capture: a buffer grown later would leave the captured
  // graphs of the group's earlier cases pointing at freed memory.
  NVFP4MOE_RETURN_IF_ERROR(env->ctx->reserve(c0.tokens, p.top_k, p.num_experts, std::max(p.hidden, 2 * p.ffn)));
  std::vector<std::unique_ptr<CaseRun>> runs;
  for (const BenchCase& c : group) {
    runs.push_back(std::make_unique<CaseRun>());
    NVFP4MOE_RETURN_IF_ERROR(prepare_case(*env, c, runs.back().get()));
    CaseRun& run = *runs.back();
    NVFP4MOE_RETURN_IF_ERROR(capture_graphs(*env, [&](int r) { return run.enqueue(*env, r); }, 1, &run.graphs));
  }
  // The group's cases (its routings and schedules) in turns: a ratio between
  // them sees one power state. Round i runs case j on rotation i + j * step,
  // the step chosen so that no two consecutive calls share a rotation: two
  // schedules of one routing back to back would let the second find the
  // first's weights in L2 (H200, qwen3 T = 1 with step 1 at n = 4 cases:
  // rect, the second, 0.91x the time of compact with the same kernel;
  // bench/results/2026-12-01-h200-675f88f-decode.json).
  const int n = int(runs.size());
  const int step = interleave_step(n, kRotations);
  const int reps = timed_reps(c0);
  std::vector<double> us;
  NVFP4MOE_RETURN_IF_ERROR(bs::median_us_interleaved(
      env->stream, 3, reps, n,
      [&](int j, int i) { return launch_rotation(*env, runs[size_t(j)]->graphs, i + j * step); }, &us,
      kRotations));
  out->assign(group.size(), {});
  for (size_t j = 0; j < runs.size(); ++j) NVFP4MOE_RETURN_IF_ERROR(finish_case(*env, *runs[j], us[j], &(*out)[j]));
  return ok_status();
}

}  // namespace nvfp4moe::bench

#else

namespace nvfp4moe::bench {
Status run_cases_cuda(const std::vector<BenchCase>&, std::vector<BenchResult>*) {
  return make_status(StatusCode::kUnsupported, "this build has no CUDA backend (configure with nvcc present)");
}
}  // namespace nvfp4moe::bench

#endif
