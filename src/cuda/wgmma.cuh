// Hopper warpgroup MMA (wgmma, sm_90a) building blocks: the 128-byte-swizzled shared-memory layout, matrix
// descriptors, fences, and m64n64k16 BF16 -> FP32 products with A from shared memory or registers.
// Used by flash_fwd_wg.cuh and checked on the GPU by bench/probes/wgmma_probe.cu (which includes this file).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace gproj::cuda::detail {

// Element offset of (row, col) in a BF16 tile stored as column blocks of 64 (128 bytes) x `rows`, each block the
// canonical 128B-swizzle layout: 8-row atoms of 1024 bytes, 16-byte chunk c of row r at chunk c ^ (r % 8).
// Every block must start on a 1024-byte boundary.
__host__ __device__ inline int sw128_offset(int row, int col, int rows) {
  const int block = col / 64, c = col % 64;
  return block * rows * 64 + row * 64 + (((c / 8) ^ (row % 8)) * 8) + c % 8;
}

// Descriptor of a 128B-swizzled operand starting at `smem`: leading / stride byte offsets as the PTX ISA's
// matrix-descriptor fields (bits 16-29 and 32-45, in 16-byte units), swizzle mode 1 (128 B) in bits 62-63.
__device__ inline uint64_t wg_desc(const void* smem, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint64_t d = static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= static_cast<uint64_t>(1) << 62;
  return d;
}

// K-major operand (rows = M or N, K contiguous): 8-row groups 1024 bytes apart; a K step of 16 elements is
// +32 bytes of the start address inside the 128-byte row (LBO unused).
__device__ inline uint64_t wg_desc_kmajor(const void* smem) { return wg_desc(smem, 16, 1024); }

// MN-major operand (rows = K, N contiguous; only the transposed-B form is used): 8 K-rows 1024 bytes apart,
// column blocks of 64 N `n_block_bytes` apart. Which of LBO / SBO holds which stride is what
// bench/probes/wgmma_probe.cu checks (its candidate 0 is this encoding).
constexpr bool kMnMajorLboIsNBlock = true;
__device__ inline uint64_t wg_desc_mnmajor(const void* smem, uint32_t n_block_bytes) {
  return kMnMajorLboIsNBlock ? wg_desc(smem, n_block_bytes, 1024) : wg_desc(smem, 1024, n_block_bytes);
}

// `desc` (an operand at shared address a) moved to a + `elems` BF16 elements: the start field (address / 16, bits
// 0-13) gains elems / 8. Exact while the address stays in shared memory (< 256 KB, so no carry leaves the field);
// elems is a multiple of 8. One add instead of a descriptor built from a pointer (address conversion, mask,
// shift, field bits) for every k-step.
__device__ __forceinline__ uint64_t wg_desc_advance(uint64_t desc, int elems) {
  return desc + static_cast<uint64_t>(elems >> 3);
}
// The same on the low word only (the high word, the stride field and swizzle mode, passes through with no 64-bit
// carry): the backward's descriptor bases (v3.11b). The forward keeps the 64-bit add above: through this form its
// gproj kernel was 1-2% slower (session 17, run 1).
__device__ __forceinline__ uint64_t wg_desc_advance_lo(uint64_t desc, int elems) {
  const uint32_t lo = static_cast<uint32_t>(desc) + static_cast<uint32_t>(elems >> 3);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}

__device__ inline void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ inline void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most one committed group is pending (the latest): the older groups are complete.
__device__ inline void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// Makes this thread's generic-proxy writes to shared memory (stores, cp.async) visible to wgmma's async proxy.
__device__ inline void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Operand fences (the role of CUTLASS's warpgroup_fence_operand): an empty asm that reads and writes each
// register, so the compiler keeps a wgmma's operands where they are until this point and moves no arithmetic on
// them across it. Needed wherever a wgmma is still in flight after its asm statement has "returned": without
// it the compiler may reuse the registers of an A operand (v2.1's first try: the next bf16(P) was written into
// the registers the in-flight P V was reading, seen in the PTX) or hoist arithmetic on accumulators above a wait.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N, int M>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// d (64 x 64 FP32, 32 per thread) = / += A B, A and B from shared memory; kTnspB = 1: B is MN-major.
// Accumulator layout per warp w of the warpgroup: rows 16 w + g (+8), n8 block j: d[4 j + e] at
// (g + 8 (e / 2), 8 j + 2 t + (e % 2)) with lane = 4 g + t, the m16n8 C layout of mma.sync.
template <int kTnspB>
__device__ inline void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, %35;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(accumulate), "n"(kTnspB));
}

// d (64 x 64) = A B (no accumulation; d is write-only, so the compiler need not keep its old values live), A and B
// from shared memory, both K-major.
__device__ inline void wgmma_ss_n64_first(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, %32, %33, 0, 1, 1, 0, 0;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]),
        "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]),
        "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]),
        "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "l"(da), "l"(db));
}

// d (64 x 16 FP32, 8 per thread) += A B, A and B from shared memory, both K-major; the accumulator layout of
// wgmma_ss_n64 with n8 blocks j = 0, 1. The _first form writes d = A B (d need not be initialised).
__device__ inline void wgmma_ss_n16(float (&d)[8], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1, 1, 1, 0, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(da), "l"(db));
}
__device__ inline void wgmma_ss_n16_first(float (&d)[8], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 0, 1, 1, 0, 0;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7])
      : "l"(da), "l"(db));
}

// d (64 x 16) += A B with A from registers (as wgmma_rs_n64) and B K-major in shared memory.
__device__ inline void wgmma_rs_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, "
      "{%8,%9,%10,%11}, %12, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

// d (64 x 72 FP32, 36 per thread) = / += A B, A K-major and B MN-major in shared memory: wgmma_ss_n64's layout
// with a ninth n8 block (d[32..35]). The backward's dQ product with a column of ones beside K (v3.9).
__device__ inline void wgmma_ss_n72_tb(float (&d)[36], uint64_t da, uint64_t db, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n72k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31,%32,%33,%34,%35}, %36, %37, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
      : "l"(da), "l"(db), "r"(accumulate));
}
// d (64 x 64) = / += A B with A from registers: each warp's 16 rows as the m16k16 A fragment of mma.sync.
// (kF16: FP16 A and B, fp16-lowrank's dK and, with 1 / l on dO's side, dV at D = 64, as wgmma_rs_n128's)
#define GPROJ_WGMMA_RS_N64(TY)                                                                                       \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                                    \
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"      \
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                                 \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(kTnspB))
template <int kTnspB, bool kF16 = false>
__device__ inline void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (kF16) {
    GPROJ_WGMMA_RS_N64("f16");
  } else {
    GPROJ_WGMMA_RS_N64("bf16");
  }
}
#undef GPROJ_WGMMA_RS_N64

// d (64 x 64) = A B (no accumulation: d is write-only), A from registers as wgmma_rs_n64, B K-major in shared
// memory. The forward's S = Q K^T with Q held in registers (v2.9).
__device__ inline void wgmma_rs_n64_first(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, 0, 1, 1, 0;\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]),
        "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]),
        "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]),
        "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}

#define GPROJ_WGMMA_RS_N128(TY)                                                                                      \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " "                                                   \
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                      \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                             \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                             \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "                                           \
      "{%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                   \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(kTnspB))
// d (64 x 128) = / += A B with A from registers (as wgmma_rs_n64) and B MN-major in shared memory, its two column
// blocks of 64 the descriptor's N-block stride apart: at D = 128 the forward's O += bf16(P) V and the backward's
// dV += bf16(P^T) dO, dK += bf16(dS^T) Q in one product per 16 keys (queries) instead of two (session 13: A leaves
// the registers once per k-step, not twice). d[32 b + e] is element e of column block b in wgmma_rs_n64's layout.
// kF16: FP16 operands (fp16-lowrank's dK += fp16(dS^T) Qh).
template <int kTnspB, bool kF16 = false>
__device__ inline void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (kF16) {
    GPROJ_WGMMA_RS_N128("f16");
  } else {
    GPROJ_WGMMA_RS_N128("bf16");
  }
}
#undef GPROJ_WGMMA_RS_N128

// v2.6, the forward's statistics as 8 more columns of P V: d (64 x 136, or at D = 64 64 x 72) = / += A B with A
// from registers (as wgmma_rs_n64) and B MN-major in shared memory, its column blocks of 64 the descriptor's
// N-block stride apart (V's two, or one, then the K U block, of which the product reads the first 8 columns).
// d[4 j + e] is element e of n8 block j, as in wgmma_rs_n128; the last four are the statistics' columns.
// kF16 (fp16-lowrank's forward, docs/design-fp16-projection.md): A and B FP16 instead of BF16 (A's registers hold
// f16x2 pairs in the same layout), the one type name the instruction changes.
#define GPROJ_WGMMA_RS_N136(TY)                                                                                      \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n136k16.f32." TY "." TY " "                                                   \
      "{"                                                                                                            \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                             \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                                             \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"                                             \
      "%64,%65,%66,%67}, "                                                                                           \
      "{%68,%69,%70,%71}, %72, p, 1, 1, %74;\n}\n"                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),     \
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67])                                                                        \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(kTnspB))
template <int kTnspB, bool kF16 = false>
__device__ inline void wgmma_rs_n136(float (&d)[68], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (kF16) {
    GPROJ_WGMMA_RS_N136("f16");
  } else {
    GPROJ_WGMMA_RS_N136("bf16");
  }
}
#undef GPROJ_WGMMA_RS_N136
#define GPROJ_WGMMA_RS_N72(TY)                                                                                       \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %41, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n72k16.f32." TY "." TY " "                                                    \
      "{"                                                                                                            \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                                       \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                                             \
      "%32,%33,%34,%35}, "                                                                                           \
      "{%36,%37,%38,%39}, %40, p, 1, 1, %42;\n}\n"                                                                   \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35])                                                                        \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(kTnspB))
// (kF16: fp16-lowrank's forward at D = 64, as wgmma_rs_n136's)
template <int kTnspB, bool kF16 = false>
__device__ inline void wgmma_rs_n72(float (&d)[36], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  if constexpr (kF16) {
    GPROJ_WGMMA_RS_N72("f16");
  } else {
    GPROJ_WGMMA_RS_N72("bf16");
  }
}
#undef GPROJ_WGMMA_RS_N72

// fp16-lowrank's backward (docs/design-fp16-projection.md), FP16 operands from shared memory, FP32 accumulators in
// wgmma_ss_n64's layout:
// S^T = Kh Qh^T with A MN-major (trans-a: Kh^T's rows hold D, its keys contiguous) and B K-major;
#define GPROJ_D32_OUT                                                                                                \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),       \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GPROJ_D32_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
__device__ inline void wgmma_ss_n64_f16_ta(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPROJ_D32_REGS ", %32, %33, p, 1, 1, 1, 0;\n}\n"
               : GPROJ_D32_OUT
               : "l"(da), "l"(db), "r"(accumulate));
}
// dQ = dS Kh with A (dS) and B (Kh^T) both K-major: m64n64k16, and m64n72k16 whose last 8 columns read Kh^T's rows of
// ones (r_i = sum_j fp16(dS)_ij in columns 64-71, d[32..35]).
__device__ inline void wgmma_ss_n64_f16(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPROJ_D32_REGS ", %32, %33, 1, 1, 1, 0, 0;\n"
               : GPROJ_D32_OUT
               : "l"(da), "l"(db));
}
// dP'^T = Vh dOh^T (fp16-lowrank with 1 / l on dO's side): A and B K-major, d = A B + (accumulate ? d : 0).
__device__ inline void wgmma_ss_n64_f16_acc(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPROJ_D32_REGS ", %32, %33, p, 1, 1, 0, 0;\n}\n"
               : GPROJ_D32_OUT
               : "l"(da), "l"(db), "r"(accumulate));
}
__device__ inline void wgmma_ss_n64_f16_first(float (&d)[32], uint64_t da, uint64_t db) {  // d = A B (write-only)
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GPROJ_D32_REGS ", %32, %33, 0, 1, 1, 0, 0;\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]),
                 "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]),
                 "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]),
                 "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]),
                 "=f"(d[30]), "=f"(d[31])
               : "l"(da), "l"(db));
}
__device__ inline void wgmma_ss_n72_f16(float (&d)[36], uint64_t da, uint64_t db) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n72k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31,%32,%33,%34,%35}, %36, %37, 1, 1, 1, 0, 0;\n"
      : GPROJ_D32_OUT, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
      : "l"(da), "l"(db));
}
#undef GPROJ_D32_OUT
#undef GPROJ_D32_REGS

}  // namespace gproj::cuda::detail
