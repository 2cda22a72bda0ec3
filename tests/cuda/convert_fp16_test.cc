// fp16-lowrank's conversion pass (src/cuda/convert_fp16.cuh) against the CPU emulator's per-head scale and FP16
// rounding (cpu::fp16_head_scale, cpu::round_fp16): every scale and every element bit for bit, heads from ~1e-6
// to beyond FP16's largest value, a NaN (ignored by the max, as the CPU's fmax does), Nk not a multiple of the
// transpose's 64 keys nor of kht's 8-key rows (whose padding must be zero). Skipped, with the reason, without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/test_support.h"
#include "cpu/tile_ops.h"
#include "gproj/backend.h"
#include "gproj/cuda/attention_cuda.h"

namespace gproj {
namespace {

std::string gpu_missing() {
  std::string why;
  return device_available(Device::kCuda, &why) ? std::string() : why;
}

// The value of binary16 bits h (decoded by hand, as tests/cpu/tile_ops_test.cc does).
float half_value(uint16_t h) {
  const int e = (h >> 10) & 31, f = h & 1023;
  const double mag = e == 0 ? std::ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : std::ldexp(1024 + f, e - 25);
  return static_cast<float>((h & 0x8000) ? -mag : mag);
}

// A device copy of host bytes, freed at scope exit.
struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t n, const void* src = nullptr) {
    EXPECT_EQ(cudaMalloc(&p, n), cudaSuccess);
    if (src) {
      EXPECT_EQ(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBytes() { cudaFree(p); }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> h(count);
    EXPECT_EQ(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

cuda::DeviceTensor dense(void* data, const Tensor<bf16>& t) {
  cuda::DeviceTensor d;
  d.data = data;
  d.stride[0] = t.shape[1] * t.shape[2] * t.shape[3];
  d.stride[1] = t.shape[2] * t.shape[3];
  d.stride[2] = t.shape[3];
  d.stride[3] = 1;
  return d;
}

// Each head's scale, as the CPU forms it, from the max |x| of head h of t (B, N, heads, D), at slot b heads + h.
std::vector<float> cpu_scales(const Tensor<bf16>& t) {
  const int64_t B = t.shape[0], N = t.shape[1], heads = t.shape[2], D = t.shape[3];
  std::vector<float> s(static_cast<size_t>(B * heads));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      float m = 0.0f;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) m = std::fmax(m, std::fabs(t.at(b, n, h, d).to_float()));
      s[b * heads + h] = cpu::fp16_head_scale(m);
    }
  return s;
}

TEST(ConvertFp16, ScalesAndEveryElementMatchTheCpu) {
  if (const std::string why = gpu_missing(); !why.empty()) GTEST_SKIP() << "CUDA tests need a GPU: " << why;
  const test::Case c{100, 70, 4, 2, 64, false, 64, 64};
  AttentionState s = test::state_for(c, 8);  // B = 2
  // Heads far apart: q's from 1e-6 to 1e3, k's kv head 1 beyond FP16's 65504, v's kv head 0 at 1e-6.
  const float q_mul[4] = {1e-6f, 1e-2f, 1.0f, 1e3f};
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t n = 0; n < c.Nq; ++n)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t d = 0; d < 64; ++d) {
          bf16& x = s.q.at(b, n, h, d);
          x = bf16::from_float(x.to_float() * q_mul[h]);
        }
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t n = 0; n < c.Nk; ++n)
      for (int64_t d = 0; d < 64; ++d) {
        s.k.at(b, n, 1, d) = bf16::from_float(s.k.at(b, n, 1, d).to_float() * 4e4f);
        s.v.at(b, n, 0, d) = bf16::from_float(s.v.at(b, n, 0, d).to_float() * 1e-6f);
      }
  s.q.at(1, 5, 2, 7) = bf16::from_float(NAN);
  cuda::Problem p;
  p.B = 2, p.Nq = c.Nq, p.Nk = c.Nk, p.H = 4, p.Hkv = 2, p.D = 64, p.softmax_scale = 0.125f;
  const size_t count = cuda::fp16_scale_count(p), nq = s.q.values.size(), nk = s.k.values.size();
  const int64_t ld = static_cast<int64_t>(cuda::fp16_kht_ld(p));
  ASSERT_EQ(ld, 72);
  const size_t nkt = static_cast<size_t>(2 * 2 * 64 * ld);
  DeviceBytes q(nq * 2, s.q.values.data()), k(nk * 2, s.k.values.data()), v(nk * 2, s.v.values.data());
  DeviceBytes qh(nq * 2), kht(nkt * 2), vh(nk * 2), scales(count * 4), ws(count * 4);
  const cuda::Status st =
      cuda::convert_fp16_copies(p, dense(q.p, s.q), dense(k.p, s.k), dense(v.p, s.v), qh.p, kht.p, vh.p,
                                static_cast<float*>(scales.p), ws.p, nullptr);
  ASSERT_TRUE(st.ok) << st.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  const std::vector<float> got_s = scales.download<float>(count);
  std::vector<float> want_s = cpu_scales(s.q);
  for (const Tensor<bf16>* t : {&s.k, &s.v}) {
    const std::vector<float> more = cpu_scales(*t);
    want_s.insert(want_s.end(), more.begin(), more.end());
  }
  ASSERT_EQ(want_s.size() + 4, count);  // then v's largest row norm per kv head (FP32 sums: within 1e-6)
  for (size_t i = 0; i < want_s.size(); ++i) EXPECT_EQ(got_s[i], want_s[i]) << "scale " << i;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hk = 0; hk < 2; ++hk) {
      double norm = 0;
      for (int64_t n = 0; n < c.Nk; ++n) {
        double sq = 0;
        for (int64_t d = 0; d < 64; ++d) sq += std::pow(double(s.v.at(b, n, hk, d).to_float()), 2);
        norm = std::max(norm, std::sqrt(sq));
      }
      EXPECT_NEAR(got_s[want_s.size() + b * 2 + hk], norm, 1e-6 * norm) << "v's row norm, head " << b * 2 + hk;
    }

  // Every element: fp16(x s) of its head, in the layouts the header names.
  const std::vector<uint16_t> gq = qh.download<uint16_t>(nq), gk = kht.download<uint16_t>(nkt),
                              gv = vh.download<uint16_t>(nk);
  int64_t wrong = 0, checked = 0;
  auto expect = [&](float x, float scale, uint16_t got) {
    const float want = cpu::round_fp16(x * scale), g = half_value(got);
    ++checked;
    if (std::isnan(want) ? !std::isnan(g) : (!(g == want) || std::signbit(g) != std::signbit(want))) ++wrong;
  };
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t n = 0; n < c.Nq; ++n)
        for (int64_t d = 0; d < 64; ++d)
          expect(s.q.at(b, n, h, d).to_float(), want_s[b * 4 + h], gq[((b * c.Nq + n) * 4 + h) * 64 + d]);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t hk = 0; hk < 2; ++hk)
      for (int64_t n = 0; n < c.Nk; ++n)
        for (int64_t d = 0; d < 64; ++d) {
          expect(s.k.at(b, n, hk, d).to_float(), want_s[8 + b * 2 + hk], gk[((b * 2 + hk) * 64 + d) * ld + n]);
          expect(s.v.at(b, n, hk, d).to_float(), want_s[12 + b * 2 + hk], gv[((b * c.Nk + n) * 2 + hk) * 64 + d]);
        }
  EXPECT_EQ(checked, static_cast<int64_t>(nq + 2 * nk));
  for (int64_t row = 0; row < 2 * 2 * 64; ++row)  // kht's padding keys Nk..ld - 1: zeros
    for (int64_t n = c.Nk; n < ld; ++n) EXPECT_EQ(gk[row * ld + n], 0) << "kht row " << row << ", key " << n;
  EXPECT_EQ(wrong, 0) << "elements whose FP16 copy differs from the CPU's, of " << checked;
}

// The arguments are checked before any device call: this one runs without a GPU too.
TEST(ConvertFp16, BadArgumentsAreNamed) {
  cuda::Problem p;
  p.B = 1, p.Nq = 8, p.Nk = 8, p.H = 2, p.Hkv = 1, p.D = 48, p.softmax_scale = 0.125f;
  cuda::DeviceTensor t;
  t.data = reinterpret_cast<void*>(16);
  t.stride[3] = 1;
  float* f = reinterpret_cast<float*>(16);
  cuda::Status st = cuda::convert_fp16_copies(p, t, t, t, f, f, f, f, f, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("D = 64, 128 or 256, got 48"), std::string::npos) << st.message;
  p.D = 64;
  cuda::DeviceTensor odd = t;
  odd.stride[1] = 100;  // 200-byte rows: not 16-byte aligned
  st = cuda::convert_fp16_copies(p, t, odd, t, f, f, f, f, f, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("k's data or B, N, H strides"), std::string::npos) << st.message;
  st = cuda::convert_fp16_copies(p, t, t, t, f, f, nullptr, f, f, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("qh, kht, vh, scales and workspace are required"), std::string::npos) << st.message;
  p.H = 3, p.Hkv = 2;
  st = cuda::convert_fp16_copies(p, t, t, t, f, f, f, f, f, nullptr);
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("H % Hkv"), std::string::npos) << st.message;
}

}  // namespace
}  // namespace gproj
