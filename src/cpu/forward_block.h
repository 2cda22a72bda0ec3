// One query block of the CPU forward's key loop, shared by the forward (O = P V) and by thresh-lowrank's forward
// statistics in the backward (P [K U | 1]; docs/gproj-forward-stats.md), so that both see the same bf16(P).
// Defined in flash_forward.cc; exercised through tests/cpu/flash_forward_test.cc and tests/cpu/projection_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/tile_gemm.h"
#include "gproj/attention.h"

namespace gproj::cpu {

// Rows i0 .. i0 + rows - 1 (Qt: rows x D, FP32 of the BF16 inputs) over their visible keys in blocks of
// params.block_k: S = scale Q K^T (causal mask bottom-right), the running max (fwdfix's tie rule for variants
// fwdfix and gproj), P = exp(S - m) rounded to BF16 (F4, except the fp32 variant), l += the FP32 row sums, and
// acc = alpha acc + bf16(P) X. Sets acc (rows x Dx, leading dimension Dx), m and l (rows); m = -inf marks a row
// with no visible key. K: (Nk, D), X: (Nk, Dx), both row-major. S is scratch.
void forward_query_block(const TileGemm& gemm, const FlashParams& params, float scale, const float* Qt, int rows,
                         int64_t i0, int64_t Nq, int64_t Nk, int D, const float* K, const float* X, int Dx, float* acc,
                         float* m, float* l, std::vector<float>& S);

}  // namespace gproj::cpu
