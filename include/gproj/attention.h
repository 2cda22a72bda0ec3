// Public, torch-free API of the numerics core: variants, parameters, and the CPU FlashAttention emulator.
// Exercised by tests/cpu/flash_*_test.cc against the float64 oracle of gproj/oracle.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gproj/tensor.h"

namespace gproj {

// Where BF16 rounding happens (GUIDE §2) and which fixes apply.
enum class Variant {
  kFp32,      // BF16 only at inputs and final outputs; the reference a kernel should approach
  kBaseline,  // FA2/FA3 today: F4, F5, B1, B4 rounding points
  kFwdfix,    // baseline + tie-aware running max (Qiu & Yao, Algorithm 1)
  kGproj,     // fwdfix + a zero-row-sum projection of bf16(dS) (kind chosen by `projection`)
};

// How the row residual r_i = sum_j bf16(dS)_ij is removed (docs/gproj-projection.md compares them).
enum class Projection {
  kNone,          // no correction (fwdfix behaviour in the backward)
  kUniform,       // dS' = bf16(dS) - (r_i/n_i) 1_{J_i}, on dQ and dK
  kPWeighted,     // dS' = bf16(dS) - P_ij r_i / s_i, on dQ and dK (the exact P-weighted form)
  kPWeightedDq,   // P-weighted on dQ, uniform on dK (no second pass over P for dK)
  kLowRank,       // P-weighted on dQ with P.(K U) U^T, U = top-r right singular vectors of K; uniform on dK
  kTopK,          // P-weighted over each row's k largest P only (sparse: gathers/scatters), on dQ and dK
  kTopKRest,      // P-weighted on the k largest P; the rest of the row's P mass spread uniformly (prefix sums)
  kTopKLowRank,   // dQ: top k exact + the tail through P.(K U) U^T (rank r); dK: as kTopKRest
  kThreshLowRank, // as kTopKLowRank over the entries with bf16(P) >= 1/k, k = thresh_k (never more than k):
                  // no ranking, a test a backward kernel applies tile by tile
  kDelta,         // no projection; delta_i from the FP32 O (forward keeps O's low-order residual)
  kInTile,        // per tile, each row's rounding residual folded back onto its largest-P entry (re-rounded)
  kFp16LowRank,   // "h16" (docs/design-fp16-projection.md): the consistent P (forward P^ rounded to FP16 against an
                  // integer running max, l sums the rounded P^, the backward reproduces P from the LSE, delta from
                  // an FP16 O), dS rounded once to FP16 after a power of two per head and multiplied against FP16 Q,
                  // K, and the P-weighted low-rank projection on dQ only, P (K U) and s_i from the forward; no
                  // lists, no dK correction. CPU only (CUDA: not built)
};

// Model of the FP32 accumulation inside a BF16 GEMM. Only IEEE FP32 exists today; a tensor-core
// accumulation model (block-aligned truncating adds) is meant to slot in here.
enum class Accumulation { kIeeeFp32 };

struct FlashParams {
  Variant variant = Variant::kGproj;
  bool causal = false;
  std::optional<float> softmax_scale;  // default 1/sqrt(D); must be finite and > 0
  int block_q = 64;                    // query rows per tile
  int block_k = 64;                    // key rows per tile
  float fwdfix_beta = 2.0f;            // m' = beta * r_m when a block's max r_m > 0 is tied
  float fwdfix_tie_tol = 0.0f;         // entries with S >= r_m - tol count as tied (0: exact ties)
  float fwdfix_max_shift = 16.0f;      // the lift m' - r_m is capped here (inf: the published rule, whose tied
                                       // entries exp(-(beta-1) r_m) underflow to O = NaN once r_m > ~87)
  // Used by Variant::kGproj only. The default, fp16-lowrank, is the form chosen in docs/gproj-projection.md ("The
  // switch to fp16-lowrank"; thresh-lowrank before); the CUDA deterministic mode and rows that are not 16-byte aligned
  // (the v0 kernels) implement pweighted only and say so.
  Projection projection = Projection::kFp16LowRank;
  int lowrank_rank = 6;                // r of the low-rank projections' tail (kLowRank, kTopKLowRank,
                                       // kThreshLowRank; CUDA: 6, docs/gproj-projection.md)
  int topk = 8;                        // k of Projection::kTopK (k = 1: the whole residual onto the argmax key)
  int thresh_k = 16;                   // Projection::kThreshLowRank: entries with bf16(P) >= 1/k, at most k a row
  int basis_key_stride = 4;            // the low-rank tail's basis (kTopKLowRank, kThreshLowRank) from the Gram
                                       // matrix of every s-th block of 64 keys (block 0 always in), CPU and CUDA;
                                       // 4 since session 13 (1 before: all keys), docs/gproj-projection.md
  bool forward_stats = false;          // Projection::kThreshLowRank, opt-in: P (K U) and s_i from the forward's
                                       // bf16(P) (the CUDA forward v2.3 forms them beside O, the backward v3.9
                                       // only r_i; docs/gproj-forward-stats.md). CUDA: where
                                       // cuda::forward_stats_apply (v2.2 forward, v3.1 / v3.2 backward), else
                                       // the backward's own. false: from the backward's bf16(P)
  bool basis_from_forward = false;     // Projection::kThreshLowRank, CUDA: K's basis U formed by the forward (as
                                       // the PyTorch op does: cuda::Problem::forward_basis, beside the forward
                                       // kernel; docs/gproj-forward-basis.md) where cuda::forward_basis_apply, else
                                       // the backward's own. The same U either way; the CPU has one form
  bool fp16_dout_side = false;         // Projection::kFp16LowRank (experimental, CPU and CUDA): 1 / l_i
                                       // on dO's side (docs/design-fp16-projection.md, "1/l on dO's side"): dP
                                       // from fp16(dO_i / l_i s_do) and the FP16 V, dS from fp16(P^) without 1 / l,
                                       // dV = fp16(P^)^T fp16(dO / l); delta from the same FP16 dO
  int dk_compensation_rank = 0;        // Variant::kGproj (experimental, off by default): dK gets back the BF16
                                       // rounding error of dS through the top-r eigenvectors of Q^T Q,
                                       // dK_j += sum_i bf16(dS_ij - bf16(dS_ij)) bf16(Q_i U) U^T
                                       // (docs/gproj-projection.md, "dK compensation"); 0 = off. CPU: any r;
                                       // CUDA: r = 8 with thresh-lowrank on the v3.1 backward at D = 64
  Accumulation accumulation = Accumulation::kIeeeFp32;
  bool allow_nonfinite = false;        // NaN/Inf inputs are an error unless the caller opts in
  int cuda_wgmma_forward = -1;         // CUDA forward: -1 = auto (v2.2, wgmma + TMA, flash_fwd_wg.cuh, for
                                       // baseline, fwdfix and gproj with 16-byte aligned rows; else the v1
                                       // mma.sync kernel, which the fp32 variant and other rows always take),
                                       // 0 = v1, 1 = v2.1 (cp.async), 2 = v2.2
  int cuda_backward_warps = 4;         // CUDA, experimental: 8 = the wide backward (128 keys per CTA) for the
                                       // variants without a projection; 4 = the default kernel
  int cuda_backward_wgmma = -1;        // CUDA backward main kernel: -1 = auto (where a wgmma kernel applies:
                                       // baseline, fwdfix, gproj with thresh-lowrank; aligned rows; not
                                       // deterministic: v3.2 at D = 128, v3.1 at D = 64; else the v1 kernels),
                                       // 0 = the v1 mma.sync kernels, 1 = v3.0 (wgmma, experimental), 2 = v3.1
                                       // (wgmma + TMA, flash_bwd_wg.cuh), 3 = v3.2 (v3.1 with dQ's columns split
                                       // between the warpgroups at D = 128; v3.1 itself at D = 64), 4 = v3.3
                                       // (experimental, D = 128: v3.2 with 16-byte dQ atomics); an explicit
                                       // version is refused, not rerouted, where it does not apply
  bool deterministic = false;          // CUDA: dQ and row statistics without atomics (same bits every run;
                                       // slower: a query-major dQ pass recomputes S and dP). The CPU always is.
};

const char* variant_name(Variant v);
const char* projection_name(Projection p);
Variant parse_variant(const std::string& name);        // throws kInvalidArgument listing the valid names
Projection parse_projection(const std::string& name);  // idem
const std::vector<Variant>& all_variants();
const std::vector<Projection>& all_projections();
// The projection a variant actually applies (kNone unless the variant is kGproj).
Projection effective_projection(const FlashParams& p);
// Whether the backward reads the forward's unrounded O (o_fp32): the fp32 variant and Projection::kDelta
// compute delta from it, Projection::kFp16LowRank from its FP16 rounding (the copy a kernel would keep); every
// other variant uses the BF16 O and may pass a null view.
bool backward_needs_o_fp32(const FlashParams& p);
// Why the CUDA backward has no deterministic form (FlashParams::deterministic) for these parameters, as a sentence
// naming the way out; empty where it has one: variants fp32, baseline, fwdfix, and gproj with projection pweighted.
// thresh-lowrank adds its dK corrections with atomics; fp16-lowrank's dQ tiles arrive by bulk reduce-adds. The CUDA
// launch refuses deterministic mode with this message, and the PyTorch op asks before its forward runs.
std::string cuda_deterministic_refusal(const FlashParams& p);
// Throws kInvalidArgument for block sizes < 1, beta outside [1, 64], rank < 1, scale <= 0 or non-finite.
float resolve_scale(const FlashParams& p, int64_t D);

struct ForwardResult {
  Tensor<bf16> o;        // (B, Nq, H, D), F5 rounding
  Tensor<float> o_fp32;  // (B, Nq, H, D), acc / l before F5: the residual Projection::kDelta keeps
  Tensor<float> lse;     // (B, H, Nq), m + log(l); -inf for rows with no visible key
  std::string kernels;   // CUDA: the kernels that ran (cuda::Status::kernels); CPU: "cpu emulator"
};

struct BackwardDiagnostics {
  double rowsum_max_before = 0;  // max_i |sum_j bf16(dS)_ij| (FP32 sums, dS units, before the scale)
  double rowsum_max_after = 0;   // the same for the effective dS' after the projection
  double dk_colsum_ratio = 0;    // ||sum_j dK_j|| / ||dK|| of the final BF16 dK (0 in exact arithmetic)
};

struct BackwardResult {
  Tensor<bf16> dq;           // (B, Nq, H, D)
  Tensor<bf16> dk;           // (B, Nk, Hkv, D)
  Tensor<bf16> dv;           // (B, Nk, Hkv, D)
  Tensor<float> delta;       // (B, H, Nq): B1, the delta the main loop used
  Tensor<float> dq_fp32;     // (B, Nq, H, D): scale * dQ accumulator (after projection), before rounding
  Tensor<float> rowsum;      // (B, H, Nq): r_i before projection
  Tensor<float> rowsum_after;  // (B, H, Nq): row sums of the effective dS'
  BackwardDiagnostics diag;
  std::string kernels;       // CUDA: the kernels that ran (cuda::Status::kernels); CPU: "cpu emulator"
};

// Forward. q: (B, Nq, H, D), k, v: (B, Nk, Hkv, D).
ForwardResult flash_forward_cpu(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params);

// Backward. o: the forward's BF16 output (B, Nq, H, D); o_fp32: its unrounded value (required by
// Variant::kFp32 and Projection::kDelta, ignored otherwise; pass a null view when absent);
// lse: (B, H, Nq) from the forward; dout: (B, Nq, H, D).
BackwardResult flash_backward_cpu(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params);

}  // namespace gproj
