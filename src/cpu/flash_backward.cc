// CPU FlashAttention backward: preprocess (B1 delta), main loop over key blocks then query blocks with BF16
// rounding at B4 only, the GProj projection, then postprocess (scale, GQA reduction, output rounding).
// Exercised by tests/cpu/flash_backward_test.cc and tests/cpu/projection_test.cc against the float64 oracle.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/forward_block.h"
#include "cpu/head_gather.h"
#include "cpu/projection.h"
#include "cpu/tile_gemm.h"
#include "cpu/tile_ops.h"
#include "gproj/attention.h"
#include "gproj/compare.h"
#include "gproj/error.h"

namespace gproj {

namespace {

float row_norm(const float* x, int n) {
  double s = 0;
  for (int e = 0; e < n; ++e) s += double(x[e]) * x[e];
  return static_cast<float>(std::sqrt(s));
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.44269504088896341f;

struct BackwardSetup {
  AttentionDims d;
  float scale;
  bool round_bf16_operands;  // B4 (false for the fp32 variant)
  bool delta_from_fp32_o;    // fp32 variant and Projection::kDelta use O before F5
  Projection projection;
};

BackwardSetup check_backward(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                             const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                             const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                             const TensorView<const bf16>& dout, const FlashParams& params) {
  BackwardSetup s;
  s.d = check_attention_shapes(q, k, v, dout, o);
  if (!cpu_supports_head_dim(s.d.D)) {
    throw Error(ErrorCode::kUnsupported, "head dim D = " + std::to_string(s.d.D) +
                                             " (the CPU path supports multiples of 8 from 8 to 256)");
  }
  s.scale = resolve_scale(params, s.d.D);
  s.projection = effective_projection(params);
  s.round_bf16_operands = params.variant != Variant::kFp32;
  s.delta_from_fp32_o = backward_needs_o_fp32(params);
  const Extents lse_shape{s.d.B, s.d.H, s.d.Nq, 1};
  if (lse.data == nullptr || lse.rank != 3 || lse.shape != lse_shape) {
    throw Error(ErrorCode::kShape, "lse must be (B, H, Nq) = " + format_extents(3, lse_shape) + ", got " +
                                       (lse.data ? format_extents(lse.rank, lse.shape) : std::string("none")));
  }
  if (s.delta_from_fp32_o && (o_fp32.data == nullptr || o_fp32.shape != q.shape)) {
    throw Error(ErrorCode::kInvalidArgument, std::string("variant ") + variant_name(params.variant) +
                                                 (s.projection == Projection::kDelta ? " with projection delta" : "") +
                                                 " needs the forward's FP32 O (o_fp32) of shape " +
                                                 format_extents(4, q.shape));
  }
  if (!params.allow_nonfinite) check_finite_inputs({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"do", dout}});
  if (s.projection == Projection::kFp16LowRank && params.dk_compensation_rank > 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "projection fp16-lowrank takes no dK compensation (its dK carries FP16 rounding only): set "
                "dk_compensation_rank = 0");
  }
  if (params.fp16_dout_side && (params.variant != Variant::kGproj || s.projection != Projection::kFp16LowRank)) {
    throw Error(ErrorCode::kInvalidArgument,
                "fp16_dout_side is a form of projection fp16-lowrank (variant gproj); this backward runs variant " +
                    std::string(variant_name(params.variant)) + " with projection " + projection_name(s.projection));
  }
  return s;
}

}  // namespace

BackwardResult flash_backward_cpu(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params) {
  const BackwardSetup st = check_backward(q, k, v, o, o_fp32, lse, dout, params);
  const AttentionDims& d = st.d;
  cpu::init_blas_threads();
  const cpu::TileGemm gemm(params.accumulation);
  const int Bq = params.block_q, Bk = params.block_k, D = static_cast<int>(d.D);
  const float scale = st.scale;
  auto rnd = [&](float x) { return st.round_bf16_operands ? round_bf16(x) : x; };
  const bool fp16 = st.projection == Projection::kFp16LowRank;
  const bool dout_side = fp16 && params.fp16_dout_side;  // 1 / l on dO's side (attention.h)
  const float scale_log2 = scale * kLog2e;
  auto to_f = [](bf16 x) { return x.to_float(); };

  BackwardResult r;
  r.dq = Tensor<bf16>({d.B, d.Nq, d.H, d.D});
  r.dk = Tensor<bf16>({d.B, d.Nk, d.Hkv, d.D});
  r.dv = Tensor<bf16>({d.B, d.Nk, d.Hkv, d.D});
  r.delta = Tensor<float>({d.B, d.H, d.Nq});
  r.dq_fp32 = Tensor<float>({d.B, d.Nq, d.H, d.D});
  r.rowsum = Tensor<float>({d.B, d.H, d.Nq});
  r.rowsum_after = Tensor<float>({d.B, d.H, d.Nq});
  // FP32 dK/dV partials of each query head; a GQA group is reduced in head order afterwards.
  std::vector<std::vector<float>> dk_part(static_cast<size_t>(d.B * d.H)), dv_part(dk_part.size());

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t hk = h / d.group();
      std::vector<float> Q, K, V, dO, Of;
      cpu::gather_head(Q, q, b, h, to_f);
      cpu::gather_head(K, k, b, hk, to_f);
      cpu::gather_head(V, v, b, hk, to_f);
      cpu::gather_head(dO, dout, b, h, to_f);
      if (fp16) {  // delta from an FP16 copy of the forward's O, in the units of the head's FP16 V (|O| <= max |V|)
        cpu::gather_head(Of, o_fp32, b, h, [](float x) { return x; });
        cpu::round_fp16_scaled(Of.data(), Of.size(), cpu::fp16_head_scale(cpu::max_abs(V.data(), V.size())));
      } else if (st.delta_from_fp32_o) {
        cpu::gather_head(Of, o_fp32, b, h, [](float x) { return x; });
      } else {
        cpu::gather_head(Of, o, b, h, to_f);
      }
      // fp16_dout_side: dP, delta and dV read dOh_i = fp16(dO_i (1 / l_i) s_do) (as a value: / s_do, exact), 1 / l_i
      // = 2^(M_i - LSE_i log2e) in [1, 2), M_i = ceil(LSE_i log2e) (the consistent P's, below), s_do the power of
      // two that puts 2 max_i |dO_i| in [2^14, 2^15) (|dO_id / l_i| < 2 max_i |dO_i|); dV then takes it out.
      std::vector<float> dOl, Vh;
      if (dout_side) {
        float dmax = 0.0f;
        for (int64_t i = 0; i < d.Nq; ++i) dmax = std::max(dmax, row_norm(&dO[i * D], D));
        const float s_do = cpu::fp16_head_scale(2.0f * dmax), inv_s_do = 1.0f / s_do;
        dOl.resize(dO.size());
        for (int64_t i = 0; i < d.Nq; ++i) {
          const float l2 = lse.at(b, h, i) * kLog2e;
          const float inv_l = l2 == kNegInf ? 0.0f : std::exp2(std::ceil(l2) - l2);
          for (int e = 0; e < D; ++e) dOl[i * D + e] = cpu::round_fp16(dO[i * D + e] * inv_l * s_do) * inv_s_do;
        }
        Vh = V;
        cpu::round_fp16_head(Vh.data(), Vh.size());  // the forward's vh, as a value
      }
      const std::vector<float>& dOd = dout_side ? dOl : dO;  // dP's, delta's and dV's dO
      // Preprocess, B1: delta_i = sum_d dO_id O_id in FP32.
      std::vector<float> delta(static_cast<size_t>(d.Nq)), L(delta.size());
      for (int64_t i = 0; i < d.Nq; ++i) {
        float acc = 0.0f;
        for (int e = 0; e < D; ++e) acc += dOd[i * D + e] * Of[i * D + e];
        delta[i] = acc;
        r.delta.at(b, h, i) = acc;
        L[i] = lse.at(b, h, i);
      }
      // fp16-lowrank: dS is rounded to FP16 after one power of two per head, sigma = 2^(14 - ceil(log2 bound)),
      // bound = 2 max_i |dO_i| max_j |V_j| >= |dS_ij| (|dS_ij| <= P_ij |dO_i| (|V_j| + |O_i|)), and multiplied
      // against FP16 copies of Q and K; the accumulators are in sigma's units until the end.
      float sigma = 1.0f;
      std::vector<float> Qh, Kh;
      if (fp16) {
        float dmax = 0.0f, vmax = 0.0f;
        for (int64_t i = 0; i < d.Nq; ++i) dmax = std::max(dmax, row_norm(&dO[i * D], D));
        for (int64_t j = 0; j < d.Nk; ++j) vmax = std::max(vmax, row_norm(&V[j * D], D));
        sigma = cpu::fp16_ds_scale(dmax, vmax);  // (cpu/tile_ops.h)
        Qh = Q;
        Kh = K;
        cpu::round_fp16_head(Qh.data(), Qh.size());  // each with its own power of two (cpu/tile_ops.h)
        cpu::round_fp16_head(Kh.data(), Kh.size());
      }
      // The GEMM operands of S, dK and dQ: fp16-lowrank's backward reads only the FP16 copies of Q and K (the
      // kernel's Qh and Kh^T, docs/design-fp16-projection.md); S from them equals S from the BF16 values wherever
      // the conversion is exact (every BF16 value down to 2^-28 of its head's largest, and 0).
      const float* Qg = fp16 ? Qh.data() : Q.data();
      const float* Kg = fp16 ? Kh.data() : K.data();
      std::vector<float> dQacc(static_cast<size_t>(d.Nq) * D, 0.0f);
      std::vector<float>& dKacc = dk_part[b * d.H + h];
      std::vector<float>& dVacc = dv_part[b * d.H + h];
      dKacc.assign(static_cast<size_t>(d.Nk) * D, 0.0f);
      dVacc.assign(dKacc.size(), 0.0f);
      cpu::HeadView head{d.Nq, d.Nk, D, params.causal, Q.data(), K.data(), dQacc.data(), dKacc.data()};
      cpu::RowProjection proj(st.projection, head, params.lowrank_rank,
                              st.projection == Projection::kThreshLowRank ? params.thresh_k : params.topk, gemm,
                              params.basis_key_stride);
      if ((st.projection == Projection::kThreshLowRank && params.forward_stats) || fp16) {
        proj.use_forward_stats(params, scale);
      }
      cpu::DkCompensation dk_comp(head, params.variant == Variant::kGproj ? params.dk_compensation_rank : 0);

      std::vector<float> P(static_cast<size_t>(Bq) * Bk), Pb(P.size()), dP(P.size()), dS(P.size()),
          dSb_raw(P.size()), dSb(P.size()), Ph(dout_side ? P.size() : 0);
      // P of one tile, recomputed from the LSE: exp(scale * Q K^T - LSE), masked and empty rows 0.
      // fp16-lowrank: P = 2^(S log2e - LSE log2e) from the FP16 copies of Q and K, the forward's P^ / l without
      // P^'s FP16 rounding (session 48: the errors move by <= 0.009 points without it, docs/design-fp16-projection.md,
      // and the kernel's element-wise step is baseline's). fp16_dout_side takes the forward's fp16(P^), P^ =
      // 2^(S log2e - M) with M = ceil(LSE log2e) (cpu/forward_block.h): dV's operand there.
      auto p_tile = [&](int64_t i0, int rows, int64_t j0, int cols) {
        gemm.nt(rows, cols, D, &Qg[i0 * D], D, &Kg[j0 * D], D, P.data(), Bk, false);
        for (int i = 0; i < rows; ++i) {
          float* p = &P[i * Bk];
          const int64_t limit = i0 + i + d.Nk - d.Nq;
          // Visible keys of this row: j < vis (a prefix of the tile); an empty row (LSE = -inf) sees none.
          const int vis = L[i0 + i] == kNegInf ? 0
                          : params.causal     ? static_cast<int>(std::clamp<int64_t>(limit - j0 + 1, 0, cols))
                                              : cols;
          if (dout_side) std::fill(&Ph[i * Bk], &Ph[i * Bk] + Bk, 0.0f);
          if (fp16 && vis > 0) {
            const float l2 = L[i0 + i] * kLog2e;
            if (dout_side) {
              const float M = std::ceil(l2), inv_l = std::exp2(M - l2);
              for (int j = 0; j < vis; ++j) {
                Ph[i * Bk + j] = cpu::round_fp16(std::exp2(std::fma(p[j], scale_log2, -M)));  // fp16(P^)
                p[j] = Ph[i * Bk + j] * inv_l;
              }
            } else {
              for (int j = 0; j < vis; ++j) p[j] = std::exp2(std::fma(p[j], scale_log2, -l2));
            }
          } else {
            for (int j = 0; j < vis; ++j) p[j] = scale * p[j];
            cpu::exp_sub_row(p, vis, L[i0 + i]);
          }
          std::fill(p + vis, p + cols, 0.0f);
          if (st.round_bf16_operands) {
            cpu::round_bf16_row(&Pb[i * Bk], p, cols);
          } else {
            std::copy(p, p + cols, &Pb[i * Bk]);
          }
        }
      };
      // Query rows that see key j0 or later: causal rows i >= j0 - (Nk - Nq).
      auto first_row = [&](int64_t j0) {
        return params.causal ? std::clamp<int64_t>(j0 - (d.Nk - d.Nq), 0, d.Nq) : int64_t{0};
      };
      for (int64_t j0 = 0; j0 < d.Nk; j0 += Bk) {
        const int cols = static_cast<int>(std::min<int64_t>(Bk, d.Nk - j0));
        for (int64_t i0 = first_row(j0) / Bq * Bq; i0 < d.Nq; i0 += Bq) {
          const int rows = static_cast<int>(std::min<int64_t>(Bq, d.Nq - i0));
          p_tile(i0, rows, j0, cols);
          // dP = dO V^T (fp16_dout_side: dOh Vh^T, which carries 1 / l_i; dS then takes fp16(P^) without it)
          gemm.nt(rows, cols, D, &dOd[i0 * D], D, dout_side ? &Vh[j0 * D] : &V[j0 * D], D, dP.data(), Bk, false);
          for (int i = 0; i < rows; ++i)
            for (int j = 0; j < cols; ++j) {
              const int t = i * Bk + j;
              dS[t] = (dout_side ? Ph[t] : P[t]) * (dP[t] - delta[i0 + i]);
              dSb_raw[t] = dSb[t] = fp16 ? cpu::round_fp16(sigma * dS[t]) : rnd(dS[t]);  // B4 (fp16-lowrank: FP16)
            }
          dk_comp.accumulate(i0, rows, j0, cols, dS.data(), dSb_raw.data(), Bk);
          proj.compensate_tile(rows, cols, P.data(), dS.data(), dSb.data(), Bk);
          // dV += P^T dO (fp16_dout_side: fp16(P^)^T dOh, no bf16(P))
          gemm.tn(cols, D, rows, dout_side ? Ph.data() : Pb.data(), Bk, &dOd[i0 * D], D, &dVacc[j0 * D], D, true);
          gemm.tn(cols, D, rows, dSb.data(), Bk, &Qg[i0 * D], D, &dKacc[j0 * D], D, true);  // dK += dS^T Q
          gemm.nn(rows, D, cols, dSb.data(), Bk, &Kg[j0 * D], D, &dQacc[i0 * D], D, true);  // dQ += dS K
          proj.accumulate(i0, rows, j0, cols, P.data(), Pb.data(), dSb_raw.data(), dSb.data(), Bk);
        }
      }
      if (proj.needs_p_sweep()) {
        for (int64_t j0 = 0; j0 < d.Nk; j0 += Bk) {
          const int cols = static_cast<int>(std::min<int64_t>(Bk, d.Nk - j0));
          for (int64_t i0 = first_row(j0) / Bq * Bq; i0 < d.Nq; i0 += Bq) {
            const int rows = static_cast<int>(std::min<int64_t>(Bq, d.Nq - i0));
            p_tile(i0, rows, j0, cols);
            proj.dk_pweighted_tile(i0, rows, j0, cols, Pb.data(), Bk);
          }
        }
      }
      proj.finish();
      dk_comp.finish();
      const float unscale = 1.0f / sigma;  // exact: a power of two
      if (fp16) {
        for (float& x : dKacc) x *= unscale;
      }
      for (int64_t i = 0; i < d.Nq; ++i) {
        r.rowsum.at(b, h, i) = proj.rowsum_before()[i] * unscale;
        r.rowsum_after.at(b, h, i) = proj.rowsum_after()[i] * unscale;
        for (int e = 0; e < D; ++e) {
          const float x = scale * (dQacc[i * D + e] * unscale);
          r.dq_fp32.at(b, i, h, e) = x;
          r.dq.at(b, i, h, e) = bf16::from_float(x);
        }
      }
    }

  // Postprocess: reduce dK/dV over the heads of each GQA group, scale dK, round both.
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t hk = 0; hk < d.Hkv; ++hk)
      for (int64_t j = 0; j < d.Nk; ++j)
        for (int e = 0; e < D; ++e) {
          float dk = 0.0f, dv = 0.0f;
          for (int64_t g = 0; g < d.group(); ++g) {
            const size_t part = static_cast<size_t>(b * d.H + hk * d.group() + g);
            dk += dk_part[part][j * D + e];
            dv += dv_part[part][j * D + e];
          }
          r.dk.at(b, j, hk, e) = bf16::from_float(scale * dk);
          r.dv.at(b, j, hk, e) = bf16::from_float(dv);
        }

  double before = 0, after = 0;
  for (size_t i = 0; i < r.rowsum.values.size(); ++i) {
    before = std::max(before, std::fabs(double(r.rowsum.values[i])));
    after = std::max(after, std::fabs(double(r.rowsum_after.values[i])));
  }
  r.diag.rowsum_max_before = before;
  r.diag.rowsum_max_after = after;
  r.diag.dk_colsum_ratio = column_sum_ratio(r.dk.view());
  r.kernels = "cpu emulator";
  return r;
}

}  // namespace gproj
