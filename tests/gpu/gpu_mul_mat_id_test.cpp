// GPU conformance for MUL_MAT_ID: exact dequantization, ggml's test grid,
// presets, ragged routing, smallest shapes, schedules, determinism, graphs.
#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <utility>

#include "cuda/launch.hpp"
#include "gpu_test_util.hpp"
#include "nvfp4moe/plan.hpp"

namespace nvfp4moe::testing {
namespace {

// fp32 accumulation over K products of BF16 x exact-BF16 values against a
// float64 sum of the same products: relative error per output ~ sqrt(K)*2^-24,
// so NMSE ~ K * 2^-48 (~1e-11 at K = 2048). 1e-8 leaves room for the tensor
// cores' internal order and still fails on any wrong weight or row (one
// wrong element in a 2048-long dot moves NMSE by ~1e-4).
constexpr double kNmseF32Out = 1e-8;
// BF16 output adds a rounding of 2^-9 relative: NMSE ~ 2^-18 / 3 ~ 1.3e-6.
constexpr double kNmseBf16Out = 1e-5;

struct Case {
  int64_t E, N, K, T, k;
  bool per_slot;
  DType x_dtype = DType::kF32;
  DType y_dtype = DType::kF32;
  Schedule schedule = Schedule::kCompact;
  int64_t sample_pairs = -1;  // -1: check every output row
};

struct CaseRun {
  std::vector<float> y;  // F32 (BF16 outputs widened)
  std::vector<int64_t> pairs;
  double nmse;
  std::string wrong;  // describe_wrong_rows, when nmse is above the case's bound
};

class GpuMulMatId : public GpuTest {
 protected:
  // Runs one case on the device, returns the output and NMSE vs float64.
  void light_experts_against_one_wide_launch(const Case& base);
  void broad_experts_against_one_wide_launch(const Case& base);
  // A way to run a case with classes of experts: the environment it sets,
  // what it is (for the failure message), and whether only the compact
  // schedule has it.
  struct ClassVariant {
    const char* what;
    std::vector<std::pair<const char*, const char*>> env;
    bool compact_only = false;
  };
  void variants_against_one_wide_launch(const Case& base, const std::mt19937_64& rng, const std::vector<int32_t>& ids,
                                        const ExpertWeights& w, const cuda::DeviceExpertWeights& dw,
                                        const std::vector<ClassVariant>& variants);
  void run_case(const Case& c, std::mt19937_64& rng, const std::vector<int32_t>& ids, const ExpertWeights& w,
                const cuda::DeviceExpertWeights& dw, CaseRun* out) {
    const int64_t x_rows = c.per_slot ? c.T * c.k : c.T;
    std::vector<float> x = random_normal(rng, size_t(x_rows * c.K), 1.0f);
    std::vector<float> xr = bf16_rounded(x);
    cuda::DeviceBuffer dx;
    if (c.x_dtype == DType::kF32) {
      dx = to_device(x);
    } else {
      dx = to_device(to_bf16(x));
    }
    cuda::DeviceBuffer dids = to_device(ids);
    const size_t ny = size_t(c.T * c.k * c.N);
    cuda::DeviceBuffer dy = poisoned_floats(ny);  // NaN bits also poison BF16 outputs
    cuda::CudaMulMatIdArgs a;
    a.weights = &dw;
    a.x = dx.get();
    a.x_dtype = c.x_dtype;
    a.x_per_slot = c.per_slot;
    a.ids = dids.as<int32_t>();
    a.num_tokens = c.T;
    a.top_k = c.k;
    a.y = dy.get();
    a.y_dtype = c.y_dtype;
    a.schedule = c.schedule;
    ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    ASSERT_OK(ctx->check_device_status(stream));
    if (c.y_dtype == DType::kF32) {
      out->y = to_host<float>(dy, ny);
    } else {
      std::vector<uint16_t> yb = to_host<uint16_t>(dy, ny);
      out->y.resize(ny);
      for (size_t i = 0; i < ny; ++i) out->y[i] = bf16_to_float(yb[i]);
    }
    out->pairs.clear();
    const int64_t pairs = c.T * c.k;
    if (c.sample_pairs < 0 || c.sample_pairs >= pairs) {
      out->pairs.resize(size_t(pairs));
      std::iota(out->pairs.begin(), out->pairs.end(), 0);
    } else {
      std::uniform_int_distribution<int64_t> pick(0, pairs - 1);
      for (int64_t i = 0; i < c.sample_pairs; ++i) out->pairs.push_back(pick(rng));
    }
    // Every output element must have been written (no NaN left from the poison).
    for (size_t i = 0; i < ny; ++i) ASSERT_FALSE(std::isnan(out->y[i])) << "y[" << i << "] was not written";
    const std::vector<double> ref = reference_pairs(w, xr, c.per_slot, ids, c.k, out->pairs);
    out->nmse = nmse_rows(out->y, c.N, out->pairs, ref);
    // BF16 outputs are off by up to 2^-9 of each value, so their per-output
    // tolerance is 10x looser.
    const bool f32_out = c.y_dtype == DType::kF32;
    if (out->nmse > (f32_out ? kNmseF32Out : kNmseBf16Out))
      out->wrong = describe_wrong_rows(out->y, c.N, out->pairs, ref, f32_out ? 1e-3 : 1e-2);
  }

  void capture_and_replay(int64_t T);

  // One case on the same weights, ids and x twice: through the epilogue its
  // shape picks (rows) and through the F32 tile path (f32,
  // NVFP4MOE_F32_EPILOGUE=1); each run draws x from a copy of one generator.
  void run_rows_and_f32_path(const Case& c, uint64_t seed, CaseRun* rows, CaseRun* f32) {
    std::mt19937_64 rng(seed);
    const ExpertWeights w = random_weights(rng, c.E, c.N, c.K);
    cuda::DeviceExpertWeights dw;
    ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
    const std::vector<int32_t> ids = random_ids(rng, c.T, c.k, c.E);
    std::mt19937_64 rng_f32 = rng;
    run_case(c, rng, ids, w, dw, rows);
    const ScopedEnv f32_epilogue("NVFP4MOE_F32_EPILOGUE", "1");
    run_case(c, rng_f32, ids, w, dw, f32);
  }

  // hot_expert >= 0: every token routes a slot to that expert
  // (random_ids_with_hot_expert), which then has T rows.
  void check_case(const Case& c, const char* label, int32_t hot_expert = -1) {
    std::mt19937_64 rng(test_seed());
    ExpertWeights w = random_weights(rng, c.E, c.N, c.K);
    cuda::DeviceExpertWeights dw;
    ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
    const std::vector<int32_t> ids = hot_expert >= 0 ? random_ids_with_hot_expert(rng, c.T, c.k, c.E, hot_expert)
                                                     : random_ids(rng, c.T, c.k, c.E);
    CaseRun r;
    run_case(c, rng, ids, w, dw, &r);
    const double limit = c.y_dtype == DType::kF32 ? kNmseF32Out : kNmseBf16Out;
    EXPECT_LE(r.nmse, limit) << label << " E=" << c.E << " N=" << c.N << " K=" << c.K << " T=" << c.T
                             << " k=" << c.k << " per_slot=" << c.per_slot << "; " << r.wrong;
    std::printf("[ nmse     ] %s E=%lld N=%lld K=%lld T=%lld k=%lld: %.3g\n", label, (long long)c.E,
                (long long)c.N, (long long)c.K, (long long)c.T, (long long)c.k, r.nmse);
  }
};

// The plan path's F32 -> BF16 conversion of x rounds each value as the host
// does (nearest even), in its 8-wide body and in its tail: a length that is
// not a multiple of 8, values at and beside rounding ties, signed zeros,
// subnormals, infinities, the largest floats, NaN.
TEST_F(GpuMulMatId, F32ActivationsRoundLikeTheHost) {
  std::mt19937_64 rng(test_seed());
  std::vector<float> x = random_normal(rng, 8 * 1000 + 5, 3.0f);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF817FFFu,
                               0x00000001u, 0x807FFFFFu, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x7F7F8000u,
                               0xFF7FFFFFu, 0x7FC00000u};
  for (size_t i = 0; i < std::size(specials); ++i) {
    std::memcpy(&x[i * 571 % x.size()], &specials[i], 4);
    std::memcpy(&x[x.size() - 1 - i % 5], &specials[i], 4);  // the tail
  }
  cuda::DeviceBuffer dx = to_device(x), dy;
  ASSERT_OK(cuda::DeviceBuffer::allocate(x.size() * 2, &dy));
  ASSERT_OK(cuda::launch_f32_to_bf16(dx.as<float>(), dy.as<uint16_t>(), int64_t(x.size()), stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> y = to_host<uint16_t>(dy, x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(y[i]))) << "x[" << i << "] is NaN";
    } else {
      ASSERT_EQ(float_to_bf16(x[i]), y[i]) << "x[" << i << "] = " << x[i];
    }
  }
}

// On the plan path F32 x is converted beside the plan kernel (programmatic
// dependent launch): the GEMM after them must find both done. Several calls
// back to back, each on fresh x and ids into its own poisoned y, must equal
// the same calls in plain stream order (NVFP4MOE_SERIAL_LAUNCHES=1) bit for
// bit, directly and inside one graph: a GEMM that ran on the previous call's
// plan or x shows as a call that differs. Narrow (T = 40), wide (T = 300)
// and light-expert (T = 1024, two launches) plans, one row per token and per
// slot; and a plan of 16384 pairs over 128 experts beside a short conversion
// (K = 64), which by their sizes ends first. A mutant without the
// conversion's end wait passed this test on an H200 (perf.md, `53232cf`):
// it does not show that wait to be needed.
TEST_F(GpuMulMatId, F32ConversionBesideThePlanEqualsSerialLaunches) {
  constexpr int kCalls = 6;
  struct Shape {
    int64_t E, k, N, K, T;
  };
  std::mt19937_64 rng(test_seed());
  for (const Shape sh : {Shape{32, 4, 512, 512, 40}, Shape{32, 4, 512, 512, 300}, Shape{32, 4, 512, 512, 1024},
                         Shape{128, 8, 256, 64, 2048}}) {
    const int64_t E = sh.E, k = sh.k, N = sh.N, K = sh.K, T = sh.T;
    const ExpertWeights w = random_weights(rng, E, N, K);
    cuda::DeviceExpertWeights dw;
    ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
    for (const bool per_slot : {false, true}) {
      SCOPED_TRACE("T = " + std::to_string(T) + (per_slot ? ", x per slot" : ", x per token"));
      const int64_t x_rows = per_slot ? T * k : T, ny = T * k * N;
      std::vector<cuda::DeviceBuffer> dx, dids;
      for (int r = 0; r < kCalls; ++r) {
        dx.push_back(to_device(random_normal(rng, size_t(x_rows * K), 1.0f)));
        dids.push_back(to_device(random_ids(rng, T, k, E)));
      }
      const auto enqueue = [&](std::vector<cuda::DeviceBuffer>* ys) {
        for (int r = 0; r < kCalls; ++r) {
          cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx[r], dids[r], T, k, (*ys)[r]);
          a.x_per_slot = per_slot;
          const Status st = cuda::mul_mat_id(*ctx, a, stream);
          if (!st.ok()) return st;
        }
        return ok_status();
      };
      SerialDirectGraphed out;
      run_serial_direct_graphed(*ctx, stream, kCalls, size_t(ny), enqueue, &out);
      if (HasFatalFailure()) return;
      expect_overlap_equals_serial(out, size_t(ny));
    }
  }
}

// Every UE4M3 scale byte (but the NaN 0x7F) meets every E2M1 code; one-hot
// activations make each output exactly one weight, so the kernel's dequant
// must reproduce e2m1 * ue4m3 * alpha bit for bit.
TEST_F(GpuMulMatId, DequantIsExactForEveryCodeAndScale) {
  const int64_t N = 512, K = 64;
  ExpertWeights w;
  w.num_experts = 1;
  w.rows = N;
  w.cols = K;
  w.codes.resize(N * K / 2);
  w.scales.resize(N * K / 16);
  w.alpha = {0.25f};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < K / 16; ++b) {
      const int64_t slot = n * (K / 16) + b;
      w.scales[slot] = uint8_t(slot % 0x7F);  // every valid byte 0x00..0x7E
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t k = b * 16 + i;
        const uint8_t code = uint8_t((i + n) % 16);
        w.codes[(n * K + k) / 2] |= uint8_t(code << (4 * (k % 2)));
      }
    }
  // Scale bytes 0..0x7E each appear with all 16 codes (covered over rows n).
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  std::vector<float> row(K);
  // T = 64: one wgmma call over all K positions; T = 2: the weight streamer,
  // 32 calls of two one-hot rows.
  for (const int64_t T : {int64_t(64), int64_t(2)}) {
    int64_t mismatches = 0;
    for (int64_t base = 0; base < K; base += T) {
      std::vector<float> x(T * K, 0.0f);
      for (int64_t t = 0; t < T; ++t) x[t * K + base + t] = 1.0f;
      std::vector<int32_t> ids(T, 0);
      cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids), dy = poisoned_floats(T * N);
      cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, 1, dy);
      ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
      const std::vector<float> y = to_host<float>(dy, T * N);
      for (int64_t n = 0; n < N; ++n) {
        dequantize_row(w.codes.data() + n * K / 2, w.scales.data() + n * K / 16, K, row.data());
        for (int64_t t = 0; t < T; ++t) {
          const float want = row[base + t] * 0.25f;
          const float got = y[t * N + n];
          if (std::memcmp(&want, &got, 4) != 0 && !(want == 0 && got == 0)) {
            if (++mismatches < 10)
              ADD_FAILURE() << "T=" << T << " w[" << n << "][" << base + t << "]: want " << want << " got " << got;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "T=" << T;
  }
}

// ggml's test-backend-ops grid for MUL_MAT_ID: m = 512, k = 256.
TEST_F(GpuMulMatId, GgmlTestGrid) {
  for (int64_t E : {4, 8})
    for (int64_t k : {1, 2, 4})
      for (bool per_slot : {false, true})
        for (int64_t T : {1, 4, 5, 17, 32, 129}) {
          if (k > E) continue;
          check_case({E, 512, 256, T, k, per_slot}, "ggml-grid");
          if (HasFatalFailure()) return;
        }
}

// Model presets (gate_up and down shapes) at T in {1, 7, 64, 2048}; rows
// sampled. BF16 outputs too from T = 64 (the plan path's BF16 rows
// epilogue, narrow and wide tiles).
TEST_F(GpuMulMatId, Presets) {
  struct Shape { const char* name; int64_t E, k, N, K; bool per_slot; };
  const Shape shapes[] = {
      {"qwen3-30b-a3b.gate_up", 128, 8, 1536, 2048, false},
      {"qwen3-30b-a3b.down", 128, 8, 2048, 768, true},
      {"gpt-oss-20b.gate_up", 32, 4, 5760, 2880, false},
      {"gpt-oss-20b.down", 32, 4, 2880, 2880, true},
  };
  for (const Shape& s : shapes)
    for (int64_t T : {1, 7, 64, 2048}) {
      for (DType yd : {DType::kF32, DType::kBF16}) {
        if (yd == DType::kBF16 && T < 64) continue;
        Case c{s.E, s.N, s.K, T, s.k, s.per_slot, DType::kF32, yd};
        c.sample_pairs = 48;
        check_case(c, s.name);
        if (HasFatalFailure()) return;
      }
    }
}

TEST_F(GpuMulMatId, DtypesAndSmallestShapes) {
  for (DType xd : {DType::kF32, DType::kBF16})
    for (DType yd : {DType::kF32, DType::kBF16}) {
      Case c{3, 64, 64, 9, 2, false, xd, yd};
      check_case(c, "smallest");
      Case c2{5, 192, 128, 40, 3, true, xd, yd};  // N % 128 == 64: a half tile
      check_case(c2, "half-tile");
    }
}

// The wide tile is 256 weight rows, two 64-row chunks per consumer
// warpgroup: N = 64 .. 448 ends it after 1, 2, 3 and 5, 7 of its chunks
// (a warpgroup with one chunk past N, or none), over odd and even K blocks
// and both schedules, to F32 (two epilogue passes) and to BF16 (the BF16
// rows epilogue: one pass, the lanes of chunks past N idle). 100 rows per
// expert select the wide tile.
TEST_F(GpuMulMatId, WideTileEndsInsideN) {
  for (int64_t N : {64, 128, 192, 256, 320, 448})
    for (int64_t K : {128, 192})
      for (Schedule s : {Schedule::kCompact, Schedule::kRect})
        for (DType yd : {DType::kF32, DType::kBF16}) {
          Case c{4, N, K, 200, 2, N % 128 == 64, DType::kF32, yd};
          c.schedule = s;
          check_case(c, "wide-tile-end");
          if (HasFatalFailure()) return;
        }
}

// The wide kernel at either set of wgmma widths (wide_tile_width_96,
// launch.hpp): 32, 64 and 128, or 64, 96 and 128. Experts of 7 to 230 rows
// (k = 1) put tiles at every width of both sets and on each side of every
// edge (32/33, 64/65, 96/97, 128/129); N = 320 ends the last tile inside N.
// Both sets, under both schedules, to F32 and BF16, give the same bits, and
// so does the broad kernel (NVFP4MOE_BLOCK_ROWS=160, experiments), whose
// 160-row tiles at one width split the experts' rows differently (159-161
// on each side of its edge).
TEST_F(GpuMulMatId, WideTileWidthSetsGiveTheSameBits) {
  const std::vector<int64_t> counts = {7, 29, 32, 33, 64, 65, 96, 97, 128, 129, 159, 160, 161, 230};
  std::mt19937_64 rng(test_seed());
  std::vector<int32_t> ids;
  for (size_t e = 0; e < counts.size(); ++e) ids.insert(ids.end(), size_t(counts[e]), int32_t(e));
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t E = int64_t(counts.size()), T = int64_t(ids.size());
  const ExpertWeights w = random_weights(rng, E, 320, 256);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  const uint64_t x_seed = test_seed();  // one draw: test_seed() gives a fresh seed per call
  const std::pair<const char*, const char*> configs[] = {{"128", "0"}, {"128", "1"}, {"160", "0"}};
  for (DType yd : {DType::kF32, DType::kBF16}) {
    std::vector<float> first;
    for (const auto& [block_rows, width96] : configs)
      for (Schedule s : {Schedule::kCompact, Schedule::kRect}) {
        const ScopedEnv tile("NVFP4MOE_BLOCK_ROWS", block_rows);
        const ScopedEnv widths("NVFP4MOE_WIDE_WIDTH_96", width96);
        Case c{E, 320, 256, T, 1, false, DType::kF32, yd};
        c.schedule = s;
        std::mt19937_64 rng_x(x_seed);  // the same x for every run
        CaseRun r;
        run_case(c, rng_x, ids, w, dw, &r);
        if (HasFatalFailure()) return;
        const std::string label = std::string("tile ") + block_rows + ", width 96 " + width96 + ", " +
                                  schedule_name(s) + ", y " +
                                  (yd == DType::kF32 ? "F32" : "BF16");
        EXPECT_LE(r.nmse, yd == DType::kF32 ? kNmseF32Out : kNmseBf16Out) << label << "; " << r.wrong;
        if (first.empty()) first = r.y;
        else EXPECT_EQ(0, std::memcmp(first.data(), r.y.data(), first.size() * 4)) << label << ": other bits";
      }
  }
}

// Every token tile over K ranges of 1, 3, 4 and 5 K blocks: every tile
// holds two K blocks per stage, so an odd range ends with a stage of one.
// Each also with K split 2 and 3 ways (ranges of odd length starting
// inside K; the policy splits only narrow tiles). Tiles and splits are
// forced through the experiments variables. T = 24 (about 6 rows per
// expert) runs every tile's 32-wide wgmma path; T = 200 (about 50) also the
// medium and wide tiles' 64-wide and the wide tile's 128-wide paths.
// N = 320 ends the last wide tile inside N.
TEST_F(GpuMulMatId, EveryTileOverOddAndEvenKBlocks) {
  for (const char* tile : {"32", "64", "128", "160"})
    for (const char* splits : {"1", "2", "3"}) {
      const ScopedEnv forced_tile("NVFP4MOE_BLOCK_ROWS", tile);
      const ScopedEnv forced_splits("NVFP4MOE_K_SPLITS", splits);
      for (int64_t T : {24, 200})
        for (int64_t K : {64, 192, 256, 320}) {
          SCOPED_TRACE(std::string("tile ") + tile + ", K splits " + splits);
          check_case({8, 320, K, T, 2, false}, "tile-k-range");
          if (HasFatalFailure()) return;
        }
    }
}

// The BF16 rows epilogue rounds the same scaled F32 accumulator once, as the
// F32 tile path does (NVFP4MOE_F32_EPILOGUE=1): BF16 outputs equal bit for
// bit, on narrow (T = 16), medium (T = 56) and wide (T = 400) tiles (as
// choose_block_rows picks them), N filling the last wide tile or ending
// inside it.
TEST_F(GpuMulMatId, Bf16RowsEpilogueEqualsTheF32Path) {
  for (const int64_t T : {int64_t(16), int64_t(56), int64_t(400)})
    for (const int64_t N : {int64_t(256), int64_t(320)}) {
      const Case c{4, N, 256, T, 2, false, DType::kF32, DType::kBF16};
      const int32_t tile = T == 16 ? cuda::kBlockTNarrow : T == 56 ? cuda::kBlockTMedium : cuda::kBlockTWide;
      ASSERT_EQ(tile, cuda::choose_block_rows(c.T, c.k, c.E)) << "T=" << T;
      CaseRun rows, f32;
      run_rows_and_f32_path(c, test_seed() + uint64_t(T * N), &rows, &f32);
      if (HasFatalFailure()) return;
      EXPECT_EQ(0, std::memcmp(rows.y.data(), f32.y.data(), rows.y.size() * 4))
          << "T=" << T << " N=" << N << ": the BF16 rows epilogue differs from the F32 path";
    }
}

// The BF16 rows epilogue in a persistent grid (asserted): every CTA runs
// several wide tiles, each reusing the shared tile and row table of the one
// before, with a short K range (2 K blocks) and a long odd one (17 blocks);
// N = 832 ends 64 columns into its last tile. The outputs equal the F32
// path's bit for bit.
TEST_F(GpuMulMatId, Bf16RowsStoredAcrossTilesOfPersistentCtas) {
  const int64_t E = 32, N = 832, T = 8192, k = 4;
  ASSERT_EQ(cuda::kBlockTWide, cuda::choose_block_rows(T, k, E));
  const int64_t items = cuda::compact_items_bound(T * k, E, cuda::kBlockTWide, (N + 255) / 256, 1);
  ASSERT_EQ(ctx->num_sms(), cuda::compact_grid_ctas(items, ctx->num_sms(), cuda::kBlockTWide));
  for (const int64_t K : {int64_t(128), int64_t(1088)}) {
    Case c{E, N, K, T, k, false, DType::kBF16, DType::kBF16};
    c.sample_pairs = 64;
    CaseRun rows, f32;
    run_rows_and_f32_path(c, test_seed() + uint64_t(K), &rows, &f32);
    if (HasFatalFailure()) return;
    EXPECT_LE(rows.nmse, kNmseBf16Out) << "K=" << K << rows.wrong;
    EXPECT_EQ(0, std::memcmp(rows.y.data(), f32.y.data(), rows.y.size() * 4))
        << "K=" << K << ": the BF16 rows stored across tiles differ from the F32 path";
  }
}

// Around the weight streamer (T <= kStreamMaxTokens) and its hand-over to
// the plan path: T = 1..kStreamMaxTokens + 2 with F32 and BF16 x (rows
// staged whole by the consumers up to T = 4, F32 rounded by them at T = 1
// and converted first from T = 2; in the ring from T = 5; E = 16, k = 4
// streams up to T = 12, 3 pairs per expert), the largest k and E the API
// allows, both x layouts and dtypes, and N % 128 == 64.
TEST_F(GpuMulMatId, WeightStreamerShapes) {
  for (int64_t T = 1; T <= cuda::kStreamMaxTokens + 2; ++T)
    for (DType xd : {DType::kF32, DType::kBF16}) {
      check_case({16, 256, 512, T, 4, T % 2 == 0, xd}, "streamer");
      if (HasFatalFailure()) return;
    }
  for (DType xd : {DType::kF32, DType::kBF16})
    for (DType yd : {DType::kF32, DType::kBF16}) {
      check_case({1024, 192, 128, 2, 32, false, xd, yd}, "streamer-E1024-k32");
      check_case({40, 128, 1024, 1, 32, true, xd, yd}, "streamer-per-slot");
      // kStreamMaxPairs: 256 pairs stream, 288 take the plan path.
      ASSERT_TRUE(cuda::use_weight_streamer(16, 16, 128));
      ASSERT_FALSE(cuda::use_weight_streamer(9, 32, 64));
      check_case({128, 128, 256, 16, 16, false, xd, yd}, "streamer-256-pairs");
      check_case({64, 128, 256, 9, 32, true, xd, yd}, "plan-288-pairs");
      if (HasFatalFailure()) return;
    }
}

// Row groups (T = 9-16): an expert of more than 8 rows has a CTA per row
// block for each 8 of its pairs. One expert takes a slot of every token (9,
// 12 or 16 rows: a full group and 1, 4 or 8 more), the others' rows are
// random: qwen3's down shape (two-chunk CTAs, K = 768) with E = 16, k = 2, a
// one-chunk K = 2048 and mixtral's K = 14336 with E = 8, k = 2 (at T = 9 and
// 12, where the policy streams it), and qwen3's whole down at k = 8; one
// row per token and per slot, F32 and BF16 x, every output row checked.
TEST_F(GpuMulMatId, WeightStreamerRowGroups) {
  for (int64_t T : {9, 12, 16})
    for (DType xd : {DType::kF32, DType::kBF16}) {
      ASSERT_TRUE(cuda::use_weight_streamer(T, 2, 16));
      check_case({16, 2048, 768, T, 2, T == 12, xd}, "hot-expert-two-chunks", 3);
      check_case({16, 1536, 2048, T, 2, T == 9, xd}, "hot-expert-one-chunk", 0);
      if (T <= 12) {
        ASSERT_TRUE(cuda::use_weight_streamer(T, 2, 8));
        check_case({8, 256, 14336, T, 2, T == 9, xd}, "hot-expert-long-K", 7);
      }
      check_case({128, 2048, 768, T, 8, true, xd}, "qwen3-down", 5);
      if (HasFatalFailure()) return;
    }
}

// The streamer at T = 5-8 on qwen3's shapes, where the policy runs it:
// five to eight activation rows per slot, two-chunk CTAs at K = 768 (down,
// per-slot rows) and at K = 2048 (gate_up: 384 or more two-chunk CTAs), and
// on a K of 14336 (mixtral's down; eight rows of the whole K, 229 KB, did
// not fit shared memory before the ring carried them), F32 and BF16 x,
// every output row checked.
TEST_F(GpuMulMatId, WeightStreamerEightColumns) {
  ASSERT_TRUE(cuda::use_weight_streamer(8, 8, 128));
  ASSERT_TRUE(cuda::use_weight_streamer(8, 2, 8));
  for (int64_t T : {5, 7, 8})
    for (DType xd : {DType::kF32, DType::kBF16}) {
      check_case({128, 2048, 768, T, 8, true, xd}, "qwen3-down");
      check_case({128, 1536, 2048, T, 8, false, xd}, "qwen3-gate_up");
      check_case({8, 256, 14336, T, 2, T == 7, xd}, "long-K");
      if (HasFatalFailure()) return;
    }
  // Below T = 5 the rows are staged whole where they fit
  // (streamer_staged_rows): at T = 3 on K = 14336 they do not, and the ring
  // carries them; at T = 2 they do.
  ASSERT_EQ(0, cuda::streamer_staged_rows(3, 14336, false));
  ASSERT_EQ(2, cuda::streamer_staged_rows(2, 14336, false));
  for (int64_t T : {2, 3})
    for (DType xd : {DType::kF32, DType::kBF16}) {
      check_case({8, 256, 14336, T, 2, T == 3, xd}, "long-K-small-T");
      if (HasFatalFailure()) return;
    }
}

// One- and two-chunk streamer CTAs (NVFP4MOE_STREAM_CHUNKS), the two forms
// the policy picks between by grid size (weight_streamer_chunks), each within
// the F32 bound on the same inputs and each the same bits when launched
// again. They are not the same bits as each other: one chunk deals a row's K
// blocks to two warps and adds their sums, two chunks sum them in one warp.
// E = 32, N = 2048, K = 1536, k = 8 at T = 2 (256 two-chunk CTAs: the policy's one
// chunk on 132 SMs) and T = 3 (384: two), one row per token and per slot,
// F32 and BF16 x.
TEST_F(GpuMulMatId, WeightStreamerChunkFormsAreRightAndRepeatable) {
  ASSERT_TRUE(cuda::use_weight_streamer(3, 8, 32));
  ASSERT_EQ(1, cuda::weight_streamer_chunks(false, 2048, 1536, 2, 8, 32, 1, 132));
  ASSERT_EQ(2, cuda::weight_streamer_chunks(false, 2048, 1536, 3, 8, 32, 1, 132));
  for (int64_t T : {2, 3})
    for (DType xd : {DType::kF32, DType::kBF16}) {
      const Case c{32, 2048, 1536, T, 8, T == 3, xd};
      std::mt19937_64 rng(test_seed() + uint64_t(T));
      const ExpertWeights w = random_weights(rng, c.E, c.N, c.K);
      cuda::DeviceExpertWeights dw;
      ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
      const std::vector<int32_t> ids = random_ids(rng, c.T, c.k, c.E);
      for (const char* chunks : {"1", "2"}) {
        SCOPED_TRACE(std::string("T = ") + std::to_string(T) + (xd == DType::kF32 ? ", F32 x, " : ", BF16 x, ") +
                     chunks + " chunks");
        const ScopedEnv forced("NVFP4MOE_STREAM_CHUNKS", chunks);
        CaseRun runs[2];
        for (CaseRun& r : runs) {
          std::mt19937_64 rng_x = rng;  // the same x for every run
          run_case(c, rng_x, ids, w, dw, &r);
          if (HasFatalFailure()) return;
        }
        EXPECT_LE(runs[0].nmse, kNmseF32Out) << runs[0].wrong;
        EXPECT_EQ(0, std::memcmp(runs[0].y.data(), runs[1].y.data(), runs[0].y.size() * 4))
            << "a second launch gave other bits";
      }
    }
}

// Four streamer CTAs per SM (at T = 1, where the row is staged whole and
// the grid has more than three per SM) against three
// (NVFP4MOE_STREAM_CTAS_PER_SM=3): the same code under another register
// budget, so the same bits, within the F32 bound. N = 4096, K = 2048, k = 8
// (512 one-chunk CTAs, deepseek's gate_up shape at a shorter K) and, per
// slot, N = 8192, K = 768 (512 two-chunk CTAs), F32 and BF16 x.
TEST_F(GpuMulMatId, WeightStreamerFourCtasPerSmSameBits) {
  struct Shape { int64_t E, N, K, T, k; bool per_slot; };
  for (const Shape& sh : {Shape{8, 4096, 2048, 1, 8, false}, Shape{16, 8192, 768, 1, 8, true}})
    for (DType xd : {DType::kF32, DType::kBF16}) {
      const Case c{sh.E, sh.N, sh.K, sh.T, sh.k, sh.per_slot, xd};
      ASSERT_TRUE(cuda::use_weight_streamer(c.T, c.k, c.E));
      const int32_t chunks = cuda::weight_streamer_chunks(false, c.N, c.K, c.T, c.k, c.E, 1, ctx->num_sms());
      const cuda::StreamerLaunchShape shape = cuda::weight_streamer_launch_shape(
          c.N, c.K, c.T, c.k, chunks, 1, cuda::streamer_staged_rows(c.T, c.K, false), ctx->num_sms());
      ASSERT_EQ(4, shape.ctas_per_sm) << shape.ctas << " CTAs on " << ctx->num_sms() << " SMs";
      std::mt19937_64 rng(test_seed() + uint64_t(c.N + c.T));
      const ExpertWeights w = random_weights(rng, c.E, c.N, c.K);
      cuda::DeviceExpertWeights dw;
      ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
      const std::vector<int32_t> ids = random_ids(rng, c.T, c.k, c.E);
      CaseRun runs[2];
      for (int i = 0; i < 2; ++i) {
        SCOPED_TRACE(std::string("N = ") + std::to_string(c.N) + (xd == DType::kF32 ? ", F32 x, " : ", BF16 x, ") +
                     (i == 0 ? "four" : "three") + " CTAs per SM");
        const ScopedEnv forced("NVFP4MOE_STREAM_CTAS_PER_SM", i == 0 ? nullptr : "3");
        std::mt19937_64 rng_x = rng;  // the same x for both
        run_case(c, rng_x, ids, w, dw, &runs[i]);
        if (HasFatalFailure()) return;
        EXPECT_LE(runs[i].nmse, kNmseF32Out) << runs[i].wrong;
      }
      EXPECT_EQ(0, std::memcmp(runs[0].y.data(), runs[1].y.data(), runs[0].y.size() * 4))
          << "four and three CTAs per SM gave other bits";
    }
}

// The same inputs launched again and again give the same bits: shapes whose
// rings refill slots within a CTA (the streamer at qwen3's down and gate_up
// at T = 8 and its down at T = 16, each slot filled several times per CTA;
// the GEMM at T = 64), F32 and BF16 x, each launch after a poisoning of y.
// A refill that overtakes the consumers' last reads of its slot shows here
// as a launch that differs from the first (8-16 outputs of one warp, at
// random).
TEST_F(GpuMulMatId, RepeatedLaunchesGiveTheSameBits) {
  constexpr int kLaunches = 64;
  struct Shape {
    int64_t N, K, T;
    bool per_slot;
  };
  std::mt19937_64 rng(test_seed());
  const int64_t E = 128, k = 8;
  for (const Shape& sh : {Shape{2048, 768, 8, true}, Shape{1536, 2048, 8, false}, Shape{2048, 768, 16, true},
                          Shape{2048, 768, 64, true}}) {
    const ExpertWeights w = random_weights(rng, E, sh.N, sh.K);
    cuda::DeviceExpertWeights dw;
    ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
    const std::vector<int32_t> ids = random_ids(rng, sh.T, k, E);
    const int64_t x_rows = sh.per_slot ? sh.T * k : sh.T, ny = sh.T * k * sh.N;
    const std::vector<float> x = random_normal(rng, size_t(x_rows * sh.K), 1.0f);
    cuda::DeviceBuffer dx_f32 = to_device(x), dx_bf16 = to_device(to_bf16(x)), dids = to_device(ids);
    cuda::DeviceBuffer dy = poisoned_floats(size_t(ny));
    for (DType xd : {DType::kF32, DType::kBF16}) {
      cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, xd == DType::kF32 ? dx_f32 : dx_bf16, dids, sh.T, k, dy);
      a.x_dtype = xd;
      a.x_per_slot = sh.per_slot;
      std::vector<float> first;
      int differing = 0;
      std::string where;
      for (int r = 0; r < kLaunches; ++r) {
        ASSERT_CUDA(cudaMemsetAsync(dy.get(), 0xFF, size_t(ny) * 4, stream));  // NaN bits
        ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
        ASSERT_CUDA(cudaStreamSynchronize(stream));
        std::vector<float> y = to_host<float>(dy, size_t(ny));
        if (r == 0) {
          for (int64_t i = 0; i < ny; ++i) ASSERT_FALSE(std::isnan(y[i])) << "y[" << i << "] was not written";
          first = std::move(y);
        } else if (std::memcmp(first.data(), y.data(), size_t(ny) * 4) != 0) {
          if (differing++ == 0) {
            std::vector<int64_t> pairs(size_t(sh.T * k));
            std::iota(pairs.begin(), pairs.end(), 0);
            where = "launch " + std::to_string(r) + ": " +
                    describe_wrong_rows(y, sh.N, pairs, std::vector<double>(first.begin(), first.end()), 0.0);
          }
        }
      }
      EXPECT_EQ(0, differing) << "of " << kLaunches - 1 << " launches after the first, N=" << sh.N
                              << " K=" << sh.K << " T=" << sh.T << " x " << (xd == DType::kF32 ? "F32" : "BF16")
                              << "; the first that differs, " << where;
    }
  }
}

// The weight streamer's K split (forced: NVFP4MOE_STREAM_SPLITS, since the
// policy never splits): 2 splits of a mixtral-down-like K (T = 4,
// K = 14336) and of deepseek gate_up's (T = 6, K = 7168), 8 splits over 16
// CTAs (E = 16, k = 4, N = 256, K = 4096 at T = 1) and 3 for T = 3 per-slot
// rows. The last split of each (row block, expert) adds the others' sums:
// outputs match the reference, agree across schedules and runs, and stay
// right when launched again and replayed from a graph with the output
// poisoned before each launch, so every launch's counters start at zero.
TEST_F(GpuMulMatId, WeightStreamerKSplit) {
  {
    const ScopedEnv two("NVFP4MOE_STREAM_SPLITS", "2");
    ASSERT_EQ(2, cuda::choose_stream_splits(4, 14336));
    check_case({8, 256, 14336, 4, 2, true}, "stream-split-2");
    if (HasFatalFailure()) return;
    ASSERT_TRUE(cuda::use_weight_streamer(6, 2, 8));
    check_case({8, 256, 7168, 6, 2, false}, "stream-split-2-T6");
    if (HasFatalFailure()) return;
  }
  {
    const ScopedEnv three("NVFP4MOE_STREAM_SPLITS", "3");
    check_case({16, 256, 1024, 3, 4, true}, "stream-split-3-T3");
  }
  const ScopedEnv eight("NVFP4MOE_STREAM_SPLITS", "8");
  for (DType xd : {DType::kF32, DType::kBF16})
    for (DType yd : {DType::kF32, DType::kBF16}) {
      check_case({16, 256, 4096, 1, 4, false, xd, yd}, "stream-split-8");
      if (HasFatalFailure()) return;
    }

  std::mt19937_64 rng(test_seed());
  const int64_t E = 16, N = 256, K = 4096, T = 1, k = 4;
  const ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  const std::vector<int32_t> ids = random_ids(rng, T, k, E);
  const std::vector<float> x = random_normal(rng, size_t(T * K), 1.0f);
  cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids), dy = poisoned_floats(T * k * N);
  ASSERT_OK(ctx->reserve(T, k, E, std::max(N, K)));
  cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
  std::vector<std::vector<float>> outs;
  const auto poison_and = [&](const std::function<void()>& launch) {
    ASSERT_CUDA(cudaMemsetAsync(dy.get(), 0xFF, size_t(T * k * N) * 4, stream));  // NaN bits
    launch();
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    outs.push_back(to_host<float>(dy, T * k * N));
  };
  for (Schedule s : {Schedule::kCompact, Schedule::kRect, Schedule::kCompact}) {
    a.schedule = s;
    poison_and([&] { ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream)); });
  }
  CapturedGraph graph;
  ASSERT_OK(graph.capture(stream, [&] { return cuda::mul_mat_id(*ctx, a, stream); }));
  for (int i = 0; i < 3; ++i) poison_and([&] { ASSERT_CUDA(graph.launch(stream)); });
  if (HasFatalFailure()) return;
  for (size_t i = 0; i < outs[0].size(); ++i) ASSERT_FALSE(std::isnan(outs[0][i])) << "y[" << i << "] not written";
  for (size_t r = 1; r < outs.size(); ++r)
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[r].data(), outs[0].size() * 4)) << "launch " << r;
}

// Ragged routing: one expert gets every token, one gets exactly one, most
// are empty; T not a multiple of any tile.
TEST_F(GpuMulMatId, RaggedRouting) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 64, N = 256, K = 512, T = 301, k = 2;
  ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  std::vector<int32_t> ids(T * k);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * k] = 7;                          // expert 7 gets all tokens
    ids[t * k + 1] = t == 150 ? 3 : 40 + int32_t(t % 2);  // expert 3: one token; 40, 41: the rest
  }
  for (Schedule s : {Schedule::kCompact, Schedule::kRect}) {
    Case c{E, N, K, T, k, false};
    c.schedule = s;
    CaseRun r;
    run_case(c, rng, ids, w, dw, &r);
    EXPECT_LE(r.nmse, kNmseF32Out) << int(s);
  }
}

// compact and rect cut the same tiles, so every output bit must agree; and
// the same input must give the same bits on every run. As the policy picks
// them (asserted, so a policy change cannot quietly drop a case): T = 33
// runs narrow tiles, 224 medium ones, 400 wide ones in the compact grid of
// one CTA per item, 700 light experts beside wide tiles (two launches),
// 8192 wide tiles in the persistent grid with the tile queue
// (choose_plan_options, compact_grid_ctas, launch.hpp).
TEST_F(GpuMulMatId, SchedulesBitIdenticalAndDeterministic) {
  std::mt19937_64 rng(test_seed());
  for (int64_t T : {1, 33, 224, 400, 700, 8192}) {
    // N = 768: three wide N tiles, so T = 8192's bound (864 items) is past
    // the one-shot grid's five waves of 132 SMs.
    const int64_t E = 32, N = 768, K = 1024, k = 4;
    const PlanOptions tiles = cuda::choose_plan_options(T, k, E);
    if (T == 33) ASSERT_EQ(cuda::kBlockTNarrow, tiles.block_rows);
    if (T == 224) ASSERT_EQ(cuda::kBlockTMedium, tiles.block_rows);
    if (T >= 33) ASSERT_EQ(T == 700 ? cuda::kBlockTNarrow : 0, tiles.light_max_rows) << "T=" << T;
    const int64_t items = cuda::compact_items_bound(T * k, E, cuda::kBlockTWide, 3, 1);
    if (T == 400) ASSERT_EQ(items, cuda::compact_grid_ctas(items, ctx->num_sms(), cuda::kBlockTWide));
    if (T == 8192) ASSERT_EQ(ctx->num_sms(), cuda::compact_grid_ctas(items, ctx->num_sms(), cuda::kBlockTWide));
    ExpertWeights w = random_weights(rng, E, N, K);
    cuda::DeviceExpertWeights dw;
    ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
    std::vector<int32_t> ids = random_ids(rng, T, k, E);
    std::vector<float> x = random_normal(rng, size_t(T * K), 1.0f);
    cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids);
    std::vector<std::vector<float>> outs;
    for (Schedule s : {Schedule::kCompact, Schedule::kRect, Schedule::kCompact}) {
      cuda::DeviceBuffer dy = poisoned_floats(T * k * N);
      cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
      a.schedule = s;
      ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
      outs.push_back(to_host<float>(dy, T * k * N));
    }
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4)) << "compact != rect, T=" << T;
    EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4)) << "run-to-run, T=" << T;
  }
}

// Light experts (choose_plan_options) run in a second launch with narrow
// tiles, which may start beside the first; the class of a job must not
// change its bits. A skewed routing leaves experts of both classes and
// experts on either side of 32 rows: slot 0 is expert 5 (every token), slot
// 1 one of experts 8-15, slot 2 one of 16-31, slot 3 one of the rest. With
// E = 64, T = 1200 the rest are experts 32-63 at ~37 rows (light and
// regular ones), and the light grid is one CTA per item; with E = 128,
// T = 1024 they are 96 light experts at ~11 rows, x 3 N tiles = 288 light
// items, more than two waves of SMs on an H200, so the light grid is
// persistent and takes items from the tile queue (takes_items_from_queue).
// With E = 64, N = 2048 the regular grid is persistent too (808 items,
// more than five waves of 132 SMs), so both classes take from their queues.
// Forced on, the classes equal one wide launch (classes off,
// NVFP4MOE_BLOCK_ROWS=128) bit for bit, under both schedules, with F32 and
// BF16 outputs, and so does the compact light launch capped at 3 CTAs; the
// NMSE bound holds (run_case).
TEST_F(GpuMulMatId, LightExpertsGiveTheBitsOfOneWideLaunch) {
  for (const Case base : {Case{64, 512, 512, 1200, 4, false}, Case{128, 768, 256, 1024, 4, false},
                          Case{64, 2048, 256, 1200, 4, false}}) {
    SCOPED_TRACE(::testing::Message() << "E " << base.E << ", N " << base.N);
    light_experts_against_one_wide_launch(base);
    if (HasFatalFailure()) return;
  }
}

void GpuMulMatId::light_experts_against_one_wide_launch(const Case& base) {
  ASSERT_EQ(cuda::kBlockTNarrow, cuda::choose_plan_options(base.T, base.k, base.E).light_max_rows);
  std::mt19937_64 rng(test_seed());
  const ExpertWeights w = random_weights(rng, base.E, base.N, base.K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  // Slot 0 one heavy expert, slot 1 one of eight, slot 2 one of sixteen,
  // slot 3 one of the rest (the test's comment gives the rows).
  std::vector<int32_t> ids(size_t(base.T * base.k));
  for (int64_t t = 0; t < base.T; ++t) {
    ids[t * 4 + 0] = 5;
    ids[t * 4 + 1] = int32_t(8 + rng() % 8);
    ids[t * 4 + 2] = int32_t(16 + rng() % 16);
    ids[t * 4 + 3] = int32_t(32 + rng() % uint64_t(base.E - 32));
  }
  RoutingPlan plan;
  ASSERT_OK(build_routing_plan(ids.data(), base.T, base.k, base.E, PlanOptions{128, 32}, &plan));
  ASSERT_GT(plan.light_jobs_begin, 0);
  ASSERT_LT(plan.light_jobs_begin, int32_t(plan.jobs.size()));
  // The light launch on 3 CTAs (NVFP4MOE_LIGHT_GRID, an experiments cap):
  // its CTAs take every item from the queue.
  variants_against_one_wide_launch(
      base, rng, ids, w, dw,
      {{"light experts' launch", {{"NVFP4MOE_EXPERT_CLASSES", "1"}}},
       {"the light launch on 3 CTAs", {{"NVFP4MOE_EXPERT_CLASSES", "1"}, {"NVFP4MOE_LIGHT_GRID", "3"}}, true}});
}

// Runs base to F32 and BF16 outputs under both schedules with each variant's
// environment, and with one wide launch (classes off, NVFP4MOE_BLOCK_ROWS=128),
// on the same x, and expects every variant's bits to be the wide launch's;
// the first variant also meets the NMSE bound. The float64 reference on a
// sample of pairs: every output is compared bit for bit with the wide
// launch's and checked for the poison, and the full reference of every run
// made the light-experts test the suite's slowest.
void GpuMulMatId::variants_against_one_wide_launch(const Case& base, const std::mt19937_64& rng,
                                                   const std::vector<int32_t>& ids, const ExpertWeights& w,
                                                   const cuda::DeviceExpertWeights& dw,
                                                   const std::vector<ClassVariant>& variants) {
  for (const DType yd : {DType::kF32, DType::kBF16})
    for (const Schedule s : {Schedule::kCompact, Schedule::kRect}) {
      SCOPED_TRACE(::testing::Message() << "schedule " << int(s) << ", y dtype " << int(yd));
      Case c = base;
      c.y_dtype = yd;
      c.schedule = s;
      c.sample_pairs = 512;
      std::vector<CaseRun> runs(variants.size());
      for (size_t i = 0; i < variants.size(); ++i) {
        if (variants[i].compact_only && s != Schedule::kCompact) continue;
        std::vector<std::unique_ptr<ScopedEnv>> env;
        for (const auto& [name, value] : variants[i].env) env.push_back(std::make_unique<ScopedEnv>(name, value));
        std::mt19937_64 rng_x = rng;  // the same x for every run
        run_case(c, rng_x, ids, w, dw, &runs[i]);
        if (HasFatalFailure()) return;
      }
      CaseRun wide;
      {
        const ScopedEnv off("NVFP4MOE_EXPERT_CLASSES", "0");
        const ScopedEnv tile("NVFP4MOE_BLOCK_ROWS", "128");
        std::mt19937_64 rng_x = rng;
        run_case(c, rng_x, ids, w, dw, &wide);
      }
      if (HasFatalFailure()) return;
      EXPECT_LE(runs[0].nmse, yd == DType::kF32 ? kNmseF32Out : kNmseBf16Out);
      for (size_t i = 0; i < variants.size(); ++i) {
        if (variants[i].compact_only && s != Schedule::kCompact) continue;
        ASSERT_EQ(runs[i].y.size(), wide.y.size()) << variants[i].what;
        EXPECT_EQ(0, std::memcmp(runs[i].y.data(), wide.y.data(), wide.y.size() * 4))
            << variants[i].what << " differs from one wide launch";
      }
    }
}

// Broad experts (choose_plan_options) run in a launch of their own with
// 160-row tiles between the regular and the light experts' launches, each
// scheduled beside the one before; the class of a job must not change its
// bits. k = 1 and experts of fixed sizes (shuffled): light ones of 1-32
// rows, regular ones of 33-128, 161 (two tiles) and broad ones on both
// edges of each broad range (129, 160, 257, 300, 385, 480, 600). With
// N = 8192 both the regular and the broad grids are persistent (45 and 40
// jobs x 32 N tiles, more than five waves of 132 SMs) and take items from
// their queues. Forced on, with and without light experts, the classes equal
// one wide launch (NVFP4MOE_BLOCK_ROWS=128, no classes) bit for bit, under
// both schedules, to F32 and BF16; the NMSE bound holds (run_case).
TEST_F(GpuMulMatId, BroadExpertsGiveTheBitsOfOneWideLaunch) {
  for (const Case base : {Case{20, 512, 256, 3221, 1, false}, Case{20, 8192, 128, 3221, 1, false}}) {
    SCOPED_TRACE(::testing::Message() << "N " << base.N);
    broad_experts_against_one_wide_launch(base);
    if (HasFatalFailure()) return;
  }
}

void GpuMulMatId::broad_experts_against_one_wide_launch(const Case& base) {
  std::mt19937_64 rng(test_seed());
  const ExpertWeights w = random_weights(rng, base.E, base.N, base.K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  const int32_t counts[20] = {150, 100, 300, 20, 140, 129, 161, 40, 480, 10,
                              128, 160, 257, 5,  33,  600, 90,  385, 32, 1};
  std::vector<int32_t> ids;
  for (int32_t e = 0; e < 20; ++e) ids.insert(ids.end(), size_t(counts[e]), e);
  ASSERT_EQ(int64_t(ids.size()), base.T * base.k);
  std::shuffle(ids.begin(), ids.end(), rng);
  RoutingPlan plan;
  ASSERT_OK(build_routing_plan(ids.data(), base.T, base.k, base.E, PlanOptions{128, 32, 160}, &plan));
  ASSERT_EQ(plan.broad_jobs_begin, 7);                        // 100, 161 (2), 40, 128, 33, 90
  ASSERT_EQ(plan.light_jobs_begin - plan.broad_jobs_begin, 18);  // 150, 300 (2), 140, 129, 480 (3), 160, 257 (2),
                                                                 // 600 (4), 385 (3)
  ASSERT_EQ(int32_t(plan.jobs.size()) - plan.light_jobs_begin, 5);
  if (base.N == 8192) {
    const int64_t n_tiles = base.N / 256, pairs = base.T * base.k;
    for (const auto& [tile, c] : {std::pair{cuda::kBlockTWide, cuda::ExpertClass::kRegular},
                                  std::pair{cuda::kBlockTBroad, cuda::ExpertClass::kBroad}}) {
      const int64_t items = cuda::compact_class_jobs_bound(pairs, base.E, tile, c, 32, 128) * n_tiles;
      ASSERT_EQ(ctx->num_sms(), cuda::compact_grid_ctas(items, ctx->num_sms(), tile)) << "tile " << tile;
    }
  }
  variants_against_one_wide_launch(
      base, rng, ids, w, dw,
      {{"regular, broad and light launches", {{"NVFP4MOE_BROAD_EXPERTS", "1"}, {"NVFP4MOE_EXPERT_CLASSES", "1"}}},
       {"regular and broad launches", {{"NVFP4MOE_BROAD_EXPERTS", "1"}, {"NVFP4MOE_EXPERT_CLASSES", "0"}}}});
}

// The op captured in a graph (global capture mode: any host synchronization
// inside would invalidate the capture) replays to the same bits.
TEST_F(GpuMulMatId, GraphCaptureAndReplay) {
  for (const int64_t T : {int64_t(2), int64_t(50)}) {  // weight streamer, then plan + wgmma
    SCOPED_TRACE(T);
    capture_and_replay(T);
    if (HasFatalFailure()) return;
  }
}

void GpuMulMatId::capture_and_replay(int64_t T) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 16, N = 256, K = 512, k = 2;
  ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  std::vector<int32_t> ids = random_ids(rng, T, k, E);
  std::vector<float> x = random_normal(rng, size_t(T * K), 1.0f);
  cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids), dy = poisoned_floats(T * k * N);
  ASSERT_OK(ctx->reserve(T, k, E, std::max(N, K)));
  cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
  ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
  const std::vector<float> direct = to_host<float>(dy, T * k * N);

  cuda::DeviceBuffer dy2 = poisoned_floats(T * k * N);
  a.y = dy2.get();
  CapturedGraph graph;
  ASSERT_OK(graph.capture(stream, [&] { return cuda::mul_mat_id(*ctx, a, stream); }));
  for (int i = 0; i < 3; ++i) ASSERT_CUDA(graph.launch(stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> replayed = to_host<float>(dy2, T * k * N);
  EXPECT_EQ(0, std::memcmp(direct.data(), replayed.data(), direct.size() * 4));
}

// Bad ids live on the device: the plan kernel refuses them, writes nothing,
// and check_device_status names the position.
TEST_F(GpuMulMatId, BadIdsAreReportedAndOutputUntouched) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 8, N = 64, K = 64, k = 2;
  ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  // T = 1: the streamer's CTAs start their copies before the ids are
  // checked, and drain them; T = 2: the streamer; T = 40: the plan kernel.
  for (const int64_t T : {int64_t(1), int64_t(2), int64_t(40)}) {
    std::vector<float> x = random_normal(rng, size_t(T * K), 1.0f);
    for (const DType xd : {DType::kF32, DType::kBF16}) {
      cuda::DeviceBuffer dx = xd == DType::kF32 ? to_device(x) : to_device(to_bf16(x));
      const std::string where = "T=" + std::to_string(T) + " x " + dtype_name(xd);
      for (int variant = 0; variant < 3; ++variant) {
        std::vector<int32_t> ids = random_ids(rng, T, k, E);
        std::string want;
        if (variant == 0) {
          ids[(T - 1) * k + 1] = int32_t(E + 5);
          want = "ids[" + std::to_string(T - 1) + "][1] = 13 is out of range [0, 8)";
        } else if (variant == 1) {  // a repeat in the last token (the second, from T = 2)
          const int64_t t = std::min<int64_t>(1, T - 1);
          ids[t * k + 1] = ids[t * k];
          want = "ids[" + std::to_string(t) + "][1]";
        } else {  // two bad pairs: the first in pair order is named
          ids[(T - 1) * k + 1] = -1;
          ids[0 * k + 1] = ids[0];
          want = "ids[0][1]";
        }
        cuda::DeviceBuffer dids = to_device(ids), dy = poisoned_floats(T * k * N);
        cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
        a.x_dtype = xd;
        ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
        const Status st = ctx->check_device_status(stream);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << where;
        EXPECT_NE(st.message().find(want), std::string::npos) << where << ": " << st.message();
        const std::vector<float> y = to_host<float>(dy, T * k * N);
        for (float v : y) ASSERT_TRUE(std::isnan(v)) << "output written despite bad ids, " << where;
      }
      // A good call afterwards clears the status.
      std::vector<int32_t> ids = random_ids(rng, T, k, E);
      cuda::DeviceBuffer dids = to_device(ids), dy = poisoned_floats(T * k * N);
      cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
      a.x_dtype = xd;
      ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));
      EXPECT_TRUE(ctx->check_device_status(stream).ok()) << where;
    }
  }
}

// The CUDA kernels move x and y in 16-byte vectors: other alignments are refused.
TEST_F(GpuMulMatId, MisalignedPointersAreRefused) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 4, N = 64, K = 64, T = 4, k = 1;
  ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  cuda::DeviceBuffer dx = poisoned_floats(T * K + 4), dids = to_device(random_ids(rng, T, k, E)),
                     dy = poisoned_floats(T * N + 4);
  cuda::CudaMulMatIdArgs a = mul_mat_id_args(dw, dx, dids, T, k, dy);
  a.x = dx.as<float>() + 1;
  Status st = cuda::mul_mat_id(*ctx, a, stream);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x = "), std::string::npos) << st.message();
  a.x = dx.get();
  a.y = dy.as<float>() + 2;
  st = cuda::mul_mat_id(*ctx, a, stream);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("y = "), std::string::npos) << st.message();
  a.y = dy.get();
  a.ids = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(dids.get()) + 2);
  st = cuda::mul_mat_id(*ctx, a, stream);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("ids = "), std::string::npos) << st.message();
  a.ids = dids.as<int32_t>();
  ASSERT_OK(cuda::mul_mat_id(*ctx, a, stream));  // the aligned call still runs
}

// The device plan is the CPU plan, bit for bit.
// With light experts (light > 0) too: their jobs go last, through the
// kernel's ballot and list (one CTA at T = 300, several at T = 2048, 5000);
// and with broad experts (broad > 0), whose jobs go between, through the
// kernel's warp scan and second search: at T = 300 expert 5's ~300 rows,
// at T = 2048 (~128 rows per expert) and 8192 (~512) about half the experts.
TEST_F(GpuMulMatId, DevicePlanEqualsCpuPlan) {
  std::mt19937_64 rng(test_seed());
  struct P { int64_t T, k, E; int32_t block, light, broad; };
  for (const P& p : {P{0, 2, 8, 32, 0, 0}, P{1, 8, 128, 32, 0, 0}, P{37, 1, 4, 16, 0, 0}, P{2048, 8, 128, 128, 0, 0},
                     P{5000, 4, 1024, 128, 0, 0}, P{300, 2, 64, 32, 0, 0}, P{300, 2, 64, 128, 32, 0},
                     P{2048, 8, 128, 128, 32, 0}, P{5000, 4, 1024, 128, 32, 0}, P{1, 8, 128, 128, 32, 0},
                     P{300, 2, 64, 128, 32, 160}, P{2048, 8, 128, 128, 32, 160}, P{8192, 8, 128, 128, 0, 160},
                     P{0, 2, 8, 128, 32, 160}, P{1, 8, 128, 128, 0, 160}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << p.T << " E=" << p.E << " light_max_rows=" << p.light
                                      << " broad_rows=" << p.broad);
    std::vector<int32_t> ids = random_ids(rng, p.T, p.k, p.E);
    if (p.T == 300)  // skewed: everyone picks expert 5 first
      for (int64_t t = 0; t < p.T; ++t)
        if (ids[t * p.k + 1] != 5) ids[t * p.k] = 5;
    cuda::DeviceBuffer dids = to_device(ids.empty() ? std::vector<int32_t>{0} : ids);
    const PlanOptions opt{p.block, p.light, p.broad};
    ASSERT_OK(cuda::build_plan(*ctx, dids.as<int32_t>(), p.T, p.k, p.E, opt, stream));
    RoutingPlan gpu, cpu;
    ASSERT_OK(cuda::download_plan(*ctx, stream, &gpu));
    ASSERT_OK(build_routing_plan(ids.data(), p.T, p.k, p.E, opt, &cpu));
    EXPECT_EQ(gpu.counts, cpu.counts);
    EXPECT_EQ(gpu.offsets, cpu.offsets);
    EXPECT_EQ(gpu.sorted_src, cpu.sorted_src);
    EXPECT_EQ(gpu.inverse, cpu.inverse);
    EXPECT_EQ(gpu.max_count, cpu.max_count);
    EXPECT_EQ(gpu.light_max_rows, cpu.light_max_rows);
    EXPECT_EQ(gpu.light_jobs_begin, cpu.light_jobs_begin);
    EXPECT_EQ(gpu.broad_rows, cpu.broad_rows);
    EXPECT_EQ(gpu.broad_jobs_begin, cpu.broad_jobs_begin);
    if (p.light > 0 && p.T == 300) EXPECT_LT(cpu.light_jobs_begin, int32_t(cpu.jobs.size()));  // both classes exist
    if (p.broad > 0 && p.T >= 2048) {  // regular and broad experts both exist
      EXPECT_GT(cpu.broad_jobs_begin, 0);
      EXPECT_LT(cpu.broad_jobs_begin, cpu.light_jobs_begin);
    }
    ASSERT_EQ(gpu.jobs.size(), cpu.jobs.size());
    for (size_t i = 0; i < gpu.jobs.size(); ++i) {
      EXPECT_EQ(gpu.jobs[i].expert, cpu.jobs[i].expert);
      EXPECT_EQ(gpu.jobs[i].row_begin, cpu.jobs[i].row_begin);
      EXPECT_EQ(gpu.jobs[i].num_rows, cpu.jobs[i].num_rows);
      EXPECT_EQ(gpu.jobs[i].tile_rows, cpu.jobs[i].tile_rows);
    }
  }
}

// Builds the plan of ids on the device and on the CPU and compares every
// array of the two.
void expect_device_plan_equals_cpu(cuda::Context& ctx, cudaStream_t stream, const std::vector<int32_t>& ids,
                                   int64_t T, int64_t k, int64_t E, int32_t block_rows) {
  SCOPED_TRACE(::testing::Message() << "T=" << T << " k=" << k << " E=" << E << " block_rows=" << block_rows);
  cuda::DeviceBuffer dids = to_device(ids.empty() ? std::vector<int32_t>{0} : ids);
  ASSERT_OK(cuda::build_plan(ctx, dids.as<int32_t>(), T, k, E, block_rows, stream));
  RoutingPlan gpu, cpu;
  ASSERT_OK(cuda::download_plan(ctx, stream, &gpu));
  PlanOptions opt;
  opt.block_rows = block_rows;
  ASSERT_OK(build_routing_plan(ids.data(), T, k, E, opt, &cpu));
  EXPECT_EQ(gpu.counts, cpu.counts);
  EXPECT_EQ(gpu.offsets, cpu.offsets);
  EXPECT_EQ(gpu.sorted_src, cpu.sorted_src);
  EXPECT_EQ(gpu.inverse, cpu.inverse);
  EXPECT_EQ(gpu.max_count, cpu.max_count);
  ASSERT_EQ(gpu.jobs.size(), cpu.jobs.size());
  for (size_t i = 0; i < gpu.jobs.size(); ++i) {
    EXPECT_EQ(gpu.jobs[i].expert, cpu.jobs[i].expert) << "job " << i;
    EXPECT_EQ(gpu.jobs[i].row_begin, cpu.jobs[i].row_begin) << "job " << i;
    EXPECT_EQ(gpu.jobs[i].num_rows, cpu.jobs[i].num_rows) << "job " << i;
    EXPECT_EQ(gpu.jobs[i].tile_rows, cpu.jobs[i].tile_rows) << "job " << i;
  }
}

// Shapes around the plan kernel's seams: the single-CTA limit (2048 pairs),
// many CTAs with warps that re-read their ids (more than one 32-pair chunk
// each), tokens that straddle chunks (k = 3, 7), k = 32 (a token is a whole
// chunk), E = 1024 and E not a multiple of 4, block_rows 1 and 100, one
// expert taking nearly every row.
TEST_F(GpuMulMatId, DevicePlanEqualsCpuPlanAtKernelSeams) {
  std::mt19937_64 rng(test_seed());
  struct P { int64_t T, k, E; int32_t block; };
  for (const P& p : {P{2048, 1, 8, 32}, P{2049, 1, 8, 32}, P{1366, 3, 10, 16}, P{3001, 7, 101, 100},
                     P{1000, 32, 1024, 128}, P{20000, 3, 5, 1}, P{int64_t(1) << 17, 8, 128, 128},
                     P{50001, 2, 16, 128}}) {
    std::vector<int32_t> ids = random_ids(rng, p.T, p.k, p.E);
    if (p.T == 50001)  // all but one token pick expert 0 first
      for (int64_t t = 1; t < p.T; ++t)
        if (ids[t * p.k + 1] != 0) ids[t * p.k] = 0;
    expect_device_plan_equals_cpu(*ctx, stream, ids, p.T, p.k, p.E, p.block);
  }
}

// Bad ids in a plan built by many CTAs: the first bad pair in pair order is
// reported, wherever the CTAs' ranges fall. With k = 6 (120000 pairs on the
// 132 CTAs of an H200, 928 pairs each), token 154 (pairs 924..929) straddles
// the first two CTAs' ranges, and token 170 two chunks.
TEST_F(GpuMulMatId, DevicePlanReportsFirstBadPairAcrossCtas) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 128;
  struct Bad {
    int64_t T, k, t, j;
    int64_t repeats_slot;  // -1: out of range instead
    int64_t later_t;       // -1, or a later token spoilt too (which must not be reported)
  };
  for (const Bad& bad : {Bad{20000, 8, 19999, 7, -1, -1}, Bad{20000, 8, 19999, 7, 0, -1},
                         Bad{20000, 8, 10000, 0, -1, 19999}, Bad{20000, 8, 4095, 3, 2, 4096},
                         Bad{20000, 8, 64, 1, 0, 65}, Bad{20000, 6, 170, 5, 0, 171},
                         Bad{20000, 6, 154, 5, 0, 155}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << bad.T << " k=" << bad.k << " bad ids[" << bad.t << "][" << bad.j
                                      << "]");
    std::vector<int32_t> ids = random_ids(rng, bad.T, bad.k, E);
    ids[bad.t * bad.k + bad.j] = bad.repeats_slot < 0 ? int32_t(E + 7) : ids[bad.t * bad.k + bad.repeats_slot];
    if (bad.later_t >= 0) ids[bad.later_t * bad.k] = -1;
    cuda::DeviceBuffer dids = to_device(ids);
    ASSERT_OK(cuda::build_plan(*ctx, dids.as<int32_t>(), bad.T, bad.k, E, 128, stream));
    const Status st = ctx->check_device_status(stream);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    const std::string where = "ids[" + std::to_string(bad.t) + "][" + std::to_string(bad.j) + "]";
    EXPECT_NE(st.message().find(where), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(bad.repeats_slot < 0 ? "out of range" : "repeats"), std::string::npos)
        << st.message();
  }
  // A good plan afterwards: an error leaves nothing behind (status, barrier).
  expect_device_plan_equals_cpu(*ctx, stream, random_ids(rng, 20000, 8, E), 20000, 8, E, 128);
}

// The multi-CTA plan in a graph: replays see the ids of the moment (the
// grid barrier resets itself), and equal the CPU plan each time.
TEST_F(GpuMulMatId, DevicePlanInGraphReplays) {
  std::mt19937_64 rng(test_seed());
  const int64_t T = 2048, k = 8, E = 128;
  const int32_t block = 128;
  ASSERT_OK(ctx->reserve(T, k, E, 64));
  cuda::DeviceBuffer dids = to_device(random_ids(rng, T, k, E));
  CapturedGraph graph;
  ASSERT_OK(graph.capture(stream, [&] { return cuda::build_plan(*ctx, dids.as<int32_t>(), T, k, E, block, stream); }));
  for (int replay = 0; replay < 4; ++replay) {
    const std::vector<int32_t> ids = random_ids(rng, T, k, E);
    ASSERT_CUDA(cudaMemcpy(dids.get(), ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    ASSERT_CUDA(graph.launch(stream));
    RoutingPlan gpu, cpu;
    ASSERT_OK(cuda::download_plan(*ctx, stream, &gpu));
    ASSERT_OK(build_routing_plan(ids.data(), T, k, E, PlanOptions{block}, &cpu));
    EXPECT_EQ(gpu.sorted_src, cpu.sorted_src) << "replay " << replay;
    EXPECT_EQ(gpu.inverse, cpu.inverse) << "replay " << replay;
    EXPECT_EQ(gpu.offsets, cpu.offsets) << "replay " << replay;
    EXPECT_EQ(gpu.jobs.size(), cpu.jobs.size()) << "replay " << replay;
  }
}

}  // namespace
}  // namespace nvfp4moe::testing
