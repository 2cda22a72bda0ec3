// Torch-free launch API of the CUDA attention kernels: device pointers with element strides, a stream, and a
// status with a message. Exercised by tests/cuda/* on the GPU machine and by the PyTorch binding.
#pragma once

#include <cstdint>
#include <string>

#include "gproj/attention.h"
#include "gproj/error.h"

namespace gproj::cuda {

struct Status {
  bool ok = true;
  ErrorCode code = ErrorCode::kInvalidArgument;  // when !ok: kShape, kInvalidArgument, kUnsupported or kDevice
  std::string message;  // what went wrong, naming the argument or the CUDA error
  std::string kernels;  // when ok: which kernels ran, e.g. "backward v3.2 (wgmma, TMA), thresh-lowrank"
};

// A BF16 or FP32 tensor in device memory: (B, N, H, D) or (B, H, N) with element strides.
struct DeviceTensor {
  void* data = nullptr;
  int64_t stride[4] = {0, 0, 0, 0};
};

struct Problem {
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, Hkv = 0, D = 0;
  float softmax_scale = 0;  // > 0
  FlashParams params;       // variant, causal, beta, projection; block sizes are the kernel's own
  bool row_stats = false;   // backward: also sum r_i, s_i for variants without a projection (the audit's
                            // max |r_i|; the first floats of the workspace after delta), at some cost
  // gproj with thresh-lowrank (docs/gproj-forward-stats.md): the forward's row statistics. forward(): when not
  // null, also forms K's basis and writes each row's P (K U) and s_i here (forward_stats_bytes(p) bytes; needs
  // forward_workspace, forward_workspace_bytes(p) bytes of scratch). backward(): when not null, reads them from
  // the same forward instead of forming them (faster). Where forward_stats_apply(p) is false both refuse it.
  void* forward_stats = nullptr;
  void* forward_workspace = nullptr;
  // gproj with thresh-lowrank (docs/gproj-forward-basis.md): K's basis U formed by the forward instead of the
  // backward. forward(): when not null, forms U here (forward_basis_bytes(p) bytes; its Gram partials in
  // forward_workspace, forward_workspace_bytes(p) bytes) on a side stream beside the forward kernel, joined back
  // into the caller's stream before forward() returns. backward(): when not null, takes U from here instead of
  // forming it; the caller passes the same k to both (U is a function of k alone, so the gradients are the same
  // bits either way). Where forward_basis_apply(p) is false both refuse it.
  void* forward_basis = nullptr;
  // backward(): the bytes at its workspace. 0 (the default): backward_workspace_bytes(p), the most any backward of
  // this problem needs. Set it when the workspace was sized by backward_workspace_bytes(p, tensors...), which can
  // be smaller; backward() then refuses a workspace too small for what it would run.
  size_t workspace_bytes = 0;
};

// Whether this build has the kernels and a device is visible; when not, `why` says what is missing.
bool available(std::string* why);

// Provenance of device 0: name, compute capability, driver and runtime versions ("" fields when unknown).
struct DeviceInfo {
  std::string name, compute_capability, driver_version, runtime_version;
};
DeviceInfo device_info();

// O (B, Nq, H, D) BF16 and LSE (B, H, Nq) FP32 from q (B, Nq, H, D), k, v (B, Nk, Hkv, D) BF16.
// o_fp32 (B, Nq, H, D) FP32 may be null; when given it receives acc / l before the BF16 rounding.
Status forward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
               const DeviceTensor& o, const DeviceTensor& lse, const DeviceTensor& o_fp32, void* stream);

// Whether this problem's forward and backward can carry thresh-lowrank's statistics (Problem::forward_stats):
// variant gproj, projection thresh-lowrank, the v2.2 forward and the v3.1 / v3.2 backward by choice or auto
// (not deterministic, no dK compensation), D 64 or 128. The tensors' rows must also be 16-byte aligned.
// Projection fp16-lowrank (docs/design-fp16-projection.md) always carries them: its forward() refuses to run
// without forward_stats and forward_workspace, which also receive its FP16 copies of q, k and v (D = 64 or 128, the
// v2.2 forward; its backward: v3.2-h16 at D = 128, v3.17-h16 at D = 64).
bool forward_stats_apply(const Problem& p);
// Bytes of Problem::forward_stats (the rows' records, U, bf16(K U) and its tiles; fp16-lowrank: also the FP16
// copies of q and k and their scales; kept from forward to backward) and of Problem::forward_workspace (the Gram
// matrices; fp16-lowrank: also the FP16 copy of v; needed during forward() only).
size_t forward_stats_bytes(const Problem& p);
size_t forward_workspace_bytes(const Problem& p);
// Where forward() put the parts of Problem::forward_stats `stats` (a problem where forward_stats_apply holds):
// records, (B, H, Nq, 8) FP32, row (b H + h) Nq + i: P (K U) / l in columns 0-5 and s_i (P 1 / l) in column 6
// (fp16-lowrank: from its FP16 P^), column 7 zero; u, (B, Hkv, D, 8) FP32, K's basis (columns 0-5 used).
// fp16-lowrank only, else null: scales, qh, kht as convert_fp16_copies writes them; o16, (B, Nq, H, D) FP16,
// fp16(O s_v) with v's head scale s_v (the backward's delta reads it).
struct ForwardStatsParts {
  float* records = nullptr;
  float* u = nullptr;
  float* scales = nullptr;
  void* qh = nullptr;
  void* kht = nullptr;
  void* o16 = nullptr;
  void* vh = nullptr;  // with FlashParams::fp16_dout_side: (B, Nk, Hkv, D) FP16, fp16(V s_v) (the backward's dP')
};
ForwardStatsParts forward_stats_parts(const Problem& p, void* stats);
// Whether this problem can take K's basis from the forward (Problem::forward_basis): variant gproj whose projection
// is thresh-lowrank (not deterministic), without forward_stats (which carry the basis themselves), D 64 or 128.
// k's rows must also be 16-byte aligned. forward_basis_bytes(p): B Hkv D 8 floats where it applies, else 0.
bool forward_basis_apply(const Problem& p);
size_t forward_basis_bytes(const Problem& p);
// Whether the rows of a BF16 tensor start on 16-byte boundaries (its data and B, N, H strides), as forward_basis,
// forward_stats and the v1+ kernels need.
bool rows_aligned(const DeviceTensor& t);

// Bytes of scratch memory backward() needs for this problem (FP32 accumulators, row statistics), whatever the
// tensors: the most any backward of it needs.
size_t backward_workspace_bytes(const Problem& p);
// The bytes backward() needs with these very tensors (only their pointers and strides are read; nothing on the
// device). Where the main kernel stores dK and dV itself (one query head per kv head, 16-byte aligned rows and
// dk, dv; see backward()) it leaves out the FP32 dK and dV accumulators, 2 B H Nk D floats (B H Nk D for gproj,
// whose dK correction keeps dK's). Pass it on as Problem::workspace_bytes. For arguments backward() would refuse
// it returns backward_workspace_bytes(p), and backward() says what is wrong.
size_t backward_workspace_bytes(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                                const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk,
                                const DeviceTensor& dv);
// After backward(), the workspace starts with delta_i, r_i and s_i, (B, H, Nq) FP32 each, every one at a
// stride of this many floats (B H Nq rounded up to a multiple of 4).
size_t backward_workspace_row_stride(const Problem& p);

// dq (B, Nq, H, D), dk, dv (B, Nk, Hkv, D) BF16 from the forward's o, lse and dout (B, Nq, H, D).
// o_fp32 is required by Variant::kFp32 (as on the CPU). `workspace` holds backward_workspace_bytes(p) bytes,
// 16-byte aligned (an error otherwise). dq, dk, dv must be 8-byte aligned; with H = Hkv, 16-byte aligned dk and dv
// let the main kernel store them itself (v3.34, faster; the same values).
Status backward(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                const DeviceTensor& o, const DeviceTensor& o_fp32, const DeviceTensor& lse,
                const DeviceTensor& dout, const DeviceTensor& dq, const DeviceTensor& dk, const DeviceTensor& dv,
                void* workspace, void* stream);

// fp16-lowrank's conversion pass (docs/design-fp16-projection.md, build step 2; forward() runs it for that
// projection): FP16 copies of q (B, Nq, H, D), k, v (B, Nk, Hkv, D) BF16, each head's scaled by the power of two s
// that puts its largest |x| in [2^14, 2^15) (the CPU emulator's cpu::fp16_head_scale), rounded to nearest even.
// Outputs, dense: qh (B, Nq, H, D), kht (B, Hkv, D, fp16_kht_ld(p)) (K transposed per kv head; its rows are Nk
// rounded up to a multiple of 8 keys, the keys past Nk zero, so that every row starts on 16 bytes), vh (B, Nk, Hkv,
// D), and scales, fp16_scale_count(p) floats: q's heads (b H + h), then k's (B H + b Hkv + hk), then v's (B H + B
// Hkv + b Hkv + hk), then (not a scale) each v head's largest row norm max_j |V_j| (B H + 2 B Hkv + b Hkv + hk), the
// bound fp16-lowrank's backward scales dS by. workspace: fp16_scale_count(p) 4-byte words. D a multiple of 64; q,
// k, v with 16-byte aligned rows (rows_aligned); p's variant is not read.
size_t fp16_scale_count(const Problem& p);
size_t fp16_kht_ld(const Problem& p);
Status convert_fp16_copies(const Problem& p, const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v,
                           void* qh, void* kht, void* vh, float* scales, void* workspace, void* stream);

}  // namespace gproj::cuda
