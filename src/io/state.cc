// Attention state files: validation of the q/k/v/do shapes and metadata, one-rounding conversion to bf16.
// Exercised by tests/io/state_test.cc and by every tool that loads a captured attention state.
#include "gproj/state.h"

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "gproj/error.h"
#include "io/messages.h"

namespace gproj {
namespace {

using io::fail;
using io::format_shape;
using io::quoted;

// Shortest decimal that reads back as the same value.
template <class T>
std::string format_number(T x) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, result.ptr);
}

std::vector<int64_t> extents_of(const Tensor<bf16>& t) { return {t.shape.begin(), t.shape.begin() + t.rank}; }

// q, do: (B, Nq, H, D); k, v: (B, Nk, Hkv, D).
void check_shapes(const std::vector<int64_t>& q, const std::vector<int64_t>& k, const std::vector<int64_t>& v,
                  const std::vector<int64_t>& dout, const std::string& what) {
  const std::pair<const char*, const std::vector<int64_t>*> tensors[] = {
      {"q", &q}, {"k", &k}, {"v", &v}, {"do", &dout}};
  for (const auto& [name, shape] : tensors) {
    if (shape->size() != 4) {
      fail(ErrorCode::kShape, what,
           "tensor " + quoted(name) + " has rank " + std::to_string(shape->size()) + " (shape " + format_shape(*shape) +
               "), expected rank 4 (B, N, heads, D)");
    }
  }
  if (q != dout) {
    fail(ErrorCode::kShape, what,
         "tensors \"q\" " + format_shape(q) + " and \"do\" " + format_shape(dout) + " differ in shape");
  }
  if (k != v) {
    fail(ErrorCode::kShape, what,
         "tensors \"k\" " + format_shape(k) + " and \"v\" " + format_shape(v) + " differ in shape");
  }
  if (q[0] != k[0]) {
    fail(ErrorCode::kShape, what,
         "batch size B differs: q has " + std::to_string(q[0]) + ", k and v have " + std::to_string(k[0]));
  }
  if (q[3] != k[3]) {
    fail(ErrorCode::kShape, what,
         "head dim D differs: q has " + std::to_string(q[3]) + ", k and v have " + std::to_string(k[3]));
  }
  if (q[3] <= 0) fail(ErrorCode::kShape, what, "head dim D = " + std::to_string(q[3]) + " must be positive");
  if (q[2] <= 0 || k[2] <= 0) {
    fail(ErrorCode::kShape, what,
         "head counts H = " + std::to_string(q[2]) + " and Hkv = " + std::to_string(k[2]) + " must be positive");
  }
  if (q[2] % k[2] != 0) {
    fail(ErrorCode::kShape, what,
         "H = " + std::to_string(q[2]) + " query heads is not a multiple of Hkv = " + std::to_string(k[2]) +
             " key/value heads");
  }
}

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

uint32_t load_u32(const uint8_t* p) {
  uint32_t u = 0;
  for (int i = 3; i >= 0; --i) u = u << 8 | p[i];
  return u;
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t u = 0;
  for (int i = 7; i >= 0; --i) u = u << 8 | p[i];
  return u;
}

float float_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// IEEE binary16 -> float, exact (float has more exponent range and significand bits than half).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return float_from_bits(sign | 0x7f800000u | mantissa << 13);  // Inf, or NaN with payload
  return float_from_bits(sign | (exponent - 15 + 127) << 23 | mantissa << 13);
}

// One correct rounding of a double to bf16. Going through float with round-to-nearest would round twice:
// a double just above a bf16 tie can land exactly on the tie in float and then go to even, i.e. down.
// Rounding to float with round-to-odd instead (truncate, and set the last bit if anything was cut off)
// keeps "exact / below / above the tie" visible, and since float has at least two more significand bits
// than bf16 in every binade (subnormals included), the final nearest-even rounding is then correct.
bf16 bf16_from_double(double x) {
  if (!std::isfinite(x)) return bf16::from_float(static_cast<float>(x));
  // Beyond FLT_MAX the truncation is +-FLT_MAX, whose last bit is already odd; it rounds to +-Inf in bf16,
  // as x does. Handled apart because casting such an x to float is undefined behaviour in C++.
  if (std::fabs(x) > FLT_MAX) return bf16::from_float(x > 0 ? FLT_MAX : -FLT_MAX);
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x) return bf16::from_float(f);
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) --u;  // rounded away from zero (so f != 0): truncate
  return bf16::from_float(float_from_bits(u | 1u));
}

bf16 element(const StoredTensor& t, size_t i) {
  switch (t.dtype) {
    case DType::kBF16: return bf16::from_bits(load_u16(&t.bytes[2 * i]));
    case DType::kF16: return bf16::from_float(half_to_float(load_u16(&t.bytes[2 * i])));
    case DType::kF32: return bf16::from_float(float_from_bits(load_u32(&t.bytes[4 * i])));
    case DType::kF64: {
      const uint64_t u = load_u64(&t.bytes[8 * i]);
      double d;
      std::memcpy(&d, &u, sizeof d);
      return bf16_from_double(d);
    }
  }
  return bf16();
}

// The stored element as a double (exact for every dtype), for messages.
double source_value(const StoredTensor& t, size_t i) {
  switch (t.dtype) {
    case DType::kBF16: return element(t, i).to_float();
    case DType::kF16: return half_to_float(load_u16(&t.bytes[2 * i]));
    case DType::kF32: return float_from_bits(load_u32(&t.bytes[4 * i]));
    case DType::kF64: {
      const uint64_t u = load_u64(&t.bytes[8 * i]);
      double d;
      std::memcpy(&d, &u, sizeof d);
      return d;
    }
  }
  return 0.0;
}

bool is_finite(bf16 x) { return (x.bits & 0x7f80u) != 0x7f80u; }

// (B, N, heads, D) tensor of rank 4, already shape-checked.
Tensor<bf16> convert(const std::string& name, const StoredTensor& t, const std::string& what, bool allow_nonfinite) {
  const std::vector<int64_t>& s = t.shape;
  Tensor<bf16> out({s[0], s[1], s[2], s[3]});
  for (size_t i = 0; i < out.values.size(); ++i) {
    const bf16 x = element(t, i);
    if (!allow_nonfinite && !is_finite(x)) {
      const std::string value = (x.bits & 0x7fu) != 0 ? "NaN" : (x.bits & 0x8000u) ? "-Inf" : "Inf";
      const double source = source_value(t, i);
      std::string problem = "tensor " + quoted(name) + " has a non-finite value at (b, n, h, d) = " +
                            format_index(out.view(), static_cast<int64_t>(i));
      if (std::isfinite(source)) {
        problem +=
            ": " + std::string(dtype_name(t.dtype)) + " value " + format_number(source) + " overflows bf16 to " + value;
      } else {
        problem += ": " + value;
      }
      fail(ErrorCode::kNonFinite, what, problem);
    }
    out.values[i] = x;
  }
  return out;
}

const StoredTensor& require_tensor(const SafetensorsFile& f, const char* name, const std::string& what) {
  const auto it = f.tensors.find(name);
  if (it == f.tensors.end()) fail(ErrorCode::kFormat, what, "missing tensor " + quoted(name));
  return it->second;
}

void check_scale(float scale, const std::string& text, const std::string& what) {
  if (!std::isfinite(scale) || scale <= 0.0f) {
    fail(ErrorCode::kInvalidArgument, what, "softmax_scale " + text + " must be a finite number > 0");
  }
}

float parse_scale(const std::string& text, const std::string& what) {
  float scale = 0.0f;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(text.data(), end, scale);
  if (result.ec != std::errc() || result.ptr != end) {
    fail(ErrorCode::kFormat, what, "metadata \"softmax_scale\" " + quoted(text) + " is not a decimal float");
  }
  check_scale(scale, quoted(text), what);
  return scale;
}

}  // namespace

AttentionState state_from_file(const SafetensorsFile& f, const std::string& what, bool allow_nonfinite) {
  const StoredTensor& q = require_tensor(f, "q", what);
  const StoredTensor& k = require_tensor(f, "k", what);
  const StoredTensor& v = require_tensor(f, "v", what);
  const StoredTensor& dout = require_tensor(f, "do", what);
  check_shapes(q.shape, k.shape, v.shape, dout.shape, what);

  AttentionState s;
  for (const auto& [key, value] : f.metadata) {
    if (key == "causal") {
      if (value != "true" && value != "false") {
        fail(ErrorCode::kFormat, what, "metadata \"causal\" is " + quoted(value) + ", expected \"true\" or \"false\"");
      }
      s.causal = value == "true";
    } else if (key == "softmax_scale") {
      s.softmax_scale = parse_scale(value, what);
    } else {
      s.provenance.emplace(key, value);
    }
  }
  if (f.metadata.count("causal") == 0) {
    fail(ErrorCode::kFormat, what, "metadata \"causal\" is missing (expected \"true\" or \"false\")");
  }

  s.q = convert("q", q, what, allow_nonfinite);
  s.k = convert("k", k, what, allow_nonfinite);
  s.v = convert("v", v, what, allow_nonfinite);
  s.dout = convert("do", dout, what, allow_nonfinite);
  return s;
}

AttentionState load_state(const std::string& path, bool allow_nonfinite) {
  return state_from_file(read_safetensors(path), path, allow_nonfinite);
}

void save_state(const std::string& path, const AttentionState& s) {
  check_shapes(extents_of(s.q), extents_of(s.k), extents_of(s.v), extents_of(s.dout), path);
  for (const char* reserved : {"causal", "softmax_scale"}) {
    if (s.provenance.count(reserved)) {
      fail(ErrorCode::kInvalidArgument, path,
           "provenance key " + quoted(reserved) + " is reserved for the state itself");
    }
  }
  if (s.softmax_scale) check_scale(*s.softmax_scale, format_number(*s.softmax_scale), path);

  SafetensorsFile f;
  const std::pair<const char*, const Tensor<bf16>*> tensors[] = {
      {"q", &s.q}, {"k", &s.k}, {"v", &s.v}, {"do", &s.dout}};
  for (const auto& [name, tensor] : tensors) {
    StoredTensor& t = f.tensors[name];
    t.dtype = DType::kBF16;
    t.shape = extents_of(*tensor);
    t.bytes.reserve(2 * tensor->values.size());
    for (bf16 x : tensor->values) {
      t.bytes.push_back(static_cast<uint8_t>(x.bits));
      t.bytes.push_back(static_cast<uint8_t>(x.bits >> 8));
    }
  }
  f.metadata = s.provenance;
  f.metadata["causal"] = s.causal ? "true" : "false";
  if (s.softmax_scale) f.metadata["softmax_scale"] = format_number(*s.softmax_scale);
  write_safetensors(path, f);
}

}  // namespace gproj
