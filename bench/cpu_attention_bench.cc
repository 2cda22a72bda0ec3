// CPU emulator speed: forward, backward and fwd+bwd GFLOP/s (GUIDE §5 FLOP counts) beside OpenBLAS sgemm,
// all in one run on the same machine. Run: ./build/release/bench/cpu_attention_bench (docs/perf-notes.md).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <vector>

#include "gproj/attention.h"
#include "gproj/synthetic.h"

namespace gproj {
namespace {

// GUIDE §5: forward 4 B H Nq Nk D, halved when causal with Nq = Nk; backward 2.5x forward.
double forward_flops(const AttentionState& s) {
  const double f = 4.0 * s.q.shape[0] * s.q.shape[2] * s.q.shape[1] * s.k.shape[1] * s.q.shape[3];
  return s.causal ? f / 2 : f;
}

AttentionState bench_state(int64_t N, int64_t D, bool causal) {
  SyntheticSpec spec;
  spec.B = 1;
  spec.H = spec.Hkv = 4;
  spec.Nq = spec.Nk = N;
  spec.D = D;
  spec.causal = causal;
  return make_synthetic(spec);
}

void BM_Sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  openblas_set_num_threads(omp_get_max_threads());
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = omp_get_max_threads();
}

enum class Pass { kForward, kBackward, kBoth };

void BM_Attention(benchmark::State& state, Variant variant, Pass pass) {
  const AttentionState s = bench_state(state.range(0), state.range(1), state.range(2) != 0);
  openblas_set_num_threads(1);  // the emulator parallelises over (B, H, blocks) itself
  FlashParams p;
  p.variant = variant;
  p.causal = s.causal;
  p.block_q = p.block_k = 128;
  ForwardResult f = flash_forward_cpu(s.q.view(), s.k.view(), s.v.view(), p);
  for (auto _ : state) {
    if (pass != Pass::kBackward) f = flash_forward_cpu(s.q.view(), s.k.view(), s.v.view(), p);
    if (pass != Pass::kForward) {
      BackwardResult b = flash_backward_cpu(s.q.view(), s.k.view(), s.v.view(), f.o.view(), f.o_fp32.view(),
                                            f.lse.view(), s.dout.view(), p);
      benchmark::DoNotOptimize(b.dq.values.data());
    }
  }
  const double fwd = forward_flops(s);
  const double flops = pass == Pass::kForward ? fwd : pass == Pass::kBackward ? 2.5 * fwd : 3.5 * fwd;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = omp_get_max_threads();
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({4096, 128, 1})->Args({4096, 128, 0})->Args({2048, 64, 1})->ArgNames({"N", "D", "causal"});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}

BENCHMARK(BM_Sgemm)->Arg(2048)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Attention, baseline_fwd, Variant::kBaseline, Pass::kForward)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, baseline_bwd, Variant::kBaseline, Pass::kBackward)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, baseline_fwd_bwd, Variant::kBaseline, Pass::kBoth)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, gproj_fwd_bwd, Variant::kGproj, Pass::kBoth)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Attention, fp32_fwd_bwd, Variant::kFp32, Pass::kBoth)->Apply(shapes);

}  // namespace
}  // namespace gproj

BENCHMARK_MAIN();
