// Seeded synthetic attention states from a counter-based Gaussian generator.
// Exercised by tests/cpu/* (fresh random inputs, the shared-key phenomenon) and `gproj demo`.
#include "gproj/synthetic.h"

#include <cmath>
#include <vector>

#include "gproj/error.h"

namespace gproj {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double uniform01(uint64_t seed, uint64_t index) {
  // 53 random bits in (0, 1): never 0, so log() below is finite.
  return (static_cast<double>(splitmix64(seed * 0x632be59bd9b4e019ULL + index) >> 11) + 0.5) * 0x1.0p-53;
}

std::vector<double> random_direction(uint64_t seed, int64_t D) {
  std::vector<double> u(static_cast<size_t>(D));
  double n2 = 0;
  for (int64_t e = 0; e < D; ++e) n2 += (u[e] = gaussian(seed, static_cast<uint64_t>(e))) * u[e];
  const double s = std::sqrt(static_cast<double>(D) / n2);
  for (double& x : u) x *= s;
  return u;
}

Tensor<bf16> fill(int64_t B, int64_t N, int64_t H, int64_t D, uint64_t seed, float stdev, float shared,
                  float mean) {
  Tensor<bf16> t({B, N, H, D});
  const std::vector<double> u = random_direction(seed ^ 0xabcdefULL, D);
  uint64_t idx = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < D; ++e) {
          const double x = stdev * gaussian(seed, idx++) + shared * u[e] + mean;
          t.at(b, n, h, e) = bf16::from_float(static_cast<float>(x));
        }
  return t;
}

}  // namespace

double gaussian(uint64_t seed, uint64_t index) {
  const double u1 = uniform01(seed, 2 * index), u2 = uniform01(seed, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

SyntheticSpec synthetic_spec(int64_t Nq, int64_t Nk, int64_t H, int64_t Hkv, int64_t D, bool causal, uint64_t seed) {
  SyntheticSpec s;
  s.B = 1;
  s.Nq = Nq;
  s.Nk = Nk;
  s.H = H;
  s.Hkv = Hkv;
  s.D = D;
  s.causal = causal;
  s.seed = seed;
  return s;
}

AttentionState make_synthetic(const SyntheticSpec& s) {
  if (s.B < 1 || s.Nq < 1 || s.Nk < 1 || s.H < 1 || s.Hkv < 1 || s.D < 1 || s.H % s.Hkv != 0) {
    throw Error(ErrorCode::kShape, "synthetic spec: extents must be >= 1 and H % Hkv == 0");
  }
  AttentionState st;
  const uint64_t base = splitmix64(s.seed);
  st.q = fill(s.B, s.Nq, s.H, s.D, base + 1, s.q_std, s.shared_query, 0.0f);
  st.k = fill(s.B, s.Nk, s.Hkv, s.D, base + 2, s.k_std, s.shared_key, 0.0f);
  st.v = fill(s.B, s.Nk, s.Hkv, s.D, base + 3, s.v_std, 0.0f, s.v_mean);
  st.dout = fill(s.B, s.Nq, s.H, s.D, base + 4, s.do_std, 0.0f, 0.0f);
  st.causal = s.causal;
  st.provenance["source"] = "synthetic";
  st.provenance["seed"] = std::to_string(s.seed);
  return st;
}

}  // namespace gproj
