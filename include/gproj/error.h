// The one exception type of gproj: a code that names the class of problem and a message that names the culprit.
// Exercised by every validation path; tests/core/tensor_test.cc checks codes and messages.
#pragma once

#include <stdexcept>
#include <string>

namespace gproj {

enum class ErrorCode {
  kShape,        // a rank, extent or stride that does not fit
  kDtype,        // an element type gproj does not accept
  kNonFinite,    // NaN or Inf where finite values are required
  kUnsupported,  // a valid request gproj does not implement (e.g. a head dimension)
  kInvalidArgument,  // a parameter out of its domain (scale <= 0, block size 0, unknown name)
  kFormat,       // a malformed or truncated file
  kIO,           // the operating system refused a read or write
  kDevice,       // the GPU runtime failed or is missing (a CUDA error, no device)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(std::string(error_code_name(code)) + ": " + message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace gproj
