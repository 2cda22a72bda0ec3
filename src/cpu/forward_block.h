// One query block of the CPU forward's key loop, shared by the forward (O = P V) and by thresh-lowrank's forward
// statistics in the backward (P [K U | 1]; docs/gproj-forward-stats.md), so that both see the same bf16(P).
// Defined in flash_forward.cc; exercised through tests/cpu/flash_forward_test.cc and tests/cpu/projection_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/tile_gemm.h"
#include "gproj/attention.h"

namespace gproj::cpu {

// Projection::kFp16LowRank's consistent P (docs/design-fp16-projection.md): S in log2 units against an integer
// running max m (ceil of the block max; fwdfix's tie rule is not applied: the ceil lifts a tied max off P^ = 1
// unless the max is an integer in log2 units), P^ = fp16(2^(S log2e - m)), l summing the rounded P^, X read as
// FP16 values (the caller converts, a power of two per head: cpu/tile_ops.h, round_fp16_head), LSE = (m + log2 l)
// ln 2. The backward reproduces P = fp16(2^(S log2e - M)) 2^(M - LSE log2e) with M = ceil(LSE log2e) >= m, the same
// P^ wherever the FP16 rounding does not meet the subnormal range.
bool consistent_p(const FlashParams& params);
float row_lse(const FlashParams& params, float m, float l);  // -inf where m = -inf (no visible key)

// Rows i0 .. i0 + rows - 1 (Qt: rows x D, FP32 of the BF16 inputs) over their visible keys in blocks of
// params.block_k: S = scale Q K^T (causal mask bottom-right), the running max (fwdfix's tie rule for variants
// fwdfix and gproj; the consistent P above for fp16-lowrank), P = exp(S - m) rounded to BF16 (F4, except the
// fp32 variant), l += the FP32 row sums, and acc = alpha acc + bf16(P) X. Sets acc (rows x Dx, leading dimension
// Dx), m and l (rows); m = -inf marks a row with no visible key. K: (Nk, D), X: (Nk, Dx), both row-major. S is scratch.
void forward_query_block(const TileGemm& gemm, const FlashParams& params, float scale, const float* Qt, int rows,
                         int64_t i0, int64_t Nq, int64_t Nk, int D, const float* K, const float* X, int Dx, float* acc,
                         float* m, float* l, std::vector<float>& S);

}  // namespace gproj::cpu
