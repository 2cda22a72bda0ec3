// CPU FlashAttention forward: tiled online softmax in FP32, BF16 rounding only at F4 (P before PV) and F5 (O).
// Exercised by tests/cpu/flash_forward_test.cc against the float64 oracle; benchmarked in bench/.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/forward_block.h"
#include "cpu/head_gather.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_ops.h"
#include "gproj/attention.h"
#include "gproj/error.h"

namespace gproj {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;

// The running-max candidate of one block row (GUIDE §1): with fwdfix, a block whose max r_m is tied
// (>1 entries within tol) contributes beta*r_m if r_m > 0 and 0 if r_m < 0 instead of r_m, with the lift
// capped at max_shift (r_m + max_shift) so the tied entries exp(-lift) never underflow (docs/numerics.md).
float block_max_candidate(const float* s, int cols, bool tie_fix, float beta, float tol, float max_shift) {
  float rm = kNegInf;
  for (int j = 0; j < cols; ++j) rm = std::max(rm, s[j]);
  if (!tie_fix || rm == kNegInf) return rm;
  int ties = 0;
  for (int j = 0; j < cols; ++j) ties += s[j] >= rm - tol ? 1 : 0;
  if (ties <= 1) return rm;
  if (rm > 0.0f) return (beta - 1.0f) * rm <= max_shift ? beta * rm : rm + max_shift;
  if (rm < 0.0f) return -rm <= max_shift ? 0.0f : rm + max_shift;
  return rm;
}

}  // namespace

namespace cpu {

bool consistent_p(const FlashParams& params) {
  return effective_projection(params) == Projection::kFp16LowRank;
}

void forward_query_block(const TileGemm& gemm, const FlashParams& params, float scale, const float* Qt, int rows,
                         int64_t i0, int64_t Nq, int64_t Nk, int D, const float* K, const float* X, int Dx, float* acc,
                         float* m, float* l, std::vector<float>& S) {
  const bool consistent = consistent_p(params);
  const bool round_p = params.variant != Variant::kFp32;  // F4
  const bool tie_fix = !consistent && (params.variant == Variant::kFwdfix || params.variant == Variant::kGproj);
  const float scale_log2 = scale * kLog2e;
  const int Bk = params.block_k;
  S.resize(static_cast<size_t>(rows) * Bk);
  std::fill(acc, acc + static_cast<size_t>(rows) * Dx, 0.0f);
  std::fill(m, m + rows, kNegInf);
  std::fill(l, l + rows, 0.0f);
  // Keys beyond the last row's causal limit are invisible to the whole block.
  const int64_t j_end = params.causal ? std::clamp<int64_t>(i0 + rows + Nk - Nq, 0, Nk) : Nk;
  for (int64_t j0 = 0; j0 < j_end; j0 += Bk) {
    const int cols = static_cast<int>(std::min<int64_t>(Bk, j_end - j0));
    gemm.nt(rows, cols, D, Qt, D, K + j0 * D, D, S.data(), Bk, false);  // S = Q K^T
    for (int i = 0; i < rows; ++i) {
      float* s = &S[i * Bk];
      const int64_t limit = i0 + i + Nk - Nq;  // last visible key of this row
      if (consistent) {
        // The consistent P: S in log2 units, an integer running max (its rescaling 2^(m_old - m_new) is exact),
        // P^ rounded to FP16 and l summing the rounded P^ (flash_backward.cc's p_tile reproduces it from the LSE).
        // The exponent is one fused multiply-add, S scale log2e - m rounded once, as the kernels' FFMA forms it.
        for (int j = 0; j < cols; ++j)
          if (params.causal && j0 + j > limit) s[j] = kNegInf;
        float rm = kNegInf;
        for (int j = 0; j < cols; ++j) rm = std::max(rm, s[j]);
        const float m_new = std::max(m[i], std::ceil(scale_log2 * rm));  // (scale > 0: the max of the scaled row)
        if (m_new == kNegInf) {
          std::fill(s, s + cols, 0.0f);
          continue;
        }
        const float alpha = m[i] == kNegInf ? 0.0f : std::exp2(m[i] - m_new);
        float rowsum = 0.0f;
        for (int j = 0; j < cols; ++j) {
          s[j] = round_fp16(std::exp2(std::fma(s[j], scale_log2, -m_new)));  // masked: exp2(-inf) = 0
          rowsum += s[j];
        }
        l[i] = l[i] * alpha + rowsum;
        for (int e = 0; e < Dx; ++e) acc[i * Dx + e] *= alpha;
        m[i] = m_new;
        continue;
      }
      for (int j = 0; j < cols; ++j) s[j] = (params.causal && j0 + j > limit) ? kNegInf : scale * s[j];
      const float cand =
          block_max_candidate(s, cols, tie_fix, params.fwdfix_beta, params.fwdfix_tie_tol, params.fwdfix_max_shift);
      const float m_new = std::max(m[i], cand);
      if (m_new == kNegInf) {  // nothing visible yet in this row
        std::fill(s, s + cols, 0.0f);
        continue;
      }
      const float alpha = exp_fp32(m[i] - m_new);  // exp(-inf) = 0 on the first visible block
      exp_sub_row(s, cols, m_new);                 // masked: exp(-inf) = 0
      float rowsum = 0.0f;
      for (int j = 0; j < cols; ++j) rowsum += s[j];  // l uses the FP32 P
      if (round_p) round_bf16_row(s, s, cols);        // F4
      l[i] = l[i] * alpha + rowsum;
      for (int e = 0; e < Dx; ++e) acc[i * Dx + e] *= alpha;
      m[i] = m_new;
    }
    gemm.nn(rows, Dx, cols, S.data(), Bk, X + j0 * Dx, Dx, acc, Dx, true);  // acc += P X
  }
}

float row_lse(const FlashParams& params, float m, float l) {
  if (m == kNegInf) return kNegInf;
  return consistent_p(params) ? (m + std::log2(l)) * kLn2 : m + std::log(l);
}

}  // namespace cpu

ForwardResult flash_forward_cpu(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params) {
  const AttentionDims d = check_attention_shapes(q, k, v);
  if (!cpu_supports_head_dim(d.D)) {
    throw Error(ErrorCode::kUnsupported, "head dim D = " + std::to_string(d.D) +
                                             " (the CPU path supports multiples of 8 from 8 to 256)");
  }
  const float scale = resolve_scale(params, d.D);
  if (!params.allow_nonfinite) check_finite_inputs({{"q", q}, {"k", k}, {"v", v}});
  const bool consistent = cpu::consistent_p(params);
  cpu::init_blas_threads();
  const cpu::TileGemm gemm(params.accumulation);
  const int Bq = params.block_q;
  const int D = static_cast<int>(d.D);
  const int64_t nqb = (d.Nq + Bq - 1) / Bq;

  ForwardResult r{Tensor<bf16>({d.B, d.Nq, d.H, d.D}), Tensor<float>({d.B, d.Nq, d.H, d.D}),
                  Tensor<float>({d.B, d.H, d.Nq}), {}};
  auto to_f = [](bf16 x) { return x.to_float(); };

  // K and V of every (b, kv head) widened to FP32 once, shared by all query blocks: (B * Hkv) x (Nk, D).
  std::vector<std::vector<float>> Kf(static_cast<size_t>(d.B * d.Hkv)), Vf(Kf.size());
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hk = 0; hk < d.Hkv; ++hk) {
      cpu::gather_head(Kf[b * d.Hkv + hk], k, b, hk, to_f);
      cpu::gather_head(Vf[b * d.Hkv + hk], v, b, hk, to_f);
      if (consistent) cpu::round_fp16_head(Vf[b * d.Hkv + hk].data(), Vf[b * d.Hkv + hk].size());  // P^ V in FP16
    }

#pragma omp parallel
  {
    std::vector<float> Qt(static_cast<size_t>(Bq) * D);
    std::vector<float> S, acc(Qt.size()), m(Bq), l(Bq);
#pragma omp for collapse(3) schedule(dynamic)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t qb = 0; qb < nqb; ++qb) {
          const int64_t hk = h / d.group();
          const int64_t i0 = qb * Bq;
          const int rows = static_cast<int>(std::min<int64_t>(Bq, d.Nq - i0));
          for (int i = 0; i < rows; ++i)
            for (int e = 0; e < D; ++e) Qt[i * D + e] = q.at(b, i0 + i, h, e).to_float();
          cpu::forward_query_block(gemm, params, scale, Qt.data(), rows, i0, d.Nq, d.Nk, D,
                                   Kf[b * d.Hkv + hk].data(), Vf[b * d.Hkv + hk].data(), D, acc.data(), m.data(),
                                   l.data(), S);
          for (int i = 0; i < rows; ++i) {
            bf16* o = &r.o.at(b, i0 + i, h, 0);
            float* of = &r.o_fp32.at(b, i0 + i, h, 0);
            if (m[i] == kNegInf) {  // no visible key: O = 0, LSE = -inf
              for (int e = 0; e < D; ++e) of[e] = 0.0f, o[e] = bf16::from_float(0.0f);
              r.lse.at(b, h, i0 + i) = kNegInf;
              continue;
            }
            for (int e = 0; e < D; ++e) {
              of[e] = acc[i * D + e] / l[i];
              o[e] = bf16::from_float(of[e]);  // F5
            }
            r.lse.at(b, h, i0 + i) = cpu::row_lse(params, m[i], l[i]);
          }
        }
  }
  r.kernels = "cpu emulator";
  return r;
}

}  // namespace gproj
