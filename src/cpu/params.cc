// Names and validation of FlashParams: variant and projection names, the softmax scale, block sizes, beta.
// Exercised by tests/cpu/flash_forward_test.cc (bad-argument cases) and the CLI's --variants parsing.
#include <cmath>
#include <string>

#include "gproj/attention.h"
#include "gproj/error.h"

namespace gproj {

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kFp32: return "fp32";
    case Variant::kBaseline: return "baseline";
    case Variant::kFwdfix: return "fwdfix";
    case Variant::kGproj: return "gproj";
  }
  return "?";
}

const char* projection_name(Projection p) {
  switch (p) {
    case Projection::kNone: return "none";
    case Projection::kUniform: return "uniform";
    case Projection::kPWeighted: return "pweighted";
    case Projection::kPWeightedDq: return "pweighted-dq";
    case Projection::kLowRank: return "lowrank";
    case Projection::kTopK: return "topk";
    case Projection::kTopKRest: return "topk-rest";
    case Projection::kTopKLowRank: return "topk-lowrank";
    case Projection::kThreshLowRank: return "thresh-lowrank";
    case Projection::kDelta: return "delta";
    case Projection::kInTile: return "intile";
    case Projection::kFp16LowRank: return "fp16-lowrank";
  }
  return "?";
}

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> v{Variant::kFp32, Variant::kBaseline, Variant::kFwdfix, Variant::kGproj};
  return v;
}

const std::vector<Projection>& all_projections() {
  static const std::vector<Projection> p{Projection::kNone,    Projection::kUniform,     Projection::kPWeighted,
                                         Projection::kPWeightedDq, Projection::kLowRank, Projection::kTopK, Projection::kTopKRest, Projection::kTopKLowRank,
                                         Projection::kThreshLowRank,
                                         Projection::kDelta,   Projection::kInTile,
                                         Projection::kFp16LowRank};
  return p;
}

namespace {

template <class E, class NameOf>
E parse_name(const std::string& name, const std::vector<E>& all, NameOf name_of, const char* what) {
  std::string valid;
  for (E e : all) {
    if (name == name_of(e)) return e;
    valid += (valid.empty() ? "" : ", ") + std::string(name_of(e));
  }
  throw Error(ErrorCode::kInvalidArgument, "unknown " + std::string(what) + " '" + name + "' (valid: " + valid + ")");
}

}  // namespace

Variant parse_variant(const std::string& name) { return parse_name(name, all_variants(), variant_name, "variant"); }

Projection parse_projection(const std::string& name) {
  return parse_name(name, all_projections(), projection_name, "projection");
}

Projection effective_projection(const FlashParams& p) {
  return p.variant == Variant::kGproj ? p.projection : Projection::kNone;
}

bool backward_needs_o_fp32(const FlashParams& p) {
  const Projection proj = effective_projection(p);
  return p.variant == Variant::kFp32 || proj == Projection::kDelta || proj == Projection::kFp16LowRank;
}

std::string cuda_deterministic_refusal(const FlashParams& p) {
  switch (effective_projection(p)) {
    case Projection::kThreshLowRank:
      return "deterministic mode implements the pweighted projection only (thresh-lowrank adds its dK corrections "
             "with atomics): choose projection pweighted";
    case Projection::kFp16LowRank:
      return "deterministic mode implements the pweighted projection only (fp16-lowrank, the default, sends its dQ "
             "tiles by atomic reduce-adds): choose projection pweighted";
    default:
      return "";
  }
}

float resolve_scale(const FlashParams& p, int64_t D) {
  if (p.block_q < 1 || p.block_k < 1) {
    throw Error(ErrorCode::kInvalidArgument, "block sizes must be >= 1, got block_q = " + std::to_string(p.block_q) +
                                                 ", block_k = " + std::to_string(p.block_k));
  }
  if (!(p.fwdfix_beta >= 1.0f && p.fwdfix_beta <= 64.0f)) {
    throw Error(ErrorCode::kInvalidArgument, "fwdfix beta must lie in [1, 64], got " + std::to_string(p.fwdfix_beta));
  }
  if (!(p.fwdfix_max_shift > 0.0f)) {
    throw Error(ErrorCode::kInvalidArgument,
                "fwdfix max shift must be > 0 (inf: uncapped), got " + std::to_string(p.fwdfix_max_shift));
  }
  if (!(p.fwdfix_tie_tol >= 0.0f) || !std::isfinite(p.fwdfix_tie_tol)) {
    throw Error(ErrorCode::kInvalidArgument, "fwdfix tie tolerance must be finite and >= 0");
  }
  if (p.cuda_backward_warps != 4 && p.cuda_backward_warps != 8) {
    throw Error(ErrorCode::kInvalidArgument,
                "cuda_backward_warps must be 4 or 8, got " + std::to_string(p.cuda_backward_warps));
  }
  if (p.thresh_k < 1 || p.thresh_k > 64) {
    throw Error(ErrorCode::kInvalidArgument, "thresh-lowrank needs 1 <= thresh_k <= 64, got " + std::to_string(p.thresh_k));
  }
  if (p.topk < 1 || p.topk > 64) {
    throw Error(ErrorCode::kInvalidArgument, "top-k projection needs 1 <= k <= 64, got " + std::to_string(p.topk));
  }
  if (p.dk_compensation_rank < 0 || p.dk_compensation_rank > D) {
    throw Error(ErrorCode::kInvalidArgument, "dk_compensation_rank must lie in [0, D = " + std::to_string(D) +
                                                 "], got " + std::to_string(p.dk_compensation_rank));
  }
  if (p.basis_key_stride < 1) {
    throw Error(ErrorCode::kInvalidArgument, "basis_key_stride must be >= 1, got " + std::to_string(p.basis_key_stride));
  }
  if (p.lowrank_rank < 1) {
    throw Error(ErrorCode::kInvalidArgument, "low-rank projection rank must be >= 1, got " +
                                                 std::to_string(p.lowrank_rank));
  }
  if (!p.softmax_scale) return 1.0f / std::sqrt(static_cast<float>(D));
  const float s = *p.softmax_scale;
  if (!std::isfinite(s) || !(s > 0.0f)) {
    throw Error(ErrorCode::kInvalidArgument, "softmax_scale must be finite and > 0, got " + std::to_string(s));
  }
  return s;
}

}  // namespace gproj
