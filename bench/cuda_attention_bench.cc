// CUDA kernel timing with CUDA events: forward and backward TFLOP/s (GUIDE §5 FLOP counts) of each variant on
// random BF16 inputs larger than L2. Run on the GPU machine by scripts/device_check.sh (docs/perf-notes.md).
// Random Gaussian q and k give diffuse softmax rows (at N = 4k no entry reaches thresh-lowrank's 1/16), so
// gproj's per-entry work (the row lists) goes unmeasured; --q-scale 4 sharpens the rows to a few large entries
// each, closer to trained attention.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "gproj/cuda/attention_cuda.h"
#include "gproj/synthetic.h"

namespace {

#define CHECK(x)                                                                        \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                     \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// gproj::gaussian is a function of (seed, index), so the threads' split changes no value. On one thread the four
// inputs of a 4k shape took ~7 s per call, most of an A/B run's device time (session 17).
std::vector<float> random_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> h(n);
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    h[i] = scale * static_cast<float>(gproj::gaussian(seed, static_cast<uint64_t>(i)));
  }
  return h;
}

// --local's queries: q_i = 0.6 (K_a + K_a+1 + K_a+2 + K_i + K_i-1 + K_i-2) of the same batch and head, a = 32
// floor(i / 32) the start of i's segment of 32 tokens (indices clamped to 0 .. i, so causal rows see every key they
// are built from). Each row then lists the keys of its segment's start and its own neighbours: at N = 4096, D = 128
// ~2.5 entries >= 1/16 a row with causal masking (2.0 without), ~7 distinct keys per 8 consecutive rows (64% of the
// entries repeat a key of the warp's other rows); the captured states have 3.3-3.8 entries, 7-8 keys and 69-77%
// (bench/row_entries.py; Gaussian q x 4 rows: 2.7-2.9, 22 and 0%).
std::vector<float> local_queries(const std::vector<float>& k, int64_t B, int64_t N, int64_t H, int64_t D) {
  std::vector<float> q(k.size());
#pragma omp parallel for schedule(static)
  for (int64_t bi = 0; bi < B * N; ++bi) {
    const int64_t b = bi / N, i = bi % N, a = i / 32 * 32;
    const int64_t src[6] = {a, std::min(a + 1, i), std::min(a + 2, i), i, std::max<int64_t>(i - 1, 0),
                            std::max<int64_t>(i - 2, 0)};
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        float x = 0.0f;
        for (int64_t j : src) x += k[static_cast<size_t>(((b * N + j) * H + h) * D + d)];
        q[static_cast<size_t>(((b * N + i) * H + h) * D + d)] = 0.6f * x;
      }
  }
  return q;
}

void* upload(const std::vector<float>& x) {
  const size_t n = x.size();
  std::vector<__nv_bfloat16> h(n);
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) h[i] = __float2bfloat16(x[i]);
  void* d;
  CHECK(cudaMalloc(&d, n * 2));
  CHECK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
  return d;
}

gproj::cuda::DeviceTensor dense(void* p, int64_t N, int64_t H, int64_t D) {
  gproj::cuda::DeviceTensor t;
  t.data = p;
  t.stride[0] = N * H * D;
  t.stride[1] = H * D;
  t.stride[2] = D;
  t.stride[3] = 1;
  return t;
}

// The median over `reps` timings of one call of f, each the mean of `chain` calls back to back between two events
// (chain = 1: one call after the GPU has drained, so the host's time to launch the call's first kernels counts;
// chain > 1: the host queues the next call while the GPU runs this one, as in a training step, and that time
// mostly does not; but a GPU kept busy that long may run slower: session 29 measured D = 128, N = 4k backwards
// 50-100 µs slower a call with --chain 8, and the two timings within ~10 µs elsewhere).
template <class F>
float median_ms(F f, int reps, int chain = 1) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  f();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(a));
    for (int c = 0; c < chain; ++c) f();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / static_cast<float>(chain));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

// Usage: cuda_attention_bench [--only LABEL] [--shape D:N:causal] [--reps R] [--chain C] [--q-scale S]
// [--heads H] [--sink | --local]. The filters
// let a profiler (ncu, scripts/device_profile.sh) look at one configuration; with none every row of the table
// runs (four shapes; --shape may also name any other of the grid, e.g. 64:4096:0). --q-scale multiplies q
// (default 1): larger values sharpen the softmax rows. --sink makes key 0 of every sequence an attention sink (at
// D = 128 its score is ~8.5 above the rest on average, so most rows give it P >= 1/16): every row lists the same
// key, the worst case for thresh-lowrank's scattered dK corrections. --local builds each query from nearby keys
// (local_queries): trained-like rows whose listed keys repeat among neighbouring rows as in the captured states.
// --chain C (default 1) times C calls back to back and reports their mean (median_ms says what that leaves out).
// --heads H (1 to 256) replaces the H = 2048 / D of every shape (B N stays 16k tokens; H kv heads too): a head
// count the grid does not hold, e.g. H = 12, whose B H is not a multiple of 32 (the workspace's regions
// then rely on line_words for their 128-byte alignment, session 37).
int main(int argc, char** argv) {
  using namespace gproj;
  std::string only, shape_filter;
  int reps = 3, chain = 1, heads = 0;  // heads: 0 = 2048 / D, or --heads's value (checked below)
  bool heads_given = false;
  float q_scale = 1.0f;
  bool sink = false, local = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--sink") {
      sink = true;
    } else if (arg == "--local") {
      local = true;
    } else if ((arg == "--only" || arg == "--shape" || arg == "--reps" || arg == "--chain" || arg == "--q-scale" ||
                arg == "--heads") &&
               a + 1 < argc) {
      const std::string val = argv[++a];
      if (arg == "--only") only = val;
      else if (arg == "--shape") shape_filter = val;
      else if (arg == "--reps") reps = std::atoi(val.c_str());
      else if (arg == "--chain") chain = std::atoi(val.c_str());
      else if (arg == "--heads") heads = std::atoi(val.c_str()), heads_given = true;
      else q_scale = std::strtof(val.c_str(), nullptr);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--only LABEL] [--shape D:N:causal] [--reps R] [--chain C] [--q-scale S] "
                   "[--heads H] [--sink | --local]\n",
                   argv[0]);
      return 2;
    }
  }
#if defined(GPROJ_ABLATE) && GPROJ_ABLATE != 0
  std::printf("# ABLATED build (GPROJ_ABLATE=%d): gproj's gradients are wrong; for timing only\n", GPROJ_ABLATE);
  std::fprintf(stderr, "cuda_attention_bench: ABLATED build (GPROJ_ABLATE=%d), timing only\n", GPROJ_ABLATE);
#endif
  if (reps < 1) {
    std::fprintf(stderr, "--reps must be at least 1\n");
    return 2;
  }
  if (chain < 1 || chain > 64) {
    std::fprintf(stderr, "--chain must be 1 to 64\n");
    return 2;
  }
  if (!(q_scale > 0.0f) || !std::isfinite(q_scale) || q_scale > 64.0f) {
    std::fprintf(stderr, "--q-scale must be in (0, 64]\n");
    return 2;
  }
  if (heads_given && (heads < 1 || heads > 256)) {
    std::fprintf(stderr, "--heads must be 1 to 256\n");
    return 2;
  }
  if (local && (sink || q_scale != 1.0f)) {
    std::fprintf(stderr, "--local builds the queries itself: it takes neither --sink nor --q-scale\n");
    return 2;
  }
  if (q_scale != 1.0f) std::printf("# q scaled by %g (sharper softmax rows than the default inputs)\n", q_scale);
  if (sink) std::printf("# key 0 of every sequence is an attention sink\n");
  if (local) std::printf("# queries built from nearby keys (--local: trained-like rows whose keys repeat locally)\n");
  if (chain > 1) std::printf("# each time is the mean of %d calls back to back (--chain)\n", chain);
  if (heads > 0) std::printf("# %d heads in every shape (--heads; B N = 16k tokens)\n", heads);
  std::printf("%-10s %5s %4s %6s %9s %9s %9s %9s\n", "variant", "N", "D", "causal", "fwd ms", "bwd ms", "fwd TF/s",
              "bwd TF/s");
  struct Shape {
    int64_t D, N;
    bool causal;
    std::string tag() const { return std::to_string(D) + ":" + std::to_string(N) + ":" + (causal ? "1" : "0"); }
  };
  // The speed-bar shape both ways, and the training testbed's (D = 64, N = 1k) both ways; --shape may also
  // name another D:N:causal of the grid (D 64 or 128, N dividing 16384, B N = 16k tokens, H D = 2048).
  std::vector<Shape> shapes{{128, 4096, false}, {128, 4096, true}, {64, 1024, false}, {64, 1024, true}};
  if (!shape_filter.empty() &&
      std::none_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s.tag() == shape_filter; })) {
    int d = 0, n = 0, c = -1, used = 0;
    const bool parsed = std::sscanf(shape_filter.c_str(), "%d:%d:%d%n", &d, &n, &c, &used) == 3 &&
                        used == static_cast<int>(shape_filter.size());
    if (!parsed || (d != 64 && d != 128) || n < 64 || n > 16384 || 16384 % n != 0 || (c != 0 && c != 1)) {
      std::string known;
      for (const Shape& s : shapes) known += " " + s.tag();
      std::fprintf(stderr,
                   "--shape %s is not D:N:causal with D 64 or 128, N from 64 to 16384 dividing 16384 and causal 0 "
                   "or 1 (the table's own:%s)\n",
                   shape_filter.c_str(), known.c_str());
      return 2;
    }
    shapes = {{d, n, c == 1}};
    shape_filter = shapes[0].tag();  // (the canonical spelling, which the loop below compares)
  }
  for (const Shape& shape : shapes) {
    const std::string tag = shape.tag();
    if (!shape_filter.empty() && shape_filter != tag) continue;
    {
      {
        const int64_t D = shape.D, N = shape.N;
        const bool causal = shape.causal;
        const int64_t H = heads > 0 ? heads : 2048 / D, B = 16384 / N;  // B N = 16k tokens, H D = 2048 (GUIDE §5)
        const size_t n = static_cast<size_t>(B * N * H * D);
        std::vector<float> hk = random_values(n, 2);
        std::vector<float> hq = local ? local_queries(hk, B, N, H, D) : random_values(n, 1, q_scale);
        if (sink) {  // q_i[0] += 4 and K_0[0] = 24: key 0's score is 96 / sqrt(D) above its plain value
          for (size_t r = 0; r < n / D; ++r) hq[r * D] += 4.0f;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h) hk[static_cast<size_t>((b * N * H + h) * D)] = 24.0f;
        }
        void *q = upload(hq), *k = upload(hk), *v = upload(random_values(n, 3)), *dout = upload(random_values(n, 4));
        void *o, *lse, *ofp, *dq, *dk, *dv;
        CHECK(cudaMalloc(&o, n * 2));
        CHECK(cudaMalloc(&ofp, n * 4));
        CHECK(cudaMalloc(&lse, static_cast<size_t>(B * H * N) * 4));
        CHECK(cudaMalloc(&dq, n * 2));
        CHECK(cudaMalloc(&dk, n * 2));
        CHECK(cudaMalloc(&dv, n * 2));
        struct Config {
          const char* label;
          Variant variant;
          Projection projection;
          int wgmma_forward = -1;   // -1 auto (v2.2 where it applies), 0 v1, 1 v2.1, 2 v2.2 (TMA)
          int wgmma_backward = -1;  // -1 auto (v3.2 at D = 128, v3.1 at D = 64, where they apply), 0 v1, 1 v3.0,
                                    // 2 v3.1, 3 v3.2, 4 v3.3
          int backward_warps = 4;
          bool row_stats = false;   // the audit's r_i, s_i (the main kernel's kStats form): only with --only
          int dk_rank = 0;          // FlashParams::dk_compensation_rank (CUDA: 8, D = 64 only)
          bool fwd_stats = false;   // Problem::forward_stats: thresh-lowrank's statistics from the forward (v2.3,
                                    // v3.9); the forward's time includes the basis and K U tiles
          bool fwd_basis = false;   // Problem::forward_basis: K's basis formed beside the forward kernel; the
                                    // forward's time includes it (docs/gproj-forward-basis.md)
          bool dout_side = false;   // FlashParams::fp16_dout_side (fp16-lowrank with 1 / l on dO's side)
        };
        // baseline and gproj (thresh-lowrank): the defaults (forward v2.2, backward v3.2 / v3.1); -v1: the
        // mma.sync kernels both ways; gproj-pw: the pweighted projection (v1 backward); base-fwd1 / base-fwd21:
        // the v1 / v2.1 forward; base-v31 / gproj-v31: the v3.1 backward; base-v33 / gproj-v33: v3.3 (16-byte dQ
        // atomics, experimental, D = 128); on demand (--only): base-w8-wg, the
        // wide backward with the v2.1 forward; base-wgbwd, v3.0; base-stats, the audit's statistics. gproj-dkc:
        // gproj with the dK compensation (experimental; D = 64 rows only). gproj-fs: gproj with the statistics from
        // the forward (docs/gproj-forward-stats.md). gproj-fb: gproj with K's basis from the forward
        // (docs/gproj-forward-basis.md). gproj-h16: gproj with projection fp16-lowrank
        // (docs/design-fp16-projection.md; D = 64 and 128); its forward's time includes the FP16 conversion pass.
        // gproj-h16d: the same with 1 / l on dO's side (FlashParams::fp16_dout_side).
        constexpr Projection kNone = Projection::kNone, kThresh = Projection::kThreshLowRank;
        for (const Config& cfg : {Config{"baseline", Variant::kBaseline, kNone},
                                  Config{"base-v1", Variant::kBaseline, kNone, 0, 0},
                                  Config{"gproj", Variant::kGproj, kThresh},
                                  Config{"gproj-fs", Variant::kGproj, kThresh, -1, -1, 4, false, 0, true},
                                  Config{"gproj-fb", Variant::kGproj, kThresh, -1, -1, 4, false, 0, false, true},
                                  Config{"gproj-h16", Variant::kGproj, Projection::kFp16LowRank, -1, -1, 4, false, 0,
                                         true},
                                  Config{"gproj-h16d", Variant::kGproj, Projection::kFp16LowRank, -1, -1, 4, false, 0,
                                         true, false, true},
                                  Config{"gproj-v1", Variant::kGproj, kThresh, 0, 0},
                                  Config{"gproj-pw", Variant::kGproj, Projection::kPWeighted},
                                  Config{"base-fwd1", Variant::kBaseline, kNone, 0},
                                  Config{"base-fwd21", Variant::kBaseline, kNone, 1},
                                  Config{"base-v31", Variant::kBaseline, kNone, -1, 2},
                                  Config{"gproj-v31", Variant::kGproj, kThresh, -1, 2},
                                  Config{"base-v33", Variant::kBaseline, kNone, -1, 4},
                                  Config{"gproj-v33", Variant::kGproj, kThresh, -1, 4},
                                  Config{"base-w8-wg", Variant::kBaseline, kNone, 1, -1, 8},
                                  Config{"base-wgbwd", Variant::kBaseline, kNone, -1, 1},
                                  Config{"base-stats", Variant::kBaseline, kNone, -1, -1, 4, true},
                                  Config{"gproj-dkc", Variant::kGproj, kThresh, -1, -1, 4, false, 8}}) {
          // The experimental forms and the audit's statistics run only when named (--only).
          const bool on_demand = cfg.row_stats || cfg.backward_warps == 8 || cfg.wgmma_backward == 1;
          if (only.empty() ? on_demand : only != cfg.label) continue;
          if (cfg.dk_rank != 0 && D != 64) continue;
          if (cfg.wgmma_backward == 4 && D != 128) continue;  // v3.3: D = 128 only
          const Variant var = cfg.variant;
          cuda::Problem p;
          p.B = B;
          p.Nq = p.Nk = N;
          p.H = p.Hkv = H;
          p.D = D;
          p.softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
          p.params.variant = var;
          p.params.projection = cfg.projection;
          p.params.cuda_backward_warps = cfg.backward_warps;
          p.params.cuda_wgmma_forward = cfg.wgmma_forward;
          p.row_stats = cfg.row_stats;
          p.params.cuda_backward_wgmma = cfg.wgmma_backward;
          p.params.dk_compensation_rank = cfg.dk_rank;
          p.params.causal = causal;
          p.params.forward_stats = cfg.fwd_stats;
          p.params.fp16_dout_side = cfg.dout_side;
          void *ws, *stats = nullptr, *fws = nullptr;
          CHECK(cudaMalloc(&ws, cuda::backward_workspace_bytes(p)));
          if (cfg.fwd_stats && !cuda::forward_stats_apply(p)) {
            std::fprintf(stderr, "%s: the forward statistics do not apply to this problem\n", cfg.label);
            std::exit(2);
          }
          if (cfg.fwd_basis) {
            if (!cuda::forward_basis_apply(p)) {
              std::fprintf(stderr, "%s: the forward basis does not apply to this problem\n", cfg.label);
              std::exit(2);
            }
            CHECK(cudaMalloc(&stats, cuda::forward_basis_bytes(p)));
            CHECK(cudaMalloc(&fws, cuda::forward_workspace_bytes(p)));
            p.forward_basis = stats;
            p.forward_workspace = fws;
          }
          if (cfg.fwd_stats) {
            CHECK(cudaMalloc(&stats, cuda::forward_stats_bytes(p)));
            CHECK(cudaMalloc(&fws, cuda::forward_workspace_bytes(p)));
            p.forward_stats = stats;
            p.forward_workspace = fws;
          }
          cuda::DeviceTensor tl, none;
          tl.data = lse;
          none.data = nullptr;
          auto fwd = [&] {
            const cuda::Status s = cuda::forward(p, dense(q, N, H, D), dense(k, N, H, D), dense(v, N, H, D),
                                                 dense(o, N, H, D), tl, none, nullptr);
            if (!s.ok) std::fprintf(stderr, "forward: %s\n", s.message.c_str()), std::exit(2);
          };
          auto bwd = [&] {
            const cuda::Status s = cuda::backward(p, dense(q, N, H, D), dense(k, N, H, D), dense(v, N, H, D),
                                                  dense(o, N, H, D), none, tl, dense(dout, N, H, D),
                                                  dense(dq, N, H, D), dense(dk, N, H, D), dense(dv, N, H, D), ws,
                                                  nullptr);
            if (!s.ok) std::fprintf(stderr, "backward: %s\n", s.message.c_str()), std::exit(2);
          };
          const float f = median_ms(fwd, reps, chain), b = median_ms(bwd, reps, chain);
          const double flops = 4.0 * B * H * N * N * D / (causal ? 2 : 1);
          std::printf("%-10s %5lld %4lld %6s %9.3f %9.3f %9.1f %9.1f\n", cfg.label, static_cast<long long>(N),
                      static_cast<long long>(D), causal ? "yes" : "no", f, b, flops / f / 1e9, 2.5 * flops / b / 1e9);
          CHECK(cudaFree(ws));
          if (stats != nullptr) CHECK(cudaFree(stats));
          if (fws != nullptr) CHECK(cudaFree(fws));
        }
        for (void* ptr : {q, k, v, dout, o, ofp, lse, dq, dk, dv}) CHECK(cudaFree(ptr));
      }
    }
  }
  return 0;
}
