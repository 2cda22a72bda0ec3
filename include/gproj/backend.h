// Device dispatch of the attention forward/backward: the CPU emulator today, CUDA kernels when built with them.
// Exercised by `gproj check --device` / `gproj run --device` and tests/cli/check_test.cc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gproj/attention.h"

namespace gproj {

enum class Device { kCpu, kCuda };

const char* device_name(Device d);
Device parse_device(const std::string& name);  // "cpu" or "cuda"; throws kInvalidArgument otherwise

// Whether `d` can run here; when not, `why` says what is missing (e.g. built without CUDA).
bool device_available(Device d, std::string* why);

// Name and versions of the accelerator behind `d` for reports (empty for the CPU or an unavailable device):
// keys "name", "compute_capability", "cuda_driver_api" (the CUDA version the driver supports), "cuda_runtime".
std::vector<std::pair<std::string, std::string>> device_properties(Device d);

// Same contracts as flash_forward_cpu / flash_backward_cpu; throws kUnsupported for an unavailable device.
ForwardResult attention_forward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params);
BackwardResult attention_backward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params);

}  // namespace gproj
