// The dS row-residual projections of GProj on one (b, h) head of the CPU backward: row statistics gathered
// tile by tile, then FP32 rank-1 style corrections of the dQ and dK accumulators. Exercised by
// tests/cpu/projection_test.cc and compared in docs/gproj-projection.md.
#pragma once

#include <vector>

#include "cpu/tile_gemm.h"
#include "gproj/attention.h"

namespace gproj::cpu {

// One head's FP32 operands and accumulators, all contiguous row-major.
struct HeadView {
  int64_t Nq = 0, Nk = 0;
  int D = 0;
  bool causal = false;
  const float* Q = nullptr;  // (Nq, D)
  const float* K = nullptr;  // (Nk, D)
  float* dQacc = nullptr;    // (Nq, D), dS.K before the softmax scale
  float* dKacc = nullptr;    // (Nk, D), dS^T.Q before the softmax scale
};

class RowProjection {
 public:
  // basis_key_stride (FlashParams): the GPU-form basis from the Gram matrix of every s-th block of 64 keys.
  RowProjection(Projection kind, const HeadView& head, int lowrank_rank, int topk, const TileGemm& gemm,
                int basis_key_stride = 1);

  // For Projection::kInTile: rewrites the BF16 tile dSb (rows, cols; leading dim ld) so that each row's BF16
  // sum matches its FP32 sum, the difference re-rounded onto the entry of largest P. No-op otherwise.
  void compensate_tile(int rows, int cols, const float* P, const float* dS, float* dSb, int ld) const;

  // Gathers the statistics of one tile: P in FP32 (the top-k ranking), Pb = bf16(P) (every weight),
  // dSb = the BF16 dS the GEMMs used.
  void accumulate(int64_t i0, int rows, int64_t j0, int cols, const float* P, const float* Pb,
                  const float* dSb_raw, const float* dSb, int ld);

  // thresh-lowrank with FlashParams::forward_stats: P (K U) and s_i from the forward's bf16(P), the forward's key
  // loop run again over X = [K U | 1] (cpu/forward_block.h), as the CUDA forward (v2.3) forms them beside O.
  // fp16-lowrank always takes them so, from the forward's FP16 P^ against fp16(K U).
  // accumulate() then adds only r_i and the lists. Call once, before the first accumulate().
  void use_forward_stats(const FlashParams& params, float scale);

  // Does Projection::kPWeighted need a second sweep over the P tiles for dK? (see dk_pweighted_tile)
  bool needs_p_sweep() const { return kind_ == Projection::kPWeighted; }
  // Second sweep: dKacc[j0:j0+cols] -= (Pb * c)^T Q[i0:i0+rows], c_i = r_i / s_i.
  void dk_pweighted_tile(int64_t i0, int rows, int64_t j0, int cols, const float* Pb, int ld);

  // Applies the dQ (and, except for the P-weighted dK sweep, dK) corrections; fills row sums after.
  void finish();

  const std::vector<float>& rowsum_before() const { return r_raw_; }
  const std::vector<float>& rowsum_after() const { return r_after_; }

 private:
  int64_t visible_count(int64_t i) const;  // n_i = |J_i|
  std::vector<float> uniform_coefficients() const;  // r_i / n_i
  void uniform_dq(const std::vector<float>& coef);   // dQ_i -= coef_i sum_{j in J_i} K_j
  void uniform_dk(const std::vector<float>& coef);   // dK_j -= sum_{i : j in J_i} coef_i Q_i
  void topk_finish(bool spread_rest);
  void topk_lowrank_finish();

  Projection kind_;
  HeadView h_;
  int rank_;
  const TileGemm& gemm_;
  std::vector<float> r_raw_;    // sum_j bf16(dS)_ij before any compensation
  std::vector<float> r_;        // sum_j of the dS the GEMMs used
  std::vector<float> s_;        // sum_j bf16(P)_ij
  std::vector<float> r_after_;  // row sums of the effective dS'
  std::vector<float> pk_;       // (Nq, D) sum_j bf16(P)_ij K_j        (P-weighted)
  std::vector<float> U_;        // (D, rank) top right singular vectors of K (low rank)
  std::vector<float> KU_;       // (Nk, rank)
  std::vector<float> pku_;      // (Nq, rank) sum_j bf16(P)_ij (K U)_j  (low rank)
  bool fwd_stats_ = false;      // pku_ and s_ came from use_forward_stats()
  int k_;                       // top-k: entries kept per row
  // top-k: the k keys of largest FP32 P of each row (= largest S, so a forward pass can find them on the GPU),
  // ties to the earlier key; their weights are bf16(P).
  std::vector<float> top_rank_; // (Nq, k) their FP32 P, descending
  std::vector<float> top_p_;    // (Nq, k) their bf16(P)
  std::vector<int64_t> top_j_;  // (Nq, k) their key indices (-1: empty slot)
};

// dK's BF16 rounding compensated through a rank-r basis of the queries (FlashParams::dk_compensation_rank;
// docs/gproj-projection.md, "dK compensation"). Rounding dS to BF16 leaves eps_ij = dS_ij - bf16(dS_ij) out of
// dK_j = sum_i dS_ij Q_i; when the queries share a component, the column sums of eps carry it into dK, as the row
// sums carry the keys' shared component into dQ. Per tile: E_j += sum_i bf16(eps_ij) bf16(Q_i U) (FP32); at the
// end dK_j += E_j U^T, U the top-r eigenvectors of Q^T Q (the subspace iteration used for K's basis).
class DkCompensation {
 public:
  DkCompensation(const HeadView& head, int rank);  // rank 0: inactive, every call a no-op
  bool active() const { return rank_ > 0; }
  // dS in FP32 and dSb = bf16(dS) of one tile (rows, cols; leading dim ld).
  void accumulate(int64_t i0, int rows, int64_t j0, int cols, const float* dS, const float* dSb, int ld);
  void finish();  // dKacc += E U^T

 private:
  HeadView h_;
  int rank_;
  std::vector<float> U_;   // (D, rank)
  std::vector<float> QU_;  // (Nq, rank), rounded to BF16 (a tensor-core operand on a GPU)
  std::vector<float> E_;   // (Nk, rank)
};

}  // namespace gproj::cpu
