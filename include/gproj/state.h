// Attention state files: q, k, v, do and the causal flag / softmax scale of one attention call, as safetensors.
// Exercised by tests/io/state_test.cc (dtype conversions, shape and metadata checks, save/load round trip).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "gproj/safetensors.h"
#include "gproj/tensor.h"

namespace gproj {

struct AttentionState {
  Tensor<bf16> q;     // (B, Nq, H, D)
  Tensor<bf16> k, v;  // (B, Nk, Hkv, D)
  Tensor<bf16> dout;  // (B, Nq, H, D), stored under the name "do"
  bool causal = false;
  std::optional<float> softmax_scale;             // metadata "softmax_scale"; absent -> callers use 1/sqrt(D)
  std::map<std::string, std::string> provenance;  // every other metadata key (source, step, layer, head, ...)
};

// Reads `path` and converts it with state_from_file.
AttentionState load_state(const std::string& path, bool allow_nonfinite = false);

// Builds a state from tensors "q", "k", "v", "do" and metadata "causal" ("true"/"false", required) and
// "softmax_scale" (optional decimal, finite and > 0); other tensors are ignored. Elements of BF16 are copied
// bit for bit; F16, F32 and F64 are rounded once, to nearest even, to bf16. Throws gproj::Error naming
// `what`: kFormat for a missing tensor or bad metadata, kShape for inconsistent extents, kInvalidArgument
// for a scale out of domain, and, unless allow_nonfinite, kNonFinite naming the tensor and the first
// (b, n, h, d) that is NaN or Inf after conversion (including finite values that overflow bf16).
AttentionState state_from_file(const SafetensorsFile& f, const std::string& what, bool allow_nonfinite = false);

// Writes BF16 tensors and metadata "causal", "softmax_scale" (shortest decimal that reads back as the same
// float) when set, and the provenance entries, atomically as write_safetensors does. Throws
// kShape/kInvalidArgument for a state that load_state would reject (non-finite values aside).
void save_state(const std::string& path, const AttentionState& s);

}  // namespace gproj
