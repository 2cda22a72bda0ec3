// Tile products of the CPU emulator: row-major FP32 operands holding BF16 values, FP32 accumulation.
// The accumulation model is pluggable (gproj::Accumulation); exercised by every tests/cpu test.
#pragma once

#include "gproj/attention.h"

namespace gproj::cpu {

// Each product: C (M, N) = [C +] op(A) op(B), with leading dimensions in elements. The operands hold values
// that are exact in BF16 (or FP32 for the fp32 variant); products of two BF16 values are exact in FP32, so an
// FP32 GEMM with IEEE round-to-nearest accumulation is the ieee_fp32 model of a BF16 tensor-core GEMM.
class TileGemm {
 public:
  explicit TileGemm(Accumulation model) : model_(model) {}

  // C (M, N) = A (M, K) . B (N, K)^T
  void nt(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
          bool accumulate) const;
  // C (M, N) = A (M, K) . B (K, N)
  void nn(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
          bool accumulate) const;
  // C (M, N) = A (K, M)^T . B (K, N)
  void tn(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
          bool accumulate) const;

 private:
  Accumulation model_;
};

// BLAS must run single-threaded inside our own parallel loops; call once before using TileGemm.
void init_blas_threads();

}  // namespace gproj::cpu
