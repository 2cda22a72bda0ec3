// sm_90 asynchronous copies: mbarriers, TMA tile loads (cp.async.bulk.tensor) and warpgroup-local named
// barriers, as inline PTX (PTX ISA 8.x). Used by the TMA-fed wgmma backward (flash_bwd_wg.cuh); the host side
// (tensor maps) is in launch.cu. Exercised by tests/cuda/flash_cuda_test.cc (WgmmaBackward*).
#pragma once

#include <cuda.h>  // CUtensorMap (a 128-byte opaque descriptor; no driver library is linked)

#include <cstdint>

namespace gproj::cuda::detail {

// TMA descriptors of an attention's inputs (launch.cu): (D, heads, rows, B) views of Q, dO (H, Nq) and K, V
// (Hkv, Nk), boxes of 64 columns x 64 rows, 128B-swizzled (the sw128 tile layout of wgmma.cuh). The forward
// leaves dout unset. ku (the forward's statistics only, v2.6): the (8, Nk, Hkv, B) view of bf16(K U) with its
// column of ones, boxes of 64 columns x 64 keys, 128B-swizzled: a V stage's last column block (columns 8-63 and
// keys past Nk read as zeros).
struct TmaMaps {
  CUtensorMap q, dout, k, v, ku;
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One mbarrier (8 bytes of shared memory) expecting `count` arrivals per phase; by one thread, before use.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes initialised mbarriers visible to the async proxy (TMA); then a CTA barrier.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// The producer's arrival, announcing `bytes` that TMA copies will complete on this barrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Waits until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}

// A producer/consumer ring of `stages` buffers plus one buffer loaded once: thread 0 initialises full[s] (one
// arrival, the producer's expect_tx), empty[s] (`consumer_warps` arrivals) and `once` (one arrival), then the
// fence for the async proxy; every thread then passes a CTA barrier.
__device__ __forceinline__ void init_load_ring(uint64_t* full, uint64_t* empty, int stages, uint32_t consumer_warps,
                                               uint64_t* once) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], consumer_warps);
    }
    mbar_init(once, 1);
    mbar_init_fence();
  }
  __syncthreads();
}

// A 4-D tile load: box of the tensor map at coordinates (c0 innermost .. c3) into `dst` (aligned as the map's
// swizzle needs: 1024 bytes for 128B), completing `bytes` on `bar`. One thread issues it.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

// A bulk reduce-add of `bytes` (a multiple of 16) FP32 words from shared memory into global memory (both 16-byte
// aligned), performed by the memory system (L2) like an atomic add of each word, in the thread's bulk group.
// Shared memory written by the generic proxy must be fenced (fence_async_smem) before it.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until this thread's bulk groups have read their shared memory (the source may then be rewritten).
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Until this thread's bulk groups are complete.
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// Barrier of the 128 threads of one warpgroup (ids 1.. ; 0 is __syncthreads).
__device__ __forceinline__ void wg_bar_sync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
// Barrier of two warpgroups (256 threads) under a named id, beside the warpgroups' own ones.
__device__ __forceinline__ void pair_bar_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}

}  // namespace gproj::cuda::detail
