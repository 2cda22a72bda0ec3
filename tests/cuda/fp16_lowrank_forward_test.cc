// fp16-lowrank's CUDA forward (flash_fwd_wg.cuh with kH16, launch.cu's forward(); docs/design-fp16-projection.md,
// build step 3) against the CPU emulator of the same projection: O, the LSE and the rows' records (P (K U) / l and
// s_i, recomputed on the CPU from the GPU's own basis U), on awkward sizes and on heads far apart in scale. The
// refusals run without a GPU too.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu/forward_block.h"
#include "cpu/test_support.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_ops.h"
#include "gproj/backend.h"
#include "gproj/compare.h"
#include "gproj/cuda/attention_cuda.h"
#include "gproj/oracle.h"

namespace gproj {
namespace {

std::string gpu_missing() {
  std::string why;
  return device_available(Device::kCuda, &why) ? std::string() : why;
}

struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t n, const void* src = nullptr) {
    EXPECT_EQ(cudaMalloc(&p, n ? n : 1), cudaSuccess);
    if (src) {
      EXPECT_EQ(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { cudaFree(p); }
};

template <class T>
std::vector<T> download(const void* p, size_t count) {
  std::vector<T> h(count);
  EXPECT_EQ(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

cuda::DeviceTensor dense(void* data, const Extents& s) {
  cuda::DeviceTensor d;
  d.data = data;
  d.stride[0] = s[1] * s[2] * s[3];
  d.stride[1] = s[2] * s[3];
  d.stride[2] = s[3];
  d.stride[3] = 1;
  return d;
}

FlashParams h16_params() {
  FlashParams f;
  f.variant = Variant::kGproj;
  f.projection = Projection::kFp16LowRank;
  f.block_q = f.block_k = 64;  // the kernels' key block (the consistent P's running max is per 64 keys)
  return f;
}

cuda::Problem problem_of(const AttentionState& s, const FlashParams& f) {
  cuda::Problem p;
  p.B = s.q.shape[0], p.Nq = s.q.shape[1], p.H = s.q.shape[2], p.D = s.q.shape[3];
  p.Nk = s.k.shape[1], p.Hkv = s.k.shape[2];
  p.softmax_scale = resolve_scale(f, p.D);
  p.params = f;
  return p;
}

// What the GPU forward returned, on the host.
struct GpuForward {
  std::vector<bf16> o;
  std::vector<float> o_fp32, lse, records, u;
  std::vector<uint16_t> qh, kht, qh_alone, kht_alone;  // the forward's FP16 copies, and convert_fp16_copies' alone
  std::string kernels;
};

GpuForward run_gpu(const AttentionState& s, const FlashParams& f) {
  const cuda::Problem p0 = problem_of(s, f);
  const size_t nq = s.q.values.size(), nk = s.k.values.size(), rows = static_cast<size_t>(p0.B * p0.H * p0.Nq);
  DeviceBytes q(nq * 2, s.q.values.data()), k(nk * 2, s.k.values.data()), v(nk * 2, s.v.values.data());
  DeviceBytes o(nq * 2), of(nq * 4), lse(rows * 4), stats(cuda::forward_stats_bytes(p0)),
      fws(cuda::forward_workspace_bytes(p0));
  cuda::Problem p = p0;
  p.forward_stats = stats.p;
  p.forward_workspace = fws.p;
  cuda::DeviceTensor tl;
  tl.data = lse.p;
  GpuForward g;
  const cuda::Status st = cuda::forward(p, dense(q.p, s.q.shape), dense(k.p, s.k.shape), dense(v.p, s.v.shape),
                                        dense(o.p, s.q.shape), tl, dense(of.p, s.q.shape), nullptr);
  EXPECT_TRUE(st.ok) << st.message;
  if (!st.ok) return g;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  g.kernels = st.kernels;
  g.o = download<bf16>(o.p, nq);
  g.o_fp32 = download<float>(of.p, nq);
  g.lse = download<float>(lse.p, rows);
  const cuda::ForwardStatsParts parts = cuda::forward_stats_parts(p0, stats.p);
  g.records = download<float>(parts.records, rows * 8);
  g.u = download<float>(parts.u, static_cast<size_t>(p0.B * p0.Hkv * p0.D * 8));
  // qh and kht: since session 48 formed beside the forward kernel (a side stream, joined before forward returns);
  // the same bits as the conversion pass run alone on the same inputs.
  const size_t nkt = static_cast<size_t>(p0.B * p0.Hkv * p0.D) * cuda::fp16_kht_ld(p0);
  g.qh = download<uint16_t>(parts.qh, nq);
  g.kht = download<uint16_t>(parts.kht, nkt);
  const size_t count = cuda::fp16_scale_count(p0);
  DeviceBytes qh(nq * 2), kht(nkt * 2), vh(nk * 2), scales(count * 4), ws(count * 4);
  const cuda::Status cs = cuda::convert_fp16_copies(p0, dense(q.p, s.q.shape), dense(k.p, s.k.shape),
                                                    dense(v.p, s.v.shape), qh.p, kht.p, vh.p,
                                                    static_cast<float*>(scales.p), ws.p, nullptr);
  EXPECT_TRUE(cs.ok) << cs.message;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  g.qh_alone = download<uint16_t>(qh.p, nq);
  g.kht_alone = download<uint16_t>(kht.p, nkt);
  return g;
}

// The records of head (b, h) the emulator's forward gives with the GPU's basis: X = [fp16(K bf16(U)) | 1] (the
// kernels' K U tiles, their power of two from K's head scale), P^ X / l per row.
std::vector<float> cpu_records(const AttentionState& s, const FlashParams& f, const std::vector<float>& u, int64_t b,
                               int64_t h) {
  const int64_t Nq = s.q.shape[1], Nk = s.k.shape[1], H = s.q.shape[2], Hkv = s.k.shape[2], D = s.q.shape[3];
  const int64_t hk = h / (H / Hkv);
  constexpr int kRank = 6, kX = kRank + 1;
  std::vector<float> K(static_cast<size_t>(Nk * D)), Q(static_cast<size_t>(Nq * D));
  for (int64_t j = 0; j < Nk; ++j)
    for (int64_t d = 0; d < D; ++d) K[j * D + d] = s.k.at(b, j, hk, d).to_float();
  for (int64_t i = 0; i < Nq; ++i)
    for (int64_t d = 0; d < D; ++d) Q[i * D + d] = s.q.at(b, i, h, d).to_float();
  const float* U = &u[static_cast<size_t>((b * Hkv + hk) * D * 8)];
  std::vector<float> KU(static_cast<size_t>(Nk * kRank));
  for (int64_t j = 0; j < Nk; ++j)
    for (int c = 0; c < kRank; ++c) {
      double acc = 0;
      for (int64_t d = 0; d < D; ++d) acc += double(K[j * D + d]) * round_bf16(U[d * 8 + c]);
      KU[j * kRank + c] = static_cast<float>(acc);
    }
  const float k_scale = cpu::fp16_head_scale(cpu::max_abs(K.data(), K.size()));
  cpu::round_fp16_scaled(KU.data(), KU.size(), cpu::fp16_ku_scale(k_scale, static_cast<int>(D)));
  std::vector<float> X(static_cast<size_t>(Nk * kX), 1.0f);
  for (int64_t j = 0; j < Nk; ++j)
    for (int c = 0; c < kRank; ++c) X[j * kX + c] = KU[j * kRank + c];
  const cpu::TileGemm gemm(f.accumulation);
  const float scale = resolve_scale(f, D);
  std::vector<float> rec(static_cast<size_t>(Nq * 8), 0.0f), acc(static_cast<size_t>(64 * kX)), m(64), l(64), S;
  for (int64_t i0 = 0; i0 < Nq; i0 += 64) {
    const int rows = static_cast<int>(std::min<int64_t>(64, Nq - i0));
    cpu::forward_query_block(gemm, f, scale, &Q[i0 * D], rows, i0, Nq, Nk, static_cast<int>(D), K.data(), X.data(),
                             kX, acc.data(), m.data(), l.data(), S);
    for (int r = 0; r < rows; ++r) {
      if (m[r] == -INFINITY) continue;  // an empty row: a zero record
      for (int c = 0; c < kX; ++c) rec[(i0 + r) * 8 + c] = acc[r * kX + c] / l[r];
    }
  }
  return rec;
}

void expect_forward_matches_emulator(const AttentionState& s, const std::string& what) {
  const FlashParams f = h16_params();
  const GpuForward g = run_gpu(s, f);
  if (g.o.empty()) return;
  EXPECT_NE(g.kernels.find("fp16-lowrank"), std::string::npos) << g.kernels;
  EXPECT_NE(g.kernels.find("FP16 copies of q and k beside it"), std::string::npos) << g.kernels;
  EXPECT_EQ(g.qh, g.qh_alone) << what << ": qh differs from the conversion pass's";
  EXPECT_EQ(g.kht, g.kht_alone) << what << ": kht differs from the conversion pass's";
  const ForwardResult c = attention_forward(Device::kCpu, s.q.view(), s.k.view(), s.v.view(), f);
  const int64_t B = s.q.shape[0], Nq = s.q.shape[1], H = s.q.shape[2];
  // O (BF16 and FP32): the GPU and the emulator differ in FP32 summation order and where ex2.approx flips a P^'s
  // FP16 rounding (one FP16 unit, 2^-10 relative, on a rare entry): at most a third of one BF16 rounding of O.
  const int64_t D = s.q.shape[3];
  Tensor<double> ref({B, Nq, H, D});
  for (size_t x = 0; x < ref.values.size(); ++x) ref.values[x] = c.o_fp32.values[x];
  Tensor<bf16> go({B, Nq, H, D});
  go.values = g.o;
  Tensor<float> gof({B, Nq, H, D});
  gof.values = g.o_fp32;
  const double tol = bf16_rounding_error(ref.view()) / 3 + 1e-7;
  const Tensor<double> cpu_o = to_double(c.o.view());
  const ErrorStats eo = compare(go.view(), cpu_o.view());
  EXPECT_LE(eo.rel_fro, tol) << what << " O vs the emulator's: " << describe(eo);
  const ErrorStats ef = compare(gof.view(), ref.view());
  EXPECT_LE(ef.rel_fro, tol) << what << " O (FP32) vs the emulator's: " << describe(ef);
  // LSE = (m + log2 l) ln 2: l moves by at most 2^-10 relative where entries flip (ln(1 + 2^-10) < 2^-10), plus the
  // FP32 rounding of the LSE itself, plus S's: the GPU and the CPU sum each dot product in FP32 in different orders,
  // each within D 2^-24 sum_d |q_d k_d| <= D 2^-24 |q| |k| of the exact one (times the softmax scale).
  const float scale = resolve_scale(f, D);
  const int64_t Nk = s.k.shape[1], group = H / s.k.shape[2];
  const auto max_norm = [&](const Tensor<bf16>& t, int64_t b, int64_t hh, int64_t n) {
    double m = 0;
    for (int64_t r = 0; r < n; ++r) {
      double x = 0;
      for (int64_t d = 0; d < D; ++d) x += double(t.at(b, r, hh, d).to_float()) * t.at(b, r, hh, d).to_float();
      m = std::max(m, std::sqrt(x));
    }
    return m;
  };
  double worst_lse = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const double s_err = 2 * D * std::ldexp(1.0, -24) * scale * max_norm(s.q, b, h, Nq) * max_norm(s.k, b, h / group, Nk);
      for (int64_t i = 0; i < Nq; ++i) {
        const float want = c.lse.at(b, h, i), got = g.lse[(b * H + h) * Nq + i];
        if (std::isinf(want)) {
          EXPECT_EQ(got, want) << what << " LSE of an empty row " << i;
          continue;
        }
        const double d = std::fabs(double(got) - want);
        worst_lse = std::max(worst_lse, d);
        EXPECT_LE(d, std::ldexp(1.0, -10) + std::ldexp(std::fabs(want), -20) + s_err) << what << " LSE row " << i;
      }
    }
  // The records: P (K U) / l within 2^-9 of the column's largest |K U| (a flipped P^ moves a row's average by at most
  // 2^-10 of it, a flipped FP16 K U entry by 2^-11), s_i = 1 within 2^-10.
  double worst_rec = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<float> want = cpu_records(s, f, g.u, b, h);
      std::vector<double> colmax(8, 0.0);
      for (int64_t i = 0; i < Nq; ++i)
        for (int cc = 0; cc < 8; ++cc) colmax[cc] = std::max(colmax[cc], std::fabs(double(want[i * 8 + cc])));
      for (int64_t i = 0; i < Nq; ++i)
        for (int cc = 0; cc < 8; ++cc) {
          const double got = g.records[((b * H + h) * Nq + i) * 8 + cc], w = want[i * 8 + cc];
          const double bound = cc == 6 ? std::ldexp(1.0, -10) : std::ldexp(colmax[cc], -9) + 1e-30;
          worst_rec = std::max(worst_rec, std::fabs(got - w) / (cc == 6 ? 1.0 : std::max(colmax[cc], 1e-30)));
          EXPECT_LE(std::fabs(got - w), bound) << what << " record of row " << i << " (head " << h << "), column " << cc;
        }
    }
  std::printf("[ evidence ] %s: O vs CPU %.2e, O FP32 vs CPU %.2e (tolerance %.2e), max |dLSE| %.2e, max record diff "
              "%.2e of its column's largest\n",
              what.c_str(), eo.rel_fro, ef.rel_fro, tol, worst_lse, worst_rec);
}

TEST(Fp16LowRankForward, MatchesTheEmulatorOnAwkwardSizes) {
  if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << "CUDA tests need a GPU: " << why;
  const test::Case cases[] = {
      {97, 97, 2, 2, 128, false, 64, 64},   {1025, 97, 2, 1, 128, true, 64, 64}, {64, 200, 4, 2, 128, false, 64, 64},
      {200, 333, 2, 2, 128, true, 64, 64},  {1, 64, 1, 1, 128, false, 64, 64},   {300, 300, 4, 1, 128, true, 64, 64},
      {97, 1025, 2, 2, 128, false, 64, 64},
      // D = 64
      {97, 97, 2, 2, 64, false, 64, 64},    {1025, 97, 2, 1, 64, true, 64, 64},  {200, 333, 2, 2, 64, true, 64, 64},
      {1, 64, 1, 1, 64, false, 64, 64},
  };
  for (const test::Case& c : cases) {
    const AttentionState s = test::state_for(c, 4200 + c.Nq + 7 * c.Nk);
    expect_forward_matches_emulator(s, test::case_name(c));
  }
}

// Heads far apart in scale: the FP16 copies' powers of two (v's kv head 0 at 1e-6, k's kv head 1 at 50x: sharp
// rows) must leave O, the LSE and the records as the emulator's.
TEST(Fp16LowRankForward, HeadsFarApartInScale) {
  if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << "CUDA tests need a GPU: " << why;
  const test::Case c{130, 190, 4, 2, 128, true, 64, 64};
  AttentionState s = test::state_for(c, 77);
  for (int64_t b = 0; b < s.k.shape[0]; ++b)
    for (int64_t n = 0; n < c.Nk; ++n)
      for (int64_t d = 0; d < c.D; ++d) {
        s.k.at(b, n, 1, d) = bf16::from_float(s.k.at(b, n, 1, d).to_float() * 50.0f);
        s.v.at(b, n, 0, d) = bf16::from_float(s.v.at(b, n, 0, d).to_float() * 1e-6f);
      }
  expect_forward_matches_emulator(s, "heads far apart");
}

// What the CUDA path does not take, refused with a status that says so, before any device call (runs without a
// GPU): D = 32, a forward without its statistics buffers, a backward without the forward's, 1 / l on dO's side
// for another projection.
TEST(Fp16LowRankForward, RefusesWhatItDoesNotTake) {
  cuda::Problem p;
  p.B = 1, p.Nq = 64, p.Nk = 64, p.H = 1, p.Hkv = 1, p.D = 128, p.softmax_scale = 0.088f;
  p.params = h16_params();
  cuda::DeviceTensor t, none;
  static char dummy[64] alignas(16);
  t.data = dummy;
  t.stride[0] = t.stride[1] = 128, t.stride[2] = 128, t.stride[3] = 1;
  cuda::DeviceTensor tl;
  tl.data = dummy;
  cuda::Status st = cuda::forward(p, t, t, t, t, tl, none, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("forward_stats"), std::string::npos) << st.message;
  cuda::Problem d32 = p;
  d32.D = 32;
  EXPECT_FALSE(cuda::forward_stats_apply(d32));
  st = cuda::forward(d32, t, t, t, t, tl, none, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kUnsupported);
  EXPECT_NE(st.message.find("D = 32"), std::string::npos) << st.message;  // (CUDA takes D = 64 or 128 at all)
  cuda::Problem d64 = p;
  d64.D = 64;
  EXPECT_TRUE(cuda::forward_stats_apply(d64));
  st = cuda::backward(p, t, t, t, t, none, tl, t, t, t, t, dummy, nullptr);  // without the forward's statistics
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("forward_stats"), std::string::npos) << st.message;
  cuda::Problem dos = p;  // 1 / l on dO's side: a form of fp16-lowrank only
  dos.params.projection = Projection::kThreshLowRank;
  dos.params.fp16_dout_side = true;
  st = cuda::backward(dos, t, t, t, t, none, tl, t, t, t, t, dummy, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.code, ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message.find("is a form of projection fp16-lowrank"), std::string::npos) << st.message;
}

}  // namespace
}  // namespace gproj
