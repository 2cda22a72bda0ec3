// The GProj projections on one head: statistics per tile, then corrections of the FP32 dQ/dK accumulators.
// Exercised by tests/cpu/projection_test.cc and the projection study (docs/gproj-projection.md).
#include "cpu/projection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu/forward_block.h"
#include "cpu/tile_ops.h"
#include "gproj/error.h"

namespace gproj::cpu {

namespace {

// Eigenvectors of the symmetric (n, n) matrix A by cyclic Jacobi rotations; returns them as columns of V,
// sorted by decreasing eigenvalue. n <= 256 here (a head dimension), so O(n^3) per sweep is cheap.
void symmetric_eigen(std::vector<double>& A, int n, std::vector<double>& V) {
  V.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) V[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 50; ++sweep) {
    double off = 0, diag = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) (i == j ? diag : off) += A[i * n + j] * A[i * n + j];
    if (off <= 1e-30 * diag) break;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = A[p * n + q];
        if (apq == 0.0) continue;
        const double theta = (A[q * n + q] - A[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < n; ++k) {  // A <- A J (columns p, q)
          const double akp = A[k * n + p], akq = A[k * n + q];
          A[k * n + p] = c * akp - s * akq;
          A[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {  // A <- J^T A (rows p, q)
          const double apk = A[p * n + k], aqk = A[q * n + k];
          A[p * n + k] = c * apk - s * aqk;
          A[q * n + k] = s * apk + c * aqk;
        }
        for (int k = 0; k < n; ++k) {
          const double vkp = V[k * n + p], vkq = V[k * n + q];
          V[k * n + p] = c * vkp - s * vkq;
          V[k * n + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return A[a * n + a] > A[b * n + b]; });
  std::vector<double> sorted(V.size());
  for (int k = 0; k < n; ++k)
    for (int c = 0; c < n; ++c) sorted[k * n + c] = V[k * n + order[c]];
  V.swap(sorted);
}

// The top-r eigenvectors of the symmetric positive semi-definite (n, n) matrix G by subspace iteration:
// X <- orthonormalise(G X), kIters times, from a fixed pseudo-random start (a hash of the indices), with
// modified Gram-Schmidt in double. The same few steps a GPU pre-pass can run (one CTA per head); U only
// has to span the dominant directions of K (the shared component first), not to converge to the last digit.
void top_eigenvectors(const std::vector<double>& G, int n, int r, std::vector<double>& X) {
  // docs/gproj-projection.md: 24 -> 8 changed dQ by <= 0.0011 points, 8 -> 4 (with 8 columns iterated and 6 kept)
  // by <= 0.005, dK not at all.
  constexpr int kIters = 4;
  X.assign(static_cast<size_t>(n) * r, 0.0);
  for (int a = 0; a < n; ++a)
    for (int c = 0; c < r; ++c) {
      uint32_t h = static_cast<uint32_t>(a * 7919 + c * 104729 + 17);
      h ^= h >> 16, h *= 0x7feb352dU, h ^= h >> 15, h *= 0x846ca68bU, h ^= h >> 16;
      X[a * r + c] = static_cast<double>(h) / 4294967296.0 - 0.5;
    }
  std::vector<double> Y(X.size());
  for (int it = 0; it <= kIters; ++it) {
    if (it > 0) {  // Y = G X
      std::fill(Y.begin(), Y.end(), 0.0);
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b) {
          const double g = G[a * n + b];
          for (int c = 0; c < r; ++c) Y[a * r + c] += g * X[b * r + c];
        }
      X.swap(Y);
    }
    // Modified Gram-Schmidt on the columns; in the last step each column is swept twice over the earlier ones:
    // where G has rank < r (fewer rows than columns, e.g. one query), a column of G X is its earlier columns plus
    // rounding noise, and one sweep leaves it O(1) along them once normalised. The dK compensation's E U^T needs
    // U^T U = I. (The steps before only carry the span, which a second sweep does not change.)
    const int sweeps = it == kIters ? 2 : 1;
    for (int c = 0; c < r; ++c) {
      for (int sweep = 0; sweep < sweeps; ++sweep)
        for (int d = 0; d < c; ++d) {
          double dot = 0;
          for (int a = 0; a < n; ++a) dot += X[a * r + c] * X[a * r + d];
          for (int a = 0; a < n; ++a) X[a * r + c] -= dot * X[a * r + d];
        }
      double norm = 0;
      for (int a = 0; a < n; ++a) norm += X[a * r + c] * X[a * r + c];
      norm = std::sqrt(norm);
      for (int a = 0; a < n; ++a) X[a * r + c] = norm > 0 ? X[a * r + c] / norm : 0.0;
    }
  }
}

// X^T X (D x D, double) of the n rows of X (n x D, row-major): the matrix whose top eigenvectors the bases span.
std::vector<double> gram_matrix(const float* X, int64_t n, int D) {
  std::vector<double> g(static_cast<size_t>(D) * D, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b) g[a * D + b] += double(X[i * D + a]) * X[i * D + b];
  return g;
}

// The GPU's basis for the tail of thresh-lowrank and topk-lowrank: the subspace iteration runs on at least
// kBasisVectors columns (the GPU pre-pass iterates 8) and the tail uses the first r. Iterating more columns than
// are kept makes the kept ones converge faster; the columns of a rank-r iteration are not the first r of it.
constexpr int kBasisVectors = 8;
void tail_basis(const std::vector<double>& G, int n, int r, std::vector<float>& U) {
  const int iterated = std::min(n, std::max(r, kBasisVectors));
  std::vector<double> X;
  top_eigenvectors(G, n, iterated, X);
  U.resize(static_cast<size_t>(n) * r);
  for (int a = 0; a < n; ++a)
    for (int c = 0; c < r; ++c) U[a * r + c] = static_cast<float>(X[a * iterated + c]);
}

}  // namespace

RowProjection::RowProjection(Projection kind, const HeadView& head, int lowrank_rank, int topk, const TileGemm& gemm,
                             int basis_key_stride)
    : kind_(kind), h_(head), rank_(std::min(lowrank_rank, head.D)), gemm_(gemm), k_(topk) {
  r_raw_.assign(static_cast<size_t>(h_.Nq), 0.0f);
  r_.assign(r_raw_.size(), 0.0f);
  s_.assign(r_raw_.size(), 0.0f);
  if (kind_ == Projection::kPWeighted || kind_ == Projection::kPWeightedDq) {
    pk_.assign(static_cast<size_t>(h_.Nq) * h_.D, 0.0f);
  }
  if (kind_ == Projection::kTopK || kind_ == Projection::kTopKRest || kind_ == Projection::kTopKLowRank ||
      kind_ == Projection::kThreshLowRank) {
    top_p_.assign(static_cast<size_t>(h_.Nq) * k_, -1.0f);
    top_rank_.assign(top_p_.size(), -1.0f);
    top_j_.assign(top_p_.size(), -1);
  }
  const bool fp16_lowrank = kind_ == Projection::kFp16LowRank;
  const bool gpu_lowrank = kind_ == Projection::kTopKLowRank || kind_ == Projection::kThreshLowRank || fp16_lowrank;
  if (kind_ == Projection::kLowRank || gpu_lowrank) {
    const int D = h_.D;
    std::vector<double> gram, V;
    if (gpu_lowrank && basis_key_stride > 1) {  // a study's cheaper pre-pass: every s-th block of 64 keys
      std::vector<float> rows;
      for (int64_t j0 = 0; j0 < h_.Nk; j0 += 64 * static_cast<int64_t>(basis_key_stride)) {
        const int64_t end = std::min<int64_t>(h_.Nk, j0 + 64);
        rows.insert(rows.end(), h_.K + j0 * D, h_.K + end * D);
      }
      gram = gram_matrix(rows.data(), static_cast<int64_t>(rows.size()) / D, D);
    } else {
      gram = gram_matrix(h_.K, h_.Nk, D);
    }
    if (kind_ == Projection::kLowRank) {  // the study's reference form: exact eigenvectors (Jacobi)
      symmetric_eigen(gram, D, V);
      U_.resize(static_cast<size_t>(D) * rank_);
      for (int a = 0; a < D; ++a)
        for (int c = 0; c < rank_; ++c) U_[a * rank_ + c] = static_cast<float>(V[a * D + c]);
    } else {  // topk-lowrank, the GPU form: subspace iteration, and K U rounded to BF16 (a tensor-core operand)
      tail_basis(gram, D, rank_, U_);
    }
    KU_.assign(static_cast<size_t>(h_.Nk) * rank_, 0.0f);
    if (gpu_lowrank) {  // bf16(K bf16(U)): the GPU forms K U on the tensor cores (B operand bf16(U)); U stays FP32
      std::vector<float> Ub(U_);  // where the tail goes back to D columns
      for (float& x : Ub) x = round_bf16(x);
      gemm_.nn(static_cast<int>(h_.Nk), rank_, D, h_.K, D, Ub.data(), rank_, KU_.data(), rank_, false);
      if (fp16_lowrank) {
        // P^ (K U) in FP16, its power of two from K's (the kernels' form: cpu/tile_ops.h, fp16_ku_scale)
        const float k_scale = fp16_head_scale(max_abs(h_.K, static_cast<size_t>(h_.Nk) * D));
        round_fp16_scaled(KU_.data(), KU_.size(), fp16_ku_scale(k_scale, D));
      } else {
        for (float& x : KU_) x = round_bf16(x);
      }
    } else {
      gemm_.nn(static_cast<int>(h_.Nk), rank_, D, h_.K, D, U_.data(), rank_, KU_.data(), rank_, false);
    }
    pku_.assign(static_cast<size_t>(h_.Nq) * rank_, 0.0f);
  }
}

int64_t RowProjection::visible_count(int64_t i) const {
  if (!h_.causal) return h_.Nk;
  return std::clamp<int64_t>(i + h_.Nk - h_.Nq + 1, 0, h_.Nk);
}

void RowProjection::compensate_tile(int rows, int cols, const float* P, const float* dS, float* dSb, int ld) const {
  if (kind_ != Projection::kInTile) return;
  for (int i = 0; i < rows; ++i) {
    int jstar = 0;
    float want = 0.0f, others = 0.0f;
    for (int j = 0; j < cols; ++j) {
      want += dS[i * ld + j];
      if (P[i * ld + j] > P[i * ld + jstar]) jstar = j;
    }
    for (int j = 0; j < cols; ++j) others += j == jstar ? 0.0f : dSb[i * ld + j];
    dSb[i * ld + jstar] = round_bf16(want - others);
  }
}

void RowProjection::accumulate(int64_t i0, int rows, int64_t j0, int cols, const float* P, const float* Pb,
                               const float* dSb_raw, const float* dSb, int ld) {
  for (int i = 0; i < rows; ++i) {
    float raw = 0.0f, used = 0.0f, ps = 0.0f;
    for (int j = 0; j < cols; ++j) {
      raw += dSb_raw[i * ld + j];
      used += dSb[i * ld + j];
      ps += Pb[i * ld + j];
    }
    r_raw_[i0 + i] += raw;
    r_[i0 + i] += used;
    if (!fwd_stats_) s_[i0 + i] += ps;
    if (!top_p_.empty()) {
      float* tr = &top_rank_[(i0 + i) * k_];
      float* tp = &top_p_[(i0 + i) * k_];
      int64_t* tj = &top_j_[(i0 + i) * k_];
      const float admit = kind_ == Projection::kThreshLowRank ? 1.0f / static_cast<float>(k_) : 0.0f;
      for (int j = 0; j < cols; ++j) {
        const float p = P[i * ld + j];
        const float pb = Pb[i * ld + j];
        if (kind_ == Projection::kThreshLowRank ? !(pb >= admit) : !(pb > 0.0f)) continue;
        if (!(p > tr[k_ - 1])) continue;  // descending; ties keep the earlier key
        int t = k_ - 1;
        for (; t > 0 && p > tr[t - 1]; --t) tr[t] = tr[t - 1], tp[t] = tp[t - 1], tj[t] = tj[t - 1];
        tr[t] = p;
        tp[t] = Pb[i * ld + j];
        tj[t] = j0 + j;
      }
    }
  }
  const int D = h_.D;
  if (!pk_.empty()) gemm_.nn(rows, D, cols, Pb, ld, h_.K + j0 * D, D, pk_.data() + i0 * D, D, true);
  if (!pku_.empty() && !fwd_stats_) gemm_.nn(rows, rank_, cols, Pb, ld, KU_.data() + j0 * rank_, rank_, pku_.data() + i0 * rank_,
                              rank_, true);
}

void RowProjection::use_forward_stats(const FlashParams& params, float scale) {
  if (kind_ != Projection::kThreshLowRank && kind_ != Projection::kFp16LowRank) {
    throw Error(ErrorCode::kInvalidArgument, "forward statistics serve projections thresh-lowrank and fp16-lowrank");
  }
  const int x_cols = rank_ + 1, Bq = params.block_q;
  std::vector<float> X(static_cast<size_t>(h_.Nk) * x_cols, 1.0f);  // [bf16(K U) | 1] (fp16-lowrank: fp16(K U))
  for (int64_t j = 0; j < h_.Nk; ++j)
    for (int c = 0; c < rank_; ++c) X[j * x_cols + c] = KU_[j * rank_ + c];
  std::vector<float> acc(static_cast<size_t>(Bq) * x_cols), m(Bq), l(Bq), S;
  for (int64_t i0 = 0; i0 < h_.Nq; i0 += Bq) {
    const int rows = static_cast<int>(std::min<int64_t>(Bq, h_.Nq - i0));
    forward_query_block(gemm_, params, scale, h_.Q + i0 * h_.D, rows, i0, h_.Nq, h_.Nk, h_.D, h_.K, X.data(), x_cols,
                        acc.data(), m.data(), l.data(), S);
    for (int i = 0; i < rows; ++i) {
      const bool empty = m[i] == -std::numeric_limits<float>::infinity();  // as the forward: a zero record
      for (int c = 0; c < rank_; ++c) pku_[(i0 + i) * rank_ + c] = empty ? 0.0f : acc[i * x_cols + c] / l[i];
      s_[i0 + i] = empty ? 0.0f : acc[i * x_cols + rank_] / l[i];
    }
  }
  fwd_stats_ = true;
}

void RowProjection::dk_pweighted_tile(int64_t i0, int rows, int64_t j0, int cols, const float* Pb, int ld) {
  // W_ij = -P_ij c_i, so dKacc += W^T Q applies dS' = dS - P c on the dK side.
  std::vector<float> W(static_cast<size_t>(rows) * cols);
  for (int i = 0; i < rows; ++i) {
    const float c = s_[i0 + i] > 0.0f ? r_[i0 + i] / s_[i0 + i] : 0.0f;
    for (int j = 0; j < cols; ++j) W[i * cols + j] = -Pb[i * ld + j] * c;
  }
  gemm_.tn(cols, h_.D, rows, W.data(), cols, h_.Q + i0 * h_.D, h_.D, h_.dKacc + j0 * h_.D, h_.D, true);
}

void RowProjection::uniform_dq(const std::vector<float>& coef) {
  // dQ_i -= coef_i sum_{j in J_i} K_j; J_i is a prefix of the keys, so a running prefix sum serves all rows.
  const int D = h_.D;
  std::vector<double> prefix(static_cast<size_t>(D), 0.0);
  int64_t summed = 0;
  for (int64_t i = 0; i < h_.Nq; ++i) {
    const int64_t n = visible_count(i);
    for (; summed < n; ++summed)
      for (int e = 0; e < D; ++e) prefix[e] += h_.K[summed * D + e];
    if (n == 0) continue;
    for (int e = 0; e < D; ++e) h_.dQacc[i * D + e] -= static_cast<float>(coef[i] * prefix[e]);
  }
}

void RowProjection::uniform_dk(const std::vector<float>& coef) {
  // dK_j -= sum_{i : j in J_i} coef_i Q_i; rows that see key j form a suffix, so a suffix sum serves.
  const int D = h_.D;
  std::vector<double> suffix(static_cast<size_t>(D), 0.0);
  int64_t i = h_.Nq;
  for (int64_t j = h_.Nk - 1; j >= 0; --j) {
    while (i > 0 && visible_count(i - 1) > j) {
      --i;
      for (int e = 0; e < D; ++e) suffix[e] += double(coef[i]) * h_.Q[i * D + e];
    }
    for (int e = 0; e < D; ++e) h_.dKacc[j * D + e] -= static_cast<float>(suffix[e]);
  }
}

std::vector<float> RowProjection::uniform_coefficients() const {
  std::vector<float> coef(static_cast<size_t>(h_.Nq), 0.0f);
  for (int64_t i = 0; i < h_.Nq; ++i) {
    const int64_t n = visible_count(i);
    if (n > 0) coef[i] = r_[i] / static_cast<float>(n);
  }
  return coef;
}

void RowProjection::topk_lowrank_finish() {
  // dQ: c_i (sum_top P_ij K_j + [P.(K U) - sum_top P_ij (K U)_j]_i U^T), the tail of the row through rank r.
  // dK: c_i P_ij on the top k, the rest of the row's mass c_i (s_i - sum_top P) spread uniformly.
  const int D = h_.D;
  std::vector<float> rest_coef(static_cast<size_t>(h_.Nq), 0.0f), tail(static_cast<size_t>(rank_));
  for (int64_t i = 0; i < h_.Nq; ++i) {
    const float* tp = &top_p_[i * k_];
    const int64_t* tj = &top_j_[i * k_];
    if (!(s_[i] > 0.0f)) continue;
    int count = 0;
    float mass = 0.0f;
    for (; count < k_ && tj[count] >= 0; ++count) mass += tp[count];
    const int64_t n_rest = visible_count(i) - count;
    // With the forward's statistics, a row whose visible keys are all listed takes its listed mass as s_i, so that
    // its dS' sums to zero exactly (docs/gproj-forward-stats.md); with the backward's the two are the same sum.
    const float s = fwd_stats_ && n_rest <= 0 ? mass : s_[i];
    if (!(s > 0.0f)) continue;
    const float c = r_[i] / s;
    if (n_rest > 0) rest_coef[i] = c * (s - mass) / static_cast<float>(n_rest);
    for (int t = 0; t < rank_; ++t) tail[t] = pku_[i * rank_ + t];
    float removed = rest_coef[i] * static_cast<float>(n_rest);
    for (int t = 0; t < count; ++t) {
      const float w = c * tp[t];
      removed += w;
      for (int e = 0; e < D; ++e) {
        h_.dQacc[i * D + e] -= w * h_.K[tj[t] * D + e];
        h_.dKacc[tj[t] * D + e] -= (w - rest_coef[i]) * h_.Q[i * D + e];
      }
      for (int u = 0; u < rank_; ++u) tail[u] -= tp[t] * KU_[tj[t] * rank_ + u];
    }
    for (int e = 0; e < D; ++e) {
      float back = 0.0f;
      for (int u = 0; u < rank_; ++u) back += tail[u] * U_[e * rank_ + u];
      h_.dQacc[i * D + e] -= c * back;
    }
    r_after_[i] = r_[i] - removed;  // the dK side's effective row sum (the dQ side's tail is rank r)
  }
  uniform_dk(rest_coef);
}

void RowProjection::topk_finish(bool spread_rest) {
  // Weights w_ij = bf16(P_ij) / s_i on the k largest entries of row i. Without spread_rest the k entries
  // take all of r_i (mass renormalised to the top k); with it they take c_i P_ij (c_i = r_i / s_i) and the
  // rest of the row's P mass, s_i - sum_top P, is spread uniformly over the other visible keys.
  const int D = h_.D;
  std::vector<float> rest_coef(static_cast<size_t>(h_.Nq), 0.0f);
  for (int64_t i = 0; i < h_.Nq; ++i) {
    const float* tp = &top_p_[i * k_];
    const int64_t* tj = &top_j_[i * k_];
    int count = 0;
    float mass = 0.0f;
    for (; count < k_ && tj[count] >= 0; ++count) mass += tp[count];
    if (!(mass > 0.0f)) continue;
    const int64_t n_rest = visible_count(i) - count;
    const float rest = s_[i] - mass;
    const bool spread = spread_rest && n_rest > 0 && rest > 0.0f;
    const float c = spread ? r_[i] / s_[i] : r_[i] / mass;
    if (spread) rest_coef[i] = c * rest / static_cast<float>(n_rest);
    float removed = spread ? rest_coef[i] * static_cast<float>(n_rest) : 0.0f;
    for (int t = 0; t < count; ++t) {
      // The uniform sweep below also hits the top entries; their own weight is taken net of it.
      const float w = c * tp[t] - rest_coef[i];
      removed += c * tp[t];
      for (int e = 0; e < D; ++e) {
        h_.dQacc[i * D + e] -= w * h_.K[tj[t] * D + e];
        h_.dKacc[tj[t] * D + e] -= w * h_.Q[i * D + e];
      }
    }
    r_after_[i] = r_[i] - removed;
  }
  if (spread_rest) {
    uniform_dq(rest_coef);
    uniform_dk(rest_coef);
  }
}

void RowProjection::finish() {
  const int D = h_.D;
  r_after_ = r_;
  switch (kind_) {
    case Projection::kNone:
    case Projection::kDelta:
    case Projection::kInTile:
      return;  // no output correction; row sums after = those the GEMMs used
    case Projection::kUniform: {
      const std::vector<float> coef = uniform_coefficients();
      uniform_dq(coef);
      uniform_dk(coef);
      for (int64_t i = 0; i < h_.Nq; ++i) {
        const int64_t n = visible_count(i);
        if (n > 0) r_after_[i] = r_[i] - static_cast<float>(n) * (r_[i] / static_cast<float>(n));
      }
      return;
    }
    case Projection::kPWeighted:
    case Projection::kPWeightedDq:
    case Projection::kLowRank:
    case Projection::kFp16LowRank:  // P (K U) and s_i from the forward; dK left as it is (with the consistent P its
                                    // error is dS's FP16 rounding, not the queries' shared component)
      for (int64_t i = 0; i < h_.Nq; ++i) {
        if (!(s_[i] > 0.0f)) continue;
        const float c = r_[i] / s_[i];
        if (kind_ == Projection::kLowRank || kind_ == Projection::kFp16LowRank) {
          for (int e = 0; e < D; ++e) {
            float back = 0.0f;  // (P K U)_i U^T
            for (int t = 0; t < rank_; ++t) back += pku_[i * rank_ + t] * U_[e * rank_ + t];
            h_.dQacc[i * D + e] -= c * back;
          }
        } else {
          for (int e = 0; e < D; ++e) h_.dQacc[i * D + e] -= c * pk_[i * D + e];
        }
        r_after_[i] = r_[i] - c * s_[i];
      }
      if (kind_ == Projection::kPWeightedDq || kind_ == Projection::kLowRank) uniform_dk(uniform_coefficients());
      return;
    case Projection::kTopK:
    case Projection::kTopKRest:
      topk_finish(kind_ == Projection::kTopKRest);
      return;
    case Projection::kTopKLowRank:
    case Projection::kThreshLowRank:
      topk_lowrank_finish();
      return;
  }
}

DkCompensation::DkCompensation(const HeadView& head, int rank) : h_(head), rank_(std::min(rank, head.D)) {
  if (rank_ <= 0) return;
  const int D = h_.D;
  std::vector<double> V;
  top_eigenvectors(gram_matrix(h_.Q, h_.Nq, D), D, rank_, V);
  U_.assign(V.begin(), V.end());
  QU_.assign(static_cast<size_t>(h_.Nq) * rank_, 0.0f);
  for (int64_t i = 0; i < h_.Nq; ++i)
    for (int c = 0; c < rank_; ++c) {
      float x = 0.0f;
      for (int a = 0; a < D; ++a) x += h_.Q[i * D + a] * U_[a * rank_ + c];
      QU_[i * rank_ + c] = round_bf16(x);
    }
  E_.assign(static_cast<size_t>(h_.Nk) * rank_, 0.0f);
}

void DkCompensation::accumulate(int64_t i0, int rows, int64_t j0, int cols, const float* dS, const float* dSb,
                                int ld) {
  if (rank_ <= 0) return;
  for (int j = 0; j < cols; ++j) {
    float* e = &E_[(j0 + j) * rank_];
    for (int i = 0; i < rows; ++i) {
      const float eps = round_bf16(dS[i * ld + j] - dSb[i * ld + j]);
      if (eps == 0.0f) continue;
      const float* qu = &QU_[(i0 + i) * rank_];
      for (int c = 0; c < rank_; ++c) e[c] += eps * qu[c];
    }
  }
}

void DkCompensation::finish() {
  if (rank_ <= 0) return;
  const int D = h_.D;
  for (int64_t j = 0; j < h_.Nk; ++j)
    for (int a = 0; a < D; ++a) {
      float x = 0.0f;
      for (int c = 0; c < rank_; ++c) x += E_[j * rank_ + c] * U_[a * rank_ + c];
      h_.dKacc[j * D + a] += x;
    }
}

}  // namespace gproj::cpu
