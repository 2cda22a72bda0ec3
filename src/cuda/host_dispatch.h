// Host-memory front end of the CUDA kernels for the device dispatch (gproj/backend.h): copies host views to
// the GPU, runs forward/backward, copies results and diagnostics back. Exercised by `gproj check --device cuda`.
#pragma once

#include "gproj/attention.h"

namespace gproj::cuda {

ForwardResult forward_from_host(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params);
BackwardResult backward_from_host(const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params);

}  // namespace gproj::cuda
