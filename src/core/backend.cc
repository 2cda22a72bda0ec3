// Device dispatch: CPU emulator always; CUDA only in builds with the CUDA kernels (none yet in this build).
// Exercised by `gproj check --device` and tests/cli/check_test.cc.
#include "gproj/backend.h"

#include "gproj/error.h"

namespace gproj {

namespace {

void require(Device d) {
  std::string why;
  if (!device_available(d, &why)) throw Error(ErrorCode::kUnsupported, std::string(device_name(d)) + ": " + why);
}

}  // namespace

const char* device_name(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  throw Error(ErrorCode::kInvalidArgument, "unknown device '" + name + "' (valid: cpu, cuda)");
}

bool device_available(Device d, std::string* why) {
  if (d == Device::kCpu) return true;
  if (why) *why = "this gproj was built without the CUDA kernels";
  return false;
}

ForwardResult attention_forward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params) {
  require(d);
  return flash_forward_cpu(q, k, v, params);
}

BackwardResult attention_backward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params) {
  require(d);
  return flash_backward_cpu(q, k, v, o, o_fp32, lse, dout, params);
}

}  // namespace gproj
