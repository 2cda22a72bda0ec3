// Names of gproj::ErrorCode values, used as the prefix of every error message.
// Exercised by tests/core/tensor_test.cc through the messages of shape and finiteness errors.
#include "gproj/error.h"

namespace gproj {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kShape: return "shape error";
    case ErrorCode::kDtype: return "dtype error";
    case ErrorCode::kNonFinite: return "non-finite input";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kFormat: return "format error";
    case ErrorCode::kIO: return "I/O error";
    case ErrorCode::kDevice: return "device error";
  }
  return "error";
}

}  // namespace gproj
