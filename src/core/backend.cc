// Device dispatch: CPU emulator always; CUDA in builds with the kernels (GPROJ_WITH_CUDA) and a visible device.
// Exercised by `gproj check --device` and tests/cli/check_test.cc.
#include "gproj/backend.h"

#include "gproj/error.h"

#ifdef GPROJ_WITH_CUDA
#include "cuda/host_dispatch.h"
#include "gproj/cuda/attention_cuda.h"
#endif

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
#ifdef GPROJ_WITH_CUDA
  return cuda::available(why);
#else
  if (why) *why = "this gproj was built without the CUDA kernels (no nvcc at configure time)";
  return false;
#endif
}

std::vector<std::pair<std::string, std::string>> device_properties(Device d) {
  std::string why;
  if (d == Device::kCpu || !device_available(d, &why)) return {};
#ifdef GPROJ_WITH_CUDA
  const cuda::DeviceInfo info = cuda::device_info();
  return {{"name", info.name},
          {"compute_capability", info.compute_capability},
          {"cuda_driver_api", info.driver_version},
          {"cuda_runtime", info.runtime_version}};
#else
  return {};
#endif
}

ForwardResult attention_forward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                const TensorView<const bf16>& v, const FlashParams& params) {
  require(d);
#ifdef GPROJ_WITH_CUDA
  if (d == Device::kCuda) return cuda::forward_from_host(q, k, v, params);
#endif
  return flash_forward_cpu(q, k, v, params);
}

BackwardResult attention_backward(Device d, const TensorView<const bf16>& q, const TensorView<const bf16>& k,
                                  const TensorView<const bf16>& v, const TensorView<const bf16>& o,
                                  const TensorView<const float>& o_fp32, const TensorView<const float>& lse,
                                  const TensorView<const bf16>& dout, const FlashParams& params) {
  require(d);
#ifdef GPROJ_WITH_CUDA
  if (d == Device::kCuda) return cuda::backward_from_host(q, k, v, o, o_fp32, lse, dout, params);
#endif
  return flash_backward_cpu(q, k, v, o, o_fp32, lse, dout, params);
}

}  // namespace gproj
