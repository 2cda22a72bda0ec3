// libFuzzer target for the state-file reader: bytes -> parse_safetensors -> state_from_file (strict and permissive).
// Exercised by scripts/fuzz.sh (short CI run, long runs by hand; see docs/fuzzing.md); gproj::Error is a rejection.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "gproj/error.h"
#include "gproj/safetensors.h"
#include "gproj/state.h"

namespace {

constexpr const char* kWhat = "fuzz input";

struct Outcome {
  std::optional<gproj::AttentionState> state;  // set when the file was accepted
  gproj::ErrorCode code = gproj::ErrorCode::kFormat;  // the rejection's code otherwise
};

Outcome load(const gproj::SafetensorsFile& file, bool allow_nonfinite) {
  Outcome o;
  try {
    o.state = gproj::state_from_file(file, kWhat, allow_nonfinite);
  } catch (const gproj::Error& e) {
    o.code = e.code();
  }
  return o;
}

bool same_bits(const gproj::Tensor<gproj::bf16>& a, const gproj::Tensor<gproj::bf16>& b) {
  if (a.rank != b.rank || a.shape != b.shape || a.values.size() != b.values.size()) return false;
  for (size_t i = 0; i < a.values.size(); ++i) {
    if (a.values[i].bits != b.values[i].bits) return false;
  }
  return true;
}

bool same_state(const gproj::AttentionState& a, const gproj::AttentionState& b) {
  return same_bits(a.q, b.q) && same_bits(a.k, b.k) && same_bits(a.v, b.v) && same_bits(a.dout, b.dout) &&
         a.causal == b.causal && a.softmax_scale == b.softmax_scale && a.provenance == b.provenance;
}

[[noreturn]] void violated(const char* contract) {
  std::fprintf(stderr, "state_reader_fuzz: contract violated: %s\n", contract);
  std::abort();
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Byte mutations of the whole input rarely keep the 8-byte length field in step with the JSON header, so
// structural edits of the header (an entry dropped, a key added) would almost never parse. Half of the
// mutations therefore edit the header text alone and rewrite the length field to match.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  uint64_t header_size = 0;
  if (size >= 8) {
    for (int i = 7; i >= 0; --i) header_size = header_size << 8 | data[i];
  }
  if (size < 8 || header_size == 0 || header_size > size - 8 || (seed & 1u) == 0) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  const std::vector<uint8_t> rest(data + 8 + header_size, data + size);
  const size_t new_header_size = LLVMFuzzerMutate(data + 8, header_size, max_size - 8 - rest.size());
  std::copy(rest.begin(), rest.end(), data + 8 + new_header_size);
  for (int i = 0; i < 8; ++i) data[i] = static_cast<uint8_t>(static_cast<uint64_t>(new_header_size) >> (8 * i));
  return 8 + new_header_size + rest.size();
}

// allow_nonfinite only lifts the kNonFinite check (include/gproj/state.h), so the permissive load must
// accept what the strict one accepts, with the same result, and reject the rest with the same code.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gproj::SafetensorsFile file;
  try {
    file = gproj::parse_safetensors(data, size, kWhat);
  } catch (const gproj::Error&) {
    return 0;
  }
  const Outcome strict = load(file, false);
  const Outcome permissive = load(file, true);
  if (strict.state) {
    if (!permissive.state || !same_state(*strict.state, *permissive.state)) {
      violated("a state accepted with allow_nonfinite=false differs or is rejected with allow_nonfinite=true");
    }
  } else if (strict.code != gproj::ErrorCode::kNonFinite) {
    if (permissive.state || permissive.code != strict.code) {
      violated("allow_nonfinite=true changed a rejection that was not about non-finite values");
    }
  } else if (!permissive.state) {
    violated("a file rejected only for non-finite values is rejected with allow_nonfinite=true");
  }
  return 0;
}
