// Tensor-core building blocks of the v1 kernels (sm_80+ instructions, run on sm_90): cp.async copies,
// ldmatrix, mma.sync m16n8k16 BF16 -> FP32, and an XOR-swizzled shared-memory tile layout.
// Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4 g + t; A (16x16, row) holds rows g, g+8 and columns
// 2t, 2t+1, 2t+8, 2t+9; B (16x8, col) holds k = 2t, 2t+1, 2t+8, 2t+9 of column g; C (16x8) holds rows g, g+8 and
// columns 2t, 2t+1. Exercised by tests/cuda/flash_cuda_test.cc through the kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace gproj::cuda::detail {

using bf16_t = __nv_bfloat16;

// Element offset of (row, 16-byte chunk) in a [rows][kCols] BF16 tile whose chunks are XOR-swizzled by row, so
// the 8 rows an ldmatrix reads (same chunk) land in 8 different bank groups.
template <int kCols>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * kCols + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; when !pred the destination is zero-filled and nothing is read.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(pred ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b, BF16 operands, FP32 accumulation.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stores four 8x8 BF16 matrices held in the mma fragment layout (lane l: row l / 4, columns 2 (l % 4) + 0, 1 of
// each), transposed: lanes 8 i .. 8 i + 7 give the addresses of the 16-byte rows of matrix i in memory, whose row
// c receives the fragment's column c.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// Two floats rounded to BF16 (RNE) in one register; `lo` is the lower column.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two floats rounded to FP16 (RNE, IEEE subnormals) in one register; `lo` is the lower column (fp16-lowrank's P^).
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

// Loads rows [n0, n0 + count) of a strided (B, N, H, D) BF16 tensor (head hh of batch b) into a swizzled
// [kRows][D] tile with cp.async; rows past count are zero-filled. All threads of the block take part.
template <int kRows, int D, int kThreadsPerBlock>
__device__ __forceinline__ void load_tile_async(bf16_t* dst, const void* base, int64_t s0, int64_t s1, int64_t s2,
                                                int b, int n0, int count, int hh) {
  constexpr int kChunks = D / 8;
  const bf16_t* src = static_cast<const bf16_t*>(base);
  for (int x = threadIdx.x; x < kRows * kChunks; x += kThreadsPerBlock) {
    const int r = x / kChunks, c = x % kChunks;
    const bool in = r < count;
    const bf16_t* s = in ? src + b * s0 + static_cast<int64_t>(n0 + r) * s1 + hh * s2 + c * 8 : src;
    cp_async16(smem_u32(dst + swz<D>(r, c)), s, in);
  }
}

}  // namespace gproj::cuda::detail
