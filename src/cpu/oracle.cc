// float64 reference forward and backward of softmax attention: no rounding anywhere, exact delta.
// Exercised by tests/cpu/oracle_test.cc (finite differences, empty rows, GQA) and as every test's reference.
#include "gproj/oracle.h"

#include <cmath>
#include <limits>

#include "cpu/head_gather.h"
#include "gproj/error.h"

namespace gproj {

namespace {

struct OracleDims {
  int64_t B, Nq, Nk, H, Hkv, D;
};

OracleDims check_oracle(const TensorView<const double>& q, const TensorView<const double>& k,
                        const TensorView<const double>& v, double scale) {
  if (q.rank != 4 || k.rank != 4 || v.rank != 4) throw Error(ErrorCode::kShape, "oracle: q, k, v must have rank 4");
  if (k.shape != v.shape) throw Error(ErrorCode::kShape, "oracle: k and v shapes differ");
  if (k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] || q.shape[2] % k.shape[2] != 0) {
    throw Error(ErrorCode::kShape, "oracle: q " + format_extents(4, q.shape) + " and k " + format_extents(4, k.shape) +
                                       " do not form an attention problem");
  }
  if (!(scale > 0) || !std::isfinite(scale)) throw Error(ErrorCode::kInvalidArgument, "oracle: scale must be > 0");
  return {q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]};
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

auto identity = [](double x) { return x; };

}  // namespace

Tensor<double> to_double(const TensorView<const bf16>& t) {
  Tensor<double> out;
  out.rank = t.rank;
  out.shape = t.shape;
  out.values.resize(static_cast<size_t>(t.numel()));
  auto ov = out.view();
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d) ov.at(a, b, c, d) = t.at(a, b, c, d).to_float();
  return out;
}

OracleForward oracle_forward(const TensorView<const double>& q, const TensorView<const double>& k,
                             const TensorView<const double>& v, bool causal, double scale) {
  const OracleDims d = check_oracle(q, k, v, scale);
  OracleForward r{Tensor<double>({d.B, d.Nq, d.H, d.D}), Tensor<double>({d.B, d.H, d.Nq})};
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / (d.H / d.Hkv);
      std::vector<double> Q, K, V, s(static_cast<size_t>(d.Nk));
      cpu::gather_head(Q, q, b, h, identity);
      cpu::gather_head(K, k, b, hk, identity);
      cpu::gather_head(V, v, b, hk, identity);
      for (int64_t i = 0; i < d.Nq; ++i) {
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < d.Nk; ++j) {
          s[j] = key_visible(causal, i, j, d.Nq, d.Nk) ? scale * dot(&Q[i * d.D], &K[j * d.D], d.D)
                                                       : -std::numeric_limits<double>::infinity();
          m = std::max(m, s[j]);
        }
        double* o = &r.o.at(b, i, h, 0);
        if (m == -std::numeric_limits<double>::infinity()) {
          r.lse.at(b, h, i) = m;  // no visible key: O = 0
          continue;
        }
        double l = 0;
        for (int64_t j = 0; j < d.Nk; ++j) {
          if (s[j] == -std::numeric_limits<double>::infinity()) continue;
          const double p = std::exp(s[j] - m);
          l += p;
          for (int64_t e = 0; e < d.D; ++e) o[e] += p * V[j * d.D + e];
        }
        for (int64_t e = 0; e < d.D; ++e) o[e] /= l;
        r.lse.at(b, h, i) = m + std::log(l);
      }
    }
  return r;
}

OracleBackward oracle_backward(const TensorView<const double>& q, const TensorView<const double>& k,
                               const TensorView<const double>& v, const TensorView<const double>& dout, bool causal,
                               double scale) {
  const OracleDims d = check_oracle(q, k, v, scale);
  if (dout.shape != q.shape) throw Error(ErrorCode::kShape, "oracle: do must have the shape of q");
  const OracleForward fwd = oracle_forward(q, k, v, causal, scale);
  OracleBackward r{Tensor<double>({d.B, d.Nq, d.H, d.D}), Tensor<double>({d.B, d.Nk, d.Hkv, d.D}),
                   Tensor<double>({d.B, d.Nk, d.Hkv, d.D}), Tensor<double>({d.B, d.H, d.Nq})};
  // Per-(b, h) partial dK/dV, reduced over the heads of a GQA group afterwards in a fixed order.
  std::vector<std::vector<double>> dk_part(static_cast<size_t>(d.B * d.H)), dv_part(dk_part.size());
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / (d.H / d.Hkv);
      std::vector<double> Q, K, V, dO, p(static_cast<size_t>(d.Nk)), dp(static_cast<size_t>(d.Nk));
      cpu::gather_head(Q, q, b, h, identity);
      cpu::gather_head(K, k, b, hk, identity);
      cpu::gather_head(V, v, b, hk, identity);
      cpu::gather_head(dO, dout, b, h, identity);
      std::vector<double>& dK = dk_part[b * d.H + h];
      std::vector<double>& dV = dv_part[b * d.H + h];
      dK.assign(static_cast<size_t>(d.Nk * d.D), 0.0);
      dV.assign(dK.size(), 0.0);
      for (int64_t i = 0; i < d.Nq; ++i) {
        const double lse = fwd.lse.at(b, h, i);
        if (lse == -std::numeric_limits<double>::infinity()) continue;  // empty row: zero gradients
        double delta = 0;
        for (int64_t j = 0; j < d.Nk; ++j) {
          const bool vis = key_visible(causal, i, j, d.Nq, d.Nk);
          p[j] = vis ? std::exp(scale * dot(&Q[i * d.D], &K[j * d.D], d.D) - lse) : 0.0;
          dp[j] = vis ? dot(&dO[i * d.D], &V[j * d.D], d.D) : 0.0;
          delta += p[j] * dp[j];
        }
        r.delta.at(b, h, i) = delta;
        double* dq = &r.dq.at(b, i, h, 0);
        for (int64_t j = 0; j < d.Nk; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = p[j] * (dp[j] - delta);
          for (int64_t e = 0; e < d.D; ++e) {
            dq[e] += scale * ds * K[j * d.D + e];
            dK[j * d.D + e] += scale * ds * Q[i * d.D + e];
            dV[j * d.D + e] += p[j] * dO[i * d.D + e];
          }
        }
      }
    }
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / (d.H / d.Hkv);
      for (int64_t j = 0; j < d.Nk; ++j)
        for (int64_t e = 0; e < d.D; ++e) {
          r.dk.at(b, j, hk, e) += dk_part[b * d.H + h][j * d.D + e];
          r.dv.at(b, j, hk, e) += dv_part[b * d.H + h][j * d.D + e];
        }
    }
  return r;
}

}  // namespace gproj
