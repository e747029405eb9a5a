// Host side of the CUDA backend: weights upload, the per-stream Context, and
// the ops. Forward paths only enqueue work: no host synchronization.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::cuda {

// ---- DeviceBuffer -------------------------------------------------------------
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
Status DeviceBuffer::allocate(size_t bytes, DeviceBuffer* out) {
  DeviceBuffer b;
  if (bytes > 0) {
    const cudaError_t e = cudaMalloc(&b.ptr_, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return make_status(e == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kDeviceError,
                         "cudaMalloc(", bytes, " bytes): ", cudaGetErrorString(e));
    }
  }
  b.bytes_ = bytes;
  *out = std::move(b);
  return ok_status();
}

namespace {

Status upload(const void* host, size_t bytes, DeviceBuffer* out) {
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(bytes, out));
  if (bytes) NVFP4MOE_CUDA_TRY(cudaMemcpy(out->get(), host, bytes, cudaMemcpyHostToDevice));
  return ok_status();
}

Status upload_alpha(const ExpertWeightsView& w, DeviceBuffer* out) {
  std::vector<float> alpha(static_cast<size_t>(w.num_experts));
  for (int64_t e = 0; e < w.num_experts; ++e) alpha[e] = w.alpha_of(e);
  return upload(alpha.data(), alpha.size() * sizeof(float), out);
}

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

Status check_shape_limits(int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  if (num_tokens < 0) return invalid_argument("num_tokens = ", num_tokens, " is negative");
  if (top_k < 1 || top_k > num_experts)
    return invalid_argument("top_k = ", top_k, " must be in [1, num_experts = ", num_experts, "]");
  if (num_experts > 1024)
    return make_status(StatusCode::kOutOfRange, "num_experts = ", num_experts, " exceeds the supported 1024");
  if (top_k > 32) return make_status(StatusCode::kOutOfRange, "top_k = ", top_k, " exceeds the supported 32");
  if (num_tokens * top_k > INT32_MAX)
    return make_status(StatusCode::kOutOfRange, "num_tokens * top_k = ", num_tokens * top_k,
                       " exceeds 2^31 - 1 routed rows");
  return ok_status();
}

}  // namespace

Status check_device_supported(int ordinal) {
  DeviceInfo d;
  NVFP4MOE_RETURN_IF_ERROR(device_info(ordinal, &d));
  if (d.cc_major != 9)
    return make_status(StatusCode::kUnsupported, "device ", ordinal, " (", d.name, ", sm_", d.cc_major, d.cc_minor,
                       ") is not supported: this build runs sm_90a (Hopper) kernels");
  return ok_status();
}

Status upload_expert_weights(const ExpertWeightsView& w, DeviceExpertWeights* out) {
  if (!out) return invalid_argument("upload_expert_weights: out is null");
  NVFP4MOE_RETURN_IF_ERROR(validate_weights(w, "weights"));
  const int64_t bytes = sm90_packed_bytes(w.num_experts, w.rows, w.cols);
  if (bytes < 0)
    return invalid_argument("weights: N = ", w.rows, " and K = ", w.cols,
                            " must be multiples of 64 for the CUDA backend");
  std::vector<uint8_t> packed(static_cast<size_t>(bytes));
  NVFP4MOE_RETURN_IF_ERROR(pack_sm90(w, packed.data()));
  DeviceExpertWeights d;
  d.num_experts = w.num_experts;
  d.rows = w.rows;
  d.cols = w.cols;
  NVFP4MOE_RETURN_IF_ERROR(upload(packed.data(), packed.size(), &d.packed));
  NVFP4MOE_RETURN_IF_ERROR(upload_alpha(w, &d.alpha));
  *out = std::move(d);
  return ok_status();
}

namespace {

// Rows [row0, row0 + rows) of every expert of a merged [E][2F][K] tensor.
ExpertWeights slice_rows(const ExpertWeightsView& w, int64_t row0, int64_t rows) {
  ExpertWeights out;
  out.num_experts = w.num_experts;
  out.rows = rows;
  out.cols = w.cols;
  const int64_t cb = w.row_code_bytes(), sb = w.row_scale_bytes();
  out.codes.resize(static_cast<size_t>(w.num_experts * rows * cb));
  out.scales.resize(static_cast<size_t>(w.num_experts * rows * sb));
  for (int64_t e = 0; e < w.num_experts; ++e) {
    const int64_t src = e * w.rows + row0, dst = e * rows;
    std::copy_n(w.codes + src * cb, rows * cb, out.codes.begin() + dst * cb);
    std::copy_n(w.scales + src * sb, rows * sb, out.scales.begin() + dst * sb);
  }
  return out;
}

}  // namespace

Status upload_moe_layer(const MoeLayerWeights& w, const ActivationParams& act, DeviceMoeLayer* out) {
  if (!out) return invalid_argument("upload_moe_layer: out is null");
  ExpertWeightsView gate = w.gate, up = w.up;
  ExpertWeights gate_copy, up_copy;
  if (w.merged()) {
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(w.gate_up, "gate_up"));
    if (w.gate_up.rows % 2 != 0) return invalid_argument("gate_up: rows = ", w.gate_up.rows, " must be even (2F)");
    const int64_t F = w.gate_up.rows / 2;
    gate_copy = slice_rows(w.gate_up, 0, F);
    up_copy = slice_rows(w.gate_up, F, F);
    gate = gate_copy.view();
    up = up_copy.view();
    gate.alpha = up.alpha = w.gate_up.alpha;
  } else {
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(w.gate, "gate"));
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(w.up, "up"));
  }
  NVFP4MOE_RETURN_IF_ERROR(validate_weights(w.down, "down"));
  if (gate.num_experts != up.num_experts || gate.rows != up.rows || gate.cols != up.cols)
    return invalid_argument("gate [", gate.num_experts, ", ", gate.rows, ", ", gate.cols, "] and up [",
                            up.num_experts, ", ", up.rows, ", ", up.cols, "] differ in shape");
  if (w.down.num_experts != gate.num_experts || w.down.cols != gate.rows || w.down.rows != gate.cols)
    return invalid_argument("down is [", w.down.num_experts, ", ", w.down.rows, ", ", w.down.cols,
                            "], expected [E, H, F] = [", gate.num_experts, ", ", gate.cols, ", ", gate.rows, "]");
  if (gate.rows % 64 != 0) return invalid_argument("ffn size F = ", gate.rows, " must be a multiple of 64");
  ExpertWeights interleaved;
  NVFP4MOE_RETURN_IF_ERROR(interleave_gate_up(gate, up, &interleaved));
  ExpertWeightsView iv = interleaved.view();
  iv.alpha = nullptr;  // the two halves keep their own alpha, uploaded below
  DeviceMoeLayer d;
  NVFP4MOE_RETURN_IF_ERROR(upload_expert_weights(iv, &d.gate_up));
  NVFP4MOE_RETURN_IF_ERROR(upload_alpha(gate, &d.gate_up.alpha));
  NVFP4MOE_RETURN_IF_ERROR(upload_alpha(up, &d.gate_up.alpha_up));
  d.gate_up.gate_up_interleaved = true;
  NVFP4MOE_RETURN_IF_ERROR(upload_expert_weights(w.down, &d.down));
  d.act = act;
  d.hidden = gate.cols;
  d.ffn = gate.rows;
  d.num_experts = gate.num_experts;
  *out = std::move(d);
  return ok_status();
}

// ---- Context ----------------------------------------------------------------
struct Context::Impl {
  int device = 0;
  int num_sms = 0;
  // Plan storage, sized for cap_pairs routed rows and cap_experts experts.
  int64_t cap_pairs = -1, cap_experts = -1;
  DeviceBuffer counts, offsets, sorted_src, inverse, jobs, scalars;  // scalars: num_jobs, max_count, status
  // The plan kernel's scratch: grid_sync holds the GridBarrier (zeroed once)
  // and then one first-bad word per CTA; cta_counts one row per CTA. Up to
  // num_sms CTAs (plan_grid_ctas).
  DeviceBuffer grid_sync, cta_counts;
  // The compact schedule's kTileQueues TileQueues (a GEMM launch's and the
  // other classes' launches beside it), zeroed once; every GEMM leaves them at
  // zero. One GEMM at a time per Context (like the plan buffers).
  DeviceBuffer tile_queue;
  int64_t plan_tokens = 0, plan_top_k = 0, plan_experts = 0;
  int64_t status_experts = 0;  // E of the last call that wrote the status word (plan or streamer)
  int32_t plan_block_rows = 0, plan_light_max_rows = 0, plan_broad_rows = 0;
  DeviceBuffer x_bf16, h_bf16, gu_f32, partial_f32;
  // The layer's per-(token, slot) down rows before the combine: BF16 in the
  // fused layer, F32 in the unfused baseline (sized for F32).
  DeviceBuffer slot_rows;
  // The weight streamer's K-split sums and counters (GemmParams), one set
  // per streamer that may run beside another: kStreamFirst for MUL_MAT_ID
  // and the layer's gate_up, kStreamSecond for the layer's down, which
  // overlaps gate_up. The counters are zeroed when allocated; launches keep
  // them at zero.
  static constexpr int kStreamFirst = 0, kStreamSecond = 1;
  DeviceBuffer stream_partial[2], stream_counters[2];

  DevicePlan plan() const {
    int32_t* s = scalars.as<int32_t>();
    DevicePlan d{};
    d.counts = counts.as<int32_t>();
    d.offsets = offsets.as<int32_t>();
    d.sorted_src = sorted_src.as<int32_t>();
    d.inverse = inverse.as<int32_t>();
    d.jobs = jobs.as<ExpertJob>();
    d.num_jobs = s;
    d.max_count = s + 1;
    d.status = reinterpret_cast<PlanStatus*>(s + 2);
    d.light_jobs_begin = s + 6;
    d.broad_jobs_begin = s + 7;
    d.barrier = grid_sync.as<GridBarrier>();
    d.cta_first_bad = reinterpret_cast<int32_t*>(d.barrier + 1);
    d.cta_counts = cta_counts.as<int32_t>();
    d.max_ctas = num_sms;
    return d;
  }

  Status grow(DeviceBuffer* b, size_t bytes, cudaStream_t stream, const char* what) {
    if (b->bytes() >= bytes) return ok_status();
    if (is_capturing(stream))
      return make_status(StatusCode::kInvalidArgument, "workspace '", what, "' needs ", bytes,
                         " bytes during stream capture; call Context::reserve() before capturing");
    NVFP4MOE_CUDA_TRY(cudaStreamSynchronize(stream));  // the old buffer may still be in use
    return DeviceBuffer::allocate(bytes, b);
  }

  // Room for a streamer's K split over `pairs` pairs and `n` output columns.
  Status grow_stream(int set, int64_t pairs, int64_t n, int32_t splits, cudaStream_t stream) {
    NVFP4MOE_RETURN_IF_ERROR(
        grow(&stream_partial[set], sizeof(float) * size_t(splits) * size_t(pairs) * size_t(n), stream,
             "stream_partial"));
    const size_t counter_bytes = sizeof(uint32_t) * size_t(std::max<int64_t>(n / 64, 1)) * size_t(pairs);
    if (stream_counters[set].bytes() < counter_bytes) {
      NVFP4MOE_RETURN_IF_ERROR(grow(&stream_counters[set], counter_bytes, stream, "stream_counters"));
      NVFP4MOE_CUDA_TRY(cudaMemsetAsync(stream_counters[set].get(), 0, counter_bytes, stream));
      NVFP4MOE_CUDA_TRY(cudaStreamSynchronize(stream));
    }
    return ok_status();
  }

  // Sized for jobs of at least min_block_rows rows (the kernels' smallest
  // tile unless a test asks for smaller ones).
  Status grow_plan(int64_t pairs, int64_t experts, cudaStream_t stream, int32_t min_block_rows = kMinTileRows) {
    pairs = std::max<int64_t>(pairs, 1);
    const size_t jobs_bytes =
        sizeof(ExpertJob) * size_t(max_jobs(pairs, experts, std::min<int32_t>(min_block_rows, kMinTileRows)));
    NVFP4MOE_RETURN_IF_ERROR(grow(&counts, sizeof(int32_t) * experts, stream, "plan.counts"));
    NVFP4MOE_RETURN_IF_ERROR(grow(&offsets, sizeof(int32_t) * (experts + 1), stream, "plan.offsets"));
    NVFP4MOE_RETURN_IF_ERROR(grow(&sorted_src, sizeof(int32_t) * pairs, stream, "plan.sorted_src"));
    NVFP4MOE_RETURN_IF_ERROR(grow(&inverse, sizeof(int32_t) * pairs, stream, "plan.inverse"));
    NVFP4MOE_RETURN_IF_ERROR(grow(&jobs, jobs_bytes, stream, "plan.jobs"));
    // num_jobs, max_count, the PlanStatus, light_jobs_begin, broad_jobs_begin (DevicePlan).
    static_assert(sizeof(PlanStatus) == 4 * sizeof(int32_t), "plan scalars layout");
    NVFP4MOE_RETURN_IF_ERROR(grow(&scalars, sizeof(int32_t) * 8, stream, "plan.scalars"));
    NVFP4MOE_RETURN_IF_ERROR(
        grow(&cta_counts, sizeof(int32_t) * size_t(num_sms) * plan_counts_stride(experts), stream, "plan.cta_counts"));
    const size_t sync_bytes = sizeof(GridBarrier) + sizeof(int32_t) * size_t(num_sms);
    if (grid_sync.bytes() < sync_bytes) {
      NVFP4MOE_RETURN_IF_ERROR(grow(&grid_sync, sync_bytes, stream, "plan.grid_sync"));
      // The barrier starts at zero once; launches keep it at a multiple of
      // kGridBarrierSpan (GridBarrier).
      NVFP4MOE_CUDA_TRY(cudaMemsetAsync(grid_sync.get(), 0, sync_bytes, stream));
      NVFP4MOE_CUDA_TRY(cudaStreamSynchronize(stream));
    }
    return ok_status();
  }
};

Context::Context() : impl_(std::make_unique<Impl>()) {}
Context::~Context() = default;
int Context::device() const { return impl_->device; }
int Context::num_sms() const { return impl_->num_sms; }

Status Context::create(int device, std::unique_ptr<Context>* out) {
  if (!out) return invalid_argument("Context::create: out is null");
  NVFP4MOE_RETURN_IF_ERROR(check_device_supported(device));
  NVFP4MOE_CUDA_TRY(cudaSetDevice(device));
  std::unique_ptr<Context> c(new Context());
  c->impl_->device = device;
  NVFP4MOE_CUDA_TRY(cudaDeviceGetAttribute(&c->impl_->num_sms, cudaDevAttrMultiProcessorCount, device));
  NVFP4MOE_RETURN_IF_ERROR(c->impl_->grow_plan(1, 1, nullptr));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(kTileQueues * sizeof(TileQueue), &c->impl_->tile_queue));
  NVFP4MOE_CUDA_TRY(cudaMemset(c->impl_->tile_queue.get(), 0, kTileQueues * sizeof(TileQueue)));
  *out = std::move(c);
  return ok_status();
}

Status Context::reserve(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t max_cols) {
  NVFP4MOE_RETURN_IF_ERROR(check_shape_limits(num_tokens, top_k, num_experts));
  Impl& m = *impl_;
  const int64_t pairs = num_tokens * top_k;
  NVFP4MOE_RETURN_IF_ERROR(m.grow_plan(pairs, num_experts, nullptr));
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.x_bf16, sizeof(uint16_t) * pairs * max_cols, nullptr, "x_bf16"));
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.h_bf16, sizeof(uint16_t) * pairs * max_cols, nullptr, "h_bf16"));
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.slot_rows, sizeof(float) * pairs * max_cols, nullptr, "slot_rows"));
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.gu_f32, sizeof(float) * pairs * 2 * max_cols, nullptr, "gu_f32"));
  // Split K runs only while items = jobs * n_tiles < 2 * SMs (choose_k_splits),
  // so splits * rows * n <= 2 * SMs * 256 * 32 + rows * n with rows <= 2 * SMs * 32.
  const int64_t split_rows = std::min<int64_t>(pairs, 2 * int64_t(m.num_sms) * 32);
  const int64_t partial = 2 * int64_t(m.num_sms) * 256 * 32 + split_rows * 2 * max_cols;
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.partial_f32, sizeof(float) * partial, nullptr, "partial_f32"));
  // The streamer's K-split workspace, where a K of up to max_cols would
  // split (the split count only grows with K; row groups never split).
  const int64_t stream_tokens = std::min<int64_t>(num_tokens, kStreamCtaRows);
  const int32_t stream_splits = choose_stream_splits(stream_tokens, max_cols);
  if (stream_splits > 1)
    for (const int set : {Impl::kStreamFirst, Impl::kStreamSecond})
      NVFP4MOE_RETURN_IF_ERROR(m.grow_stream(set, stream_tokens * top_k, max_cols, stream_splits, nullptr));
  return ok_status();
}

Status Context::check_device_status(Stream stream) {
  NVFP4MOE_CUDA_TRY(cudaStreamSynchronize(stream));
  PlanStatus st{};
  NVFP4MOE_CUDA_TRY(cudaMemcpy(&st, impl_->plan().status, sizeof(st), cudaMemcpyDeviceToHost));
  switch (st.code) {
    case kPlanOk: return ok_status();
    case kPlanIdOutOfRange:
      return invalid_argument("ids[", st.token, "][", st.slot, "] = ", st.value, " is out of range [0, ",
                              impl_->status_experts, ")");
    case kPlanDuplicateId:
      return invalid_argument("ids[", st.token, "][", st.slot, "] = ", st.value,
                              " repeats an expert already chosen by this token");
    default: return make_status(StatusCode::kInternal, "plan status word holds unknown code ", st.code);
  }
}

int32_t choose_block_rows(int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  // By the average rows per routed expert: narrow tiles (32 tokens) up to 24,
  // where few experts outgrow one tile and only the narrow tile splits K; the
  // medium tile (64 tokens, the narrow tile's four dequantizing warpgroups) up
  // to 32; wide tiles (128 tokens, two warpgroups of two chunks) above. NOTES:
  // H200 sweeps forcing each tile on the same cases in one call, at stages of
  // two K blocks (bench/results/2026-11-30-h200-6734db3-block-rows-sweep-
  // 4-32.json, ...-6734db3-medium-vs-wide-sweep-24-64.json and
  // ...-6734db3-layer-block-rows-sweep.json). Narrow against medium at 4-24
  // rows: 1.02-1.18x with uniform routing (every case; 1.02-1.12x in the
  // layer), and with Zipf(1.2) 0.72-1.20x (an expert of more than 32 rows
  // takes two narrow tiles; mixtral down at 12-16 rows, 0.72x, then needs a
  // second wave of its 16 N tiles), so the line moved from 8 to 24: MUL_MAT_ID
  // within 0.2% of the best forced tile on the uniform cases (was 5.1%) and
  // 3.0% on the Zipf ones (was 2.4%). At 25-32 medium beats wide by 1.6-5.6%
  // with uniform routing (geomeans) and by 2-12% in the layer, and loses 3-4%
  // with Zipf; from 40 wide wins with Zipf (1.05-1.06x geomean) and ties with
  // uniform routing, and at 64 by 1.1-1.2x.
  constexpr int64_t kNarrowMaxAvgRows = 24, kMediumMaxAvgRows = 32;
  if (const char* env = std::getenv("NVFP4MOE_BLOCK_ROWS")) {  // experiments only
    const int forced = std::atoi(env);
    if (forced == kBlockTNarrow || forced == kBlockTMedium || forced == kBlockTWide || forced == kBlockTBroad)
      return forced;
  }
  const int64_t avg_rows = (num_tokens * top_k + num_experts - 1) / std::max<int64_t>(num_experts, 1);
  if (avg_rows <= kNarrowMaxAvgRows) return kBlockTNarrow;
  return avg_rows <= kMediumMaxAvgRows ? kBlockTMedium : kBlockTWide;
}

PlanOptions choose_plan_options(int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  // Light experts over at least kLightMinExperts experts, up to
  // kLightMaxAvgRows rows per expert on average, from kLightMinPairs routed
  // rows, or from kLightMinPairsManyRows where experts average at least
  // kLightManyAvgRows. Every tile streams and dequantizes its expert's
  // weights over the whole K whatever its rows, so an expert costs its tile
  // count: under a skewed routing, a heavy expert cut into narrow or medium
  // tiles dequantizes its weights several times, and a light one in a wide
  // kernel pays the wide tile's slower K blocks for 32 columns. The regular
  // experts' launch comes first; where a uniform routing leaves it empty
  // (few rows per expert) its CTAs' start-up delays the light launch by a few
  // microseconds, which short calls feel; the light launch, second, is cheap
  // when empty. With few experts, or many rows each, none is light.
  // NOTES: H200 A/B against one tile per launch
  // (bench/results/2026-12-01-h200-ab-e2483ce-light-experts.json):
  // Zipf(1.2) deepseek T = 512 1.10-1.15x, T = 2048 1.06-1.12x, qwen3
  // T = 512 1.05-1.13x, T = 2048 1.01-1.03x; uniform 0.98-1.06x, but the
  // qwen3 layer at T = 512 0.956x and gpt-oss at T = 2048 (256 rows per
  // expert, no light expert) 0.97-0.98x, hence the cap on the average. From
  // 2048 rows (...-ab-3681348-light-experts-2048.json): gpt-oss T = 512
  // (64 rows per expert) Zipf 1.08-1.10x, uniform 0.99-1.00x; qwen3 T = 256
  // (16 rows per expert) uniform 0.94-0.97x for 1.00-1.08x with Zipf, hence
  // the second line at 48 rows.
  constexpr int64_t kLightMinExperts = 32, kLightMaxAvgRows = 128;
  constexpr int64_t kLightMinPairs = 4096, kLightMinPairsManyRows = 2048, kLightManyAvgRows = 48;
  PlanOptions o;
  const int64_t pairs = num_tokens * top_k;
  const bool sized = pairs >= kLightMinPairs || (pairs >= kLightMinPairsManyRows &&
                                                 pairs >= kLightManyAvgRows * num_experts);
  const char* forced = std::getenv("NVFP4MOE_EXPERT_CLASSES");  // experiments and tests: 0 or 1
  const bool light = forced ? forced[0] == '1'
                            : !std::getenv("NVFP4MOE_BLOCK_ROWS") && sized && num_experts >= kLightMinExperts &&
                                  pairs <= kLightMaxAvgRows * num_experts;
  o.light_max_rows = light ? kBlockTNarrow : 0;
  o.block_rows = light ? kBlockTWide : choose_block_rows(num_tokens, top_k, num_experts);
  // Broad experts, where experts average at least kBroadMinAvgRows rows:
  // with uniform routing about half of them then have 129-160 rows (or
  // 257-320, ...), whose 128-row tiles leave a remainder that streams and
  // dequantizes the expert's weights a second time; one 160-row tile
  // dequantizes them once. Which experts are broad is the device's choice,
  // from their rows (takes_broad_tiles, plan.hpp).
  // NOTES: H100, the class against main without it (bench/results/2026-12-07-
  // h100-ab-0937dc6-broad-experts.json): uniform routing at 128 rows per
  // expert, qwen3 T = 2048 gate_up 1.117x, down 1.074x, layer 1.088x;
  // mixtral T = 512 down 1.463x, gate_up 1.213x; gpt-oss T = 1024
  // 1.14-1.18x; T = 8192 deepseek 1.07-1.15x, mixtral down 1.11x, qwen3
  // 1.01-1.02x. Where few experts are broad the third launch costs 2-9 us:
  // qwen3 T = 2048 with Zipf(1.2) 0.971-0.996x, balanced routing (every
  // expert 128 rows, none broad) 0.955-0.993x, T = 1536 down 0.966x. Forced
  // on at 64 rows per expert (deepseek T = 2048, Zipf) 0.95-1.04x, hence
  // the line at 96.
  constexpr int64_t kBroadMinAvgRows = 96;
  const char* forced_broad = std::getenv("NVFP4MOE_BROAD_EXPERTS");  // experiments and tests: 0 or 1
  const bool broad = forced_broad ? forced_broad[0] == '1'
                                  : !std::getenv("NVFP4MOE_BLOCK_ROWS") && pairs >= kBroadMinAvgRows * num_experts;
  o.broad_rows = broad && o.block_rows == kBlockTWide ? kBlockTBroad : 0;
  return o;
}

// The rect schedule is the baseline the compact worklist is measured against
// (a rectangular grid of experts x worst-case tiles, as upstream runs it):
// one grid at the plan's tile, no expert classes, whose launches would each
// be a rectangular grid of their own. The bits are the classes' (no class
// splits K; the classes' tests compare them with one wide launch).
// NOTES: with the broad class rect ran three grids and qwen3 T = 2048
// 18-35% slower than with two; as one grid (H100 A/B, bench/results/
// 2026-12-08-h100-ab-c20c24e-rect-one-grid.json) qwen3 T = 2048 rect ran
// 1.18-1.41x faster and compact did not move (0.99-1.05x); mixtral's down
// at T = 512 rect lost the broad class's one wave (0.73x), as upstream.
PlanOptions choose_plan_options(Schedule schedule, int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  PlanOptions o = choose_plan_options(num_tokens, top_k, num_experts);
  if (schedule == Schedule::kRect) o.light_max_rows = o.broad_rows = 0;
  return o;
}

namespace {

// NVFP4MOE_LAYER_F32_SLOTS=1 (experiments only): the fused layer's down
// writes F32 slot rows with the router weight applied, as before the BF16
// slot rows, for same-binary A/B runs.
bool layer_f32_slots_forced() {
  const char* env = std::getenv("NVFP4MOE_LAYER_F32_SLOTS");
  return env && env[0] == '1';
}

// build_plan, and with next_overlaps the plan kernel lets the next kernel
// (the F32 activations' conversion) be scheduled beside it.
Status launch_plan(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                   const PlanOptions& options, Stream stream, bool next_overlaps) {
  NVFP4MOE_RETURN_IF_ERROR(check_shape_limits(num_tokens, top_k, num_experts));
  NVFP4MOE_RETURN_IF_ERROR(validate_plan_options(options));
  const int32_t block_rows = options.block_rows, light_max_rows = options.light_max_rows;
  const int32_t broad_rows = options.broad_rows;
  if (num_tokens > 0 && ids == nullptr) return invalid_argument("ids is null with num_tokens = ", num_tokens);
  Context::Impl& m = *ctx.impl();
  NVFP4MOE_RETURN_IF_ERROR(m.grow_plan(num_tokens * top_k, num_experts, stream, block_rows));
  m.plan_tokens = num_tokens;
  m.plan_top_k = top_k;
  m.plan_experts = num_experts;
  m.status_experts = num_experts;
  m.plan_block_rows = block_rows;
  m.plan_light_max_rows = light_max_rows;
  m.plan_broad_rows = broad_rows;
  return launch_build_plan(ids, num_tokens, top_k, num_experts, block_rows, light_max_rows, broad_rows, m.plan(),
                           stream, next_overlaps);
}

}  // namespace

Status build_plan(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                  const PlanOptions& options, Stream stream) {
  return launch_plan(ctx, ids, num_tokens, top_k, num_experts, options, stream, false);
}

Status build_plan(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                  int32_t block_rows, Stream stream) {
  PlanOptions options;
  options.block_rows = block_rows;
  return build_plan(ctx, ids, num_tokens, top_k, num_experts, options, stream);
}

Status download_plan(Context& ctx, Stream stream, RoutingPlan* out) {
  if (!out) return invalid_argument("download_plan: out is null");
  NVFP4MOE_RETURN_IF_ERROR(ctx.check_device_status(stream));
  Context::Impl& m = *ctx.impl();
  const DevicePlan d = m.plan();
  const int64_t pairs = m.plan_tokens * m.plan_top_k, E = m.plan_experts;
  RoutingPlan p;
  p.num_tokens = int32_t(m.plan_tokens);
  p.top_k = int32_t(m.plan_top_k);
  p.num_experts = int32_t(E);
  p.block_rows = m.plan_block_rows;
  p.light_max_rows = m.plan_light_max_rows;
  p.broad_rows = m.plan_broad_rows;
  p.counts.resize(E);
  p.offsets.resize(E + 1);
  p.sorted_src.resize(pairs);
  p.inverse.resize(pairs);
  int32_t num_jobs = 0;
  NVFP4MOE_CUDA_TRY(cudaMemcpy(&num_jobs, d.num_jobs, sizeof(int32_t), cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(&p.max_count, d.max_count, sizeof(int32_t), cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(&p.light_jobs_begin, d.light_jobs_begin, sizeof(int32_t), cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(&p.broad_jobs_begin, d.broad_jobs_begin, sizeof(int32_t), cudaMemcpyDeviceToHost));
  p.jobs.resize(num_jobs);
  NVFP4MOE_CUDA_TRY(cudaMemcpy(p.counts.data(), d.counts, sizeof(int32_t) * E, cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(p.offsets.data(), d.offsets, sizeof(int32_t) * (E + 1), cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(p.sorted_src.data(), d.sorted_src, sizeof(int32_t) * pairs, cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(p.inverse.data(), d.inverse, sizeof(int32_t) * pairs, cudaMemcpyDeviceToHost));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(p.jobs.data(), d.jobs, sizeof(ExpertJob) * num_jobs, cudaMemcpyDeviceToHost));
  *out = std::move(p);
  return ok_status();
}

// ---- ops ----------------------------------------------------------------------
namespace {

Status check_weights_arg(const DeviceExpertWeights* w, const char* name) {
  if (!w || !w->packed.get()) return invalid_argument(name, " is null or not uploaded");
  return ok_status();
}

// Converts F32 activations to BF16 in the workspace; BF16 passes through.
// next_overlaps: the kernel that reads them will be launched to overlap the
// conversion, which then lets it be scheduled at once. order: the
// conversion's own launch (launch_f32_to_bf16).
Status activations_bf16(Context::Impl& m, const void* x, DType dtype, int64_t elems, cudaStream_t stream,
                        const uint16_t** out, bool next_overlaps = false,
                        LaunchOrder order = LaunchOrder::kAfterPrevious) {
  if (dtype == DType::kBF16) {
    *out = static_cast<const uint16_t*>(x);
    return ok_status();
  }
  if (dtype != DType::kF32) return invalid_argument("x_dtype = ", int(dtype), " is not F32 or BF16");
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.x_bf16, sizeof(uint16_t) * elems, stream, "x_bf16"));
  NVFP4MOE_RETURN_IF_ERROR(
      launch_f32_to_bf16(static_cast<const float*>(x), m.x_bf16.as<uint16_t>(), elems, stream, next_overlaps, order));
  *out = m.x_bf16.as<uint16_t>();
  return ok_status();
}

// The plan path's first two launches: the routing plan, then the BF16
// activations. F32 ones are converted beside the plan, which reads only the
// ids (both write what no earlier kernel still reads: the plan's own launch
// waits for the previous call's kernels). NOTES: H200 A/B
// (bench/results/2026-12-02-h200-ab-f32-conversion-beside-plan.json): F32
// MUL_MAT_ID 1.027x geomean (up to 1.064x), BF16 x unchanged.
Status plan_and_activations(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k,
                            int64_t num_experts, const PlanOptions& options, const void* x, DType x_dtype,
                            int64_t elems, cudaStream_t stream, const uint16_t** out) {
  const bool converts = x_dtype == DType::kF32;
  NVFP4MOE_RETURN_IF_ERROR(launch_plan(ctx, ids, num_tokens, top_k, num_experts, options, stream, converts));
  return activations_bf16(*ctx.impl(), x, x_dtype, elems, stream, out, false,
                          converts ? LaunchOrder::kOverlapPrevious : LaunchOrder::kAfterPrevious);
}

// The activations of a weight streamer over T tokens of K values (elems in
// all): BF16 rows; one F32 row as it is where the streamer stages it
// (streamer_stages_f32_row, launch.hpp); else F32 rows converted first by a
// kernel that the streamer overlaps: the streamer checks the ids and
// streams its first stages of weights before its producer waits to copy
// x. Sets p->x or p->x_f32, and the streamer's launch order.
Status streamer_activations(Context::Impl& m, const void* x, DType dtype, int64_t num_tokens, int64_t k,
                            int64_t elems, cudaStream_t stream, GemmParams* p, LaunchOrder* order) {
  *order = LaunchOrder::kAfterPrevious;
  if (dtype == DType::kF32 && streamer_stages_f32_row(num_tokens, k)) {
    p->x_f32 = static_cast<const float*>(x);
    return ok_status();
  }
  const bool converts = dtype == DType::kF32;
  NVFP4MOE_RETURN_IF_ERROR(activations_bf16(m, x, dtype, elems, stream, &p->x, converts));
  *order = converts ? LaunchOrder::kOverlapPrevious : LaunchOrder::kAfterPrevious;
  return ok_status();
}

// The weight fields of the params, everything else at its default.
GemmParams weight_params(const DeviceExpertWeights& w) {
  GemmParams p;
  p.w_packed = w.packed.as<uint8_t>();
  p.alpha = w.alpha.as<float>();
  p.alpha_up = w.alpha_up.as<float>();
  p.num_experts = int32_t(w.num_experts);
  p.n = int32_t(w.rows);
  p.k = int32_t(w.cols);
  return p;
}

// Params shared by every GEMM of the current plan; sizes the split-K
// workspace when the shape asks for splits.
Status gemm_params(Context::Impl& m, const DeviceExpertWeights& w, Schedule schedule, int32_t block_t,
                   cudaStream_t stream, GemmParams* out) {
  const DevicePlan d = m.plan();
  GemmParams& p = *out;
  p = weight_params(w);
  p.sorted_src = d.sorted_src;
  p.top_k = int32_t(m.plan_top_k);
  p.jobs = d.jobs;
  p.num_jobs = d.num_jobs;
  p.counts = d.counts;
  p.offsets = d.offsets;
  p.schedule = schedule;
  p.queue = m.tile_queue.as<TileQueue>();
  p.rect_tiles_per_expert = int32_t((m.plan_tokens + block_t - 1) / block_t);
  p.block_rows = m.plan_block_rows;
  p.light_max_rows = m.plan_light_max_rows;
  p.broad_rows = m.plan_broad_rows;
  p.light_jobs_begin = d.light_jobs_begin;
  p.broad_jobs_begin = d.broad_jobs_begin;
  p.sorted_rows = m.plan_tokens * m.plan_top_k;
  // The classes' launches sum each job's K in one piece (their tiles agree
  // bit for bit), so only a plan without classes splits K.
  p.k_splits = m.plan_light_max_rows > 0 || m.plan_broad_rows > 0
                   ? 1
                   : choose_k_splits(m.plan_tokens, m.plan_top_k, w.num_experts, w.rows, w.cols, block_t, m.num_sms);
  if (p.k_splits > 1) {
    NVFP4MOE_RETURN_IF_ERROR(
        m.grow(&m.partial_f32, sizeof(float) * p.k_splits * p.sorted_rows * w.rows, stream, "partial_f32"));
    p.partial = m.partial_f32.as<float>();
  }
  return ok_status();
}

// Params of the weight streamer: no plan, the kernel reads the ids and
// writes the plan's status word. F32 activations are read as they are.
// `set` picks its K-split workspace (Context::Impl::kStreamFirst /
// kStreamSecond).
Status streamer_params(Context::Impl& m, const DeviceExpertWeights& w, const int32_t* ids, int64_t num_tokens,
                       int64_t top_k, int set, cudaStream_t stream, GemmParams* out) {
  GemmParams& p = *out;
  p = weight_params(w);
  p.top_k = int32_t(top_k);
  p.ids = ids;
  p.num_tokens = int32_t(num_tokens);
  p.status = m.plan().status;
  m.status_experts = w.num_experts;
  p.stream_splits = choose_stream_splits(num_tokens, w.cols);
  if (p.stream_splits > 1) {
    NVFP4MOE_RETURN_IF_ERROR(m.grow_stream(set, num_tokens * top_k, w.rows, p.stream_splits, stream));
    p.stream_partial = m.stream_partial[set].as<float>();
    p.stream_counters = m.stream_counters[set].as<uint32_t>();
  }
  return ok_status();
}

// The kernels read x and write y / out in 16-byte vectors (cp.async,
// float4) and the ids and router weights as 4-byte words.
Status check_aligned(const void* ptr, size_t bytes, const char* name) {
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0)
    return invalid_argument(name, " = ", ptr, " is not ", bytes, "-byte aligned (the CUDA backend accesses it in ",
                            bytes, "-byte words)");
  return ok_status();
}

}  // namespace

Status mul_mat_id(Context& ctx, const CudaMulMatIdArgs& a, Stream stream) {
  NVFP4MOE_RETURN_IF_ERROR(check_weights_arg(a.weights, "weights"));
  const DeviceExpertWeights& w = *a.weights;
  if (w.gate_up_interleaved)
    return invalid_argument("weights: an interleaved gate_up tensor is for moe_layer, not mul_mat_id");
  NVFP4MOE_RETURN_IF_ERROR(check_shape_limits(a.num_tokens, a.top_k, w.num_experts));
  if (a.num_tokens == 0) return ok_status();
  if (!a.x) return invalid_argument("x is null");
  if (!a.ids) return invalid_argument("ids is null");
  if (!a.y) return invalid_argument("y is null");
  if (a.y_dtype != DType::kF32 && a.y_dtype != DType::kBF16)
    return invalid_argument("y_dtype = ", int(a.y_dtype), " is not F32 or BF16");
  if (a.schedule != Schedule::kCompact && a.schedule != Schedule::kRect)
    return invalid_argument("schedule = ", int(a.schedule), " is not compact or rect");
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.x, 16, "x"));
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.y, 16, "y"));
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.ids, 4, "ids"));
  Context::Impl& m = *ctx.impl();
  const int64_t x_rows = a.x_per_slot ? a.num_tokens * a.top_k : a.num_tokens;
  if (use_weight_streamer(a.num_tokens, a.top_k, w.num_experts)) {
    // Decode sizes: both schedules are this one kernel (no tiles to schedule).
    GemmParams p;
    LaunchOrder order = LaunchOrder::kAfterPrevious;
    NVFP4MOE_RETURN_IF_ERROR(
        streamer_params(m, w, a.ids, a.num_tokens, a.top_k, Context::Impl::kStreamFirst, stream, &p));
    NVFP4MOE_RETURN_IF_ERROR(
        streamer_activations(m, a.x, a.x_dtype, a.num_tokens, w.cols, x_rows * w.cols, stream, &p, &order));
    p.x_stride = w.cols;
    p.x_map = a.x_per_slot ? RowMap::kPair : RowMap::kToken;
    p.y = a.y;
    p.y_dtype = a.y_dtype;
    p.y_stride = w.rows;
    p.y_map = RowMap::kPair;
    return launch_weight_streamer(p, m.num_sms, stream, order);
  }
  const PlanOptions tiles = choose_plan_options(a.schedule, a.num_tokens, a.top_k, w.num_experts);
  const int32_t block_t = tiles.block_rows;
  const uint16_t* x = nullptr;
  NVFP4MOE_RETURN_IF_ERROR(plan_and_activations(ctx, a.ids, a.num_tokens, a.top_k, w.num_experts, tiles, a.x,
                                                a.x_dtype, x_rows * w.cols, stream, &x));
  GemmParams p;
  NVFP4MOE_RETURN_IF_ERROR(gemm_params(m, w, a.schedule, block_t, stream, &p));
  p.x = x;
  p.x_stride = w.cols;
  p.x_map = a.x_per_slot ? RowMap::kPair : RowMap::kToken;
  p.y = a.y;
  p.y_dtype = a.y_dtype;
  p.y_stride = w.rows;
  p.y_map = RowMap::kPair;
  return launch_grouped_gemm(p, block_t, m.num_sms, stream);
}

Status moe_layer(Context& ctx, const CudaMoeLayerArgs& a, Stream stream) {
  if (!a.layer || !a.layer->gate_up.packed.get() || !a.layer->down.packed.get())
    return invalid_argument("layer is null or not uploaded");
  const DeviceMoeLayer& L = *a.layer;
  NVFP4MOE_RETURN_IF_ERROR(check_shape_limits(a.num_tokens, a.top_k, L.num_experts));
  if (a.num_tokens == 0) return ok_status();
  if (!a.x) return invalid_argument("x is null");
  if (!a.ids) return invalid_argument("ids is null");
  if (!a.out) return invalid_argument("out is null");
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.x, 16, "x"));
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.out, 16, "out"));
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.ids, 4, "ids"));
  NVFP4MOE_RETURN_IF_ERROR(check_aligned(a.route_weights, 4, "route_weights"));
  Context::Impl& m = *ctx.impl();
  const int64_t T = a.num_tokens, k = a.top_k, pairs = T * k, H = L.hidden, F = L.ffn;
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.h_bf16, sizeof(uint16_t) * pairs * F, stream, "h_bf16"));
  NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.slot_rows, sizeof(float) * pairs * H, stream, "slot_rows"));
  // The fused layer's down writes each slot's row alpha * (W h) rounded to
  // BF16, and the combine applies the router weight as it sums: on the plan
  // path stored as BF16, half the bytes of F32 rows both ways (design.md,
  // Numerics; at decode sizes see below). NVFP4MOE_LAYER_F32_SLOTS=1
  // (experiments only) writes F32 rows with the router weight instead.
  const DType slot_dtype = a.unfused || layer_f32_slots_forced() ? DType::kF32 : DType::kBF16;
  // The router weight goes where the rows are weighted: the down's writeback
  // (F32 rows) or the combine (BF16 rows).
  const float* down_route_w = slot_dtype == DType::kF32 ? a.route_weights : nullptr;
  const float* combine_route_w = slot_dtype == DType::kBF16 ? a.route_weights : nullptr;
  if (!a.unfused && use_weight_streamer(T, k, L.num_experts)) {
    // Decode sizes: gate_up + SwiGLU and down to slot rows as two weight
    // streams over the pairs (per-pair rows, no sorted order), then the combine.
    // down overlaps gate_up: its CTAs check the ids and stream their weights
    // into shared memory while gate_up runs, and wait for h only.
    GemmParams gu, down;
    LaunchOrder gu_order = LaunchOrder::kAfterPrevious;
    NVFP4MOE_RETURN_IF_ERROR(streamer_params(m, L.gate_up, a.ids, T, k, Context::Impl::kStreamFirst, stream, &gu));
    NVFP4MOE_RETURN_IF_ERROR(streamer_activations(m, a.x, a.x_dtype, T, H, T * H, stream, &gu, &gu_order));
    gu.x_stride = H;
    gu.x_map = RowMap::kToken;
    gu.y = m.h_bf16.get();
    gu.y_dtype = DType::kBF16;
    gu.y_stride = F;
    gu.y_map = RowMap::kPair;
    gu.epilogue = EpilogueKind::kSwiGLU;
    gu.act = L.act;
    const bool down_overlaps = streamer_overlap_pays(H, F, T, k, L.down.num_experts, m.num_sms);
    gu.next_overlaps = down_overlaps;
    NVFP4MOE_RETURN_IF_ERROR(launch_weight_streamer(gu, m.num_sms, stream, gu_order));
    NVFP4MOE_RETURN_IF_ERROR(streamer_params(m, L.down, a.ids, T, k, Context::Impl::kStreamSecond, stream, &down));
    down.x = m.h_bf16.as<uint16_t>();
    down.x_stride = F;
    down.x_map = RowMap::kPair;
    down.y = m.slot_rows.get();
    // Small BF16 slot rows are stored as F32 holding the same BF16 values
    // (decode_slot_rows_in_f32, launch.hpp): the same bits, a little sooner.
    const bool f32_storage = slot_dtype == DType::kF32 || decode_slot_rows_in_f32(pairs, H);
    down.y_dtype = f32_storage ? DType::kF32 : DType::kBF16;
    down.y_round_to_bf16 = f32_storage && slot_dtype == DType::kBF16;
    down.y_stride = H;
    down.y_map = RowMap::kPair;
    down.route_w = down_route_w;
    down.next_overlaps = true;
    NVFP4MOE_RETURN_IF_ERROR(launch_weight_streamer(
        down, m.num_sms, stream, down_overlaps ? LaunchOrder::kOverlapPrevious : LaunchOrder::kAfterPrevious));
    return launch_combine_slots(m.slot_rows.get(), down.y_dtype, combine_route_w, T, k, H, m.plan().status, a.out,
                                stream, LaunchOrder::kOverlapPrevious);
  }
  const PlanOptions tiles = choose_plan_options(a.schedule, T, k, L.num_experts);
  const int32_t block_t = tiles.block_rows;
  const uint16_t* x = nullptr;
  NVFP4MOE_RETURN_IF_ERROR(
      plan_and_activations(ctx, a.ids, T, k, L.num_experts, tiles, a.x, a.x_dtype, T * H, stream, &x));

  GemmParams gu, down;
  NVFP4MOE_RETURN_IF_ERROR(gemm_params(m, L.gate_up, a.schedule, block_t, stream, &gu));
  NVFP4MOE_RETURN_IF_ERROR(gemm_params(m, L.down, a.schedule, block_t, stream, &down));
  // Both GEMMs split K into one workspace, in stream order; the down's params
  // may have regrown it (a new allocation) after the gate_up's took its address.
  gu.partial = down.partial = m.partial_f32.as<float>();
  gu.x = x;
  gu.x_stride = H;
  gu.x_map = RowMap::kToken;
  down.x = m.h_bf16.as<uint16_t>();
  down.x_stride = F;
  down.y = m.slot_rows.get();
  down.y_dtype = slot_dtype;
  down.y_stride = H;
  down.y_map = RowMap::kPair;

  if (!a.unfused) {
    // gate_up + SwiGLU, intermediate kept in expert-sorted order; down reads it
    // contiguously and folds alpha and the router weight into its writeback.
    gu.y = m.h_bf16.get();
    gu.y_dtype = DType::kBF16;
    gu.y_stride = F;
    gu.y_map = RowMap::kCompact;
    gu.epilogue = EpilogueKind::kSwiGLU;
    gu.act = L.act;
    NVFP4MOE_RETURN_IF_ERROR(launch_grouped_gemm(gu, block_t, m.num_sms, stream));
    down.x_map = RowMap::kCompact;
    down.route_w = down_route_w;
    NVFP4MOE_RETURN_IF_ERROR(launch_grouped_gemm(down, block_t, m.num_sms, stream));
  } else {
    NVFP4MOE_RETURN_IF_ERROR(m.grow(&m.gu_f32, sizeof(float) * pairs * 2 * F, stream, "gu_f32"));
    gu.alpha = gu.alpha_up = nullptr;
    gu.y = m.gu_f32.get();
    gu.y_dtype = DType::kF32;
    gu.y_stride = 2 * F;
    gu.y_map = RowMap::kPair;
    NVFP4MOE_RETURN_IF_ERROR(launch_grouped_gemm(gu, block_t, m.num_sms, stream));
    NVFP4MOE_RETURN_IF_ERROR(launch_scale_pairs(m.gu_f32.as<float>(), a.ids, L.gate_up.alpha.as<float>(),
                                                L.gate_up.alpha_up.as<float>(), nullptr, pairs, 2 * F,
                                                m.plan().status, stream));
    NVFP4MOE_RETURN_IF_ERROR(launch_swiglu_pairs(m.gu_f32.as<float>(), pairs, F, L.act, m.plan().status,
                                                 m.h_bf16.as<uint16_t>(), stream));
    down.alpha = nullptr;
    down.x_map = RowMap::kPair;
    NVFP4MOE_RETURN_IF_ERROR(launch_grouped_gemm(down, block_t, m.num_sms, stream));
    NVFP4MOE_RETURN_IF_ERROR(launch_scale_pairs(m.slot_rows.as<float>(), a.ids, L.down.alpha.as<float>(), nullptr,
                                                a.route_weights, pairs, H, m.plan().status, stream));
  }
  return launch_combine_slots(m.slot_rows.get(), slot_dtype, combine_route_w, T, k, H, m.plan().status, a.out,
                              stream, LaunchOrder::kAfterPrevious);
}

}  // namespace nvfp4moe::cuda
