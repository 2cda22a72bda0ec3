// Host-memory front end of the CUDA kernels: validation as on the CPU, device buffers, copies both ways, and
// the backward's diagnostics (row sums before/after the projection, dK column-sum ratio).
// Exercised by tests/cuda/flash_cuda_test.cc and `gproj check --device cuda`.
#include "cuda/host_dispatch.h"

#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "gproj/compare.h"
#include "gproj/cuda/attention_cuda.h"
#include "gproj/error.h"

namespace gproj::cuda {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(ErrorCode::kDevice, std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}

// Throws for a failed launch; returns the names of the kernels that ran.
std::string check_status(const Status& s) {
  if (!s.ok) throw Error(s.code, "CUDA kernels: " + s.message);
  return s.kernels;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { check_cuda(cudaMalloc(&ptr_, bytes ? bytes : 1), "malloc"); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  void* get() const { return ptr_; }
  template <class T>
  void upload(const std::vector<T>& host) {
    check_cuda(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  template <class T>
  void download(std::vector<T>& host) const {
    check_cuda(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost), "download");
  }

 private:
  void* ptr_ = nullptr;
};

template <class T>
std::vector<T> contiguous(const TensorView<const T>& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  size_t n = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d) out[n++] = t.at(a, b, c, d);
  return out;
}

DeviceTensor dense4(void* data, const Extents& s) {
  DeviceTensor t;
  t.data = data;
  t.stride[0] = s[1] * s[2] * s[3];
  t.stride[1] = s[2] * s[3];
  t.stride[2] = s[3];
  t.stride[3] = 1;
  return t;
}

Problem problem_of(const AttentionDims& d, const FlashParams& params) {
  Problem p;
  p.B = d.B;
  p.Nq = d.Nq;
  p.Nk = d.Nk;
  p.H = d.H;
  p.Hkv = d.Hkv;
  p.D = d.D;
  p.softmax_scale = resolve_scale(params, d.D);
  p.params = params;
  return p;
}

void require_device() {
  std::string why;
  if (!available(&why)) throw Error(ErrorCode::kUnsupported, "cuda: " + why);
}

}  // namespace

ForwardResult forward_from_host(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params) {
  require_device();
  const AttentionDims d = check_attention_shapes(q, k, v);
  if (!params.allow_nonfinite) check_finite_inputs({{"q", q}, {"k", k}, {"v", v}});
  const Problem p = problem_of(d, params);
  ForwardResult r{Tensor<bf16>({d.B, d.Nq, d.H, d.D}), Tensor<float>({d.B, d.Nq, d.H, d.D}),
                  Tensor<float>({d.B, d.H, d.Nq}), {}};
  DeviceBuffer dq(q.numel() * 2), dk(k.numel() * 2), dv(v.numel() * 2), dout(r.o.values.size() * 2),
      dof(r.o_fp32.values.size() * 4), dlse(r.lse.values.size() * 4);
  dq.upload(contiguous(q));
  dk.upload(contiguous(k));
  dv.upload(contiguous(v));
  DeviceTensor lse;
  lse.data = dlse.get();
  // fp16-lowrank's forward always writes its statistics and FP16 copies (for its backward; discarded here).
  Problem fp = p;
  const bool h16 = effective_projection(params) == Projection::kFp16LowRank;
  DeviceBuffer stats(h16 ? forward_stats_bytes(p) : 1), fws(h16 ? forward_workspace_bytes(p) : 1);
  if (h16) fp.forward_stats = stats.get(), fp.forward_workspace = fws.get();
  r.kernels = check_status(forward(fp, dense4(dq.get(), q.shape), dense4(dk.get(), k.shape), dense4(dv.get(), v.shape),
                       dense4(dout.get(), q.shape), lse, dense4(dof.get(), q.shape), nullptr));
  check_cuda(cudaDeviceSynchronize(), "forward");
  dout.download(r.o.values);
  dof.download(r.o_fp32.values);
  dlse.download(r.lse.values);
  return r;
}

BackwardResult backward_from_host(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params) {
  require_device();
  const AttentionDims d = check_attention_shapes(q, k, v, dout, o);
  if (!params.allow_nonfinite) check_finite_inputs({{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"do", dout}});
  const Extents lse_shape{d.B, d.H, d.Nq, 1};
  if (lse.data == nullptr || lse.shape != lse_shape) {
    throw Error(ErrorCode::kShape, "lse must be (B, H, Nq) = " + format_extents(3, lse_shape));
  }
  Problem p = problem_of(d, params);
  p.row_stats = true;  // the audit reports max |r_i| for every variant
  const bool need_ofp32 = backward_needs_o_fp32(params);
  if (need_ofp32 && o_fp32.data == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, "variant fp32 needs the forward's FP32 O (o_fp32)");
  }
  BackwardResult r;
  r.dq = Tensor<bf16>({d.B, d.Nq, d.H, d.D});
  r.dk = Tensor<bf16>({d.B, d.Nk, d.Hkv, d.D});
  r.dv = Tensor<bf16>({d.B, d.Nk, d.Hkv, d.D});
  r.delta = Tensor<float>({d.B, d.H, d.Nq});
  r.rowsum = Tensor<float>({d.B, d.H, d.Nq});
  r.rowsum_after = Tensor<float>({d.B, d.H, d.Nq});
  DeviceBuffer bq(q.numel() * 2), bk(k.numel() * 2), bv(v.numel() * 2), bo(o.numel() * 2), bdo(dout.numel() * 2),
      bof(need_ofp32 ? o_fp32.numel() * 4 : 4), blse(lse.numel() * 4), bdq(r.dq.values.size() * 2),
      bdk(r.dk.values.size() * 2), bdv(r.dv.values.size() * 2), ws(backward_workspace_bytes(p));
  bq.upload(contiguous(q));
  bk.upload(contiguous(k));
  bv.upload(contiguous(v));
  bo.upload(contiguous(o));
  bdo.upload(contiguous(dout));
  if (need_ofp32) bof.upload(contiguous(o_fp32));
  std::vector<float> lse_host(static_cast<size_t>(lse.numel()));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.Nq; ++i) lse_host[(b * d.H + h) * d.Nq + i] = lse.at(b, h, i);
  blse.upload(lse_host);
  DeviceTensor tl, tof;
  tl.data = blse.get();
  tof.data = need_ofp32 ? bof.get() : nullptr;
  // gproj with thresh-lowrank: what a forward of the same inputs hands the backward in training (its O and LSE are
  // discarded; the backward uses the given ones): the statistics with --stats-from forward
  // (docs/gproj-forward-stats.md), else K's basis with --basis-from forward, the PyTorch op's path
  // (docs/gproj-forward-basis.md). Where neither applies the backward forms its own.
  const bool stats = forward_stats_apply(p), basis = !stats && params.basis_from_forward && forward_basis_apply(p);
  DeviceBuffer handed(stats ? forward_stats_bytes(p) : basis ? forward_basis_bytes(p) : 1),
      fws(stats || basis ? forward_workspace_bytes(p) : 1), fo(stats || basis ? o.numel() * 2 : 1),
      flse(stats || basis ? lse.numel() * 4 : 1);
  std::string fwd_kernels;
  if (stats || basis) {
    Problem fp = p;
    (stats ? fp.forward_stats : fp.forward_basis) = handed.get();
    fp.forward_workspace = fws.get();
    DeviceTensor fl, none;
    fl.data = flse.get();
    fwd_kernels = check_status(forward(fp, dense4(bq.get(), q.shape), dense4(bk.get(), k.shape),
                                       dense4(bv.get(), v.shape), dense4(fo.get(), o.shape), fl, none, nullptr));
    (stats ? p.forward_stats : p.forward_basis) = handed.get();
  }
  r.kernels = check_status(backward(p, dense4(bq.get(), q.shape), dense4(bk.get(), k.shape), dense4(bv.get(), v.shape),
                        dense4(bo.get(), o.shape), tof, tl, dense4(bdo.get(), dout.shape), dense4(bdq.get(), q.shape),
                        dense4(bdk.get(), k.shape), dense4(bdv.get(), v.shape), ws.get(), nullptr));
  check_cuda(cudaDeviceSynchronize(), "backward");
  if (!fwd_kernels.empty()) r.kernels += std::string(basis ? "; basis by " : "; statistics by ") + fwd_kernels;
  bdq.download(r.dq.values);
  bdk.download(r.dk.values);
  bdv.download(r.dv.values);
  // Workspace starts with delta, rowsum, psum (B H Nq each, at a padded stride): see attention_cuda.h.
  const size_t rows = static_cast<size_t>(d.B * d.H * d.Nq), stride = backward_workspace_row_stride(p);
  std::vector<float> head(3 * stride);
  check_cuda(cudaMemcpy(head.data(), ws.get(), head.size() * 4, cudaMemcpyDeviceToHost), "diagnostics");
  const Projection proj = effective_projection(params);
  const bool projected =
      proj == Projection::kPWeighted || proj == Projection::kThreshLowRank || proj == Projection::kFp16LowRank;
  double before = 0, after = 0;
  for (size_t i = 0; i < rows; ++i) {
    r.delta.values[i] = head[i];
    const float rs = head[stride + i], s = head[2 * stride + i];
    r.rowsum.values[i] = rs;
    r.rowsum_after.values[i] = projected && s > 0.0f ? rs - (rs / s) * s : rs;
    before = std::max(before, std::fabs(double(rs)));
    after = std::max(after, std::fabs(double(r.rowsum_after.values[i])));
  }
  r.diag.rowsum_max_before = before;
  r.diag.rowsum_max_after = after;
  r.diag.dk_colsum_ratio = column_sum_ratio(r.dk.view());
  return r;
}

}  // namespace gproj::cuda
