// IEEE-FP32 accumulation model of the tile products, through OpenBLAS sgemm (single-threaded per call).
// Exercised by every tests/cpu test; the benchmark bench/cpu_attention_bench.cc measures its speed.
#include "cpu/tile_gemm.h"

#include <cblas.h>

#include <mutex>

namespace gproj::cpu {

void init_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void TileGemm::nt(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                  bool accumulate) const {
  switch (model_) {
    case Accumulation::kIeeeFp32:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, lda, B, ldb, accumulate ? 1.0f : 0.0f,
                  C, ldc);
      return;
  }
}

void TileGemm::nn(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                  bool accumulate) const {
  switch (model_) {
    case Accumulation::kIeeeFp32:
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb,
                  accumulate ? 1.0f : 0.0f, C, ldc);
      return;
  }
}

void TileGemm::tn(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                  bool accumulate) const {
  switch (model_) {
    case Accumulation::kIeeeFp32:
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, accumulate ? 1.0f : 0.0f,
                  C, ldc);
      return;
  }
}

}  // namespace gproj::cpu
