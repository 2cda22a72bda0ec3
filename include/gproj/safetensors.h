// Reader and writer of the safetensors format: u64 little-endian header length, JSON header, raw data.
// Exercised by tests/io/safetensors_test.cc (round trips of every dtype, atomic replace, each malformed case).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gproj {

enum class DType { kBF16, kF16, kF32, kF64 };

const char* dtype_name(DType dtype);  // "BF16", "F16", "F32", "F64": the spelling of the file format
size_t dtype_size(DType dtype);       // bytes per element

struct StoredTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major extents; empty for a scalar
  std::vector<uint8_t> bytes;  // raw little-endian elements, product(shape) * dtype_size(dtype) of them
};

struct SafetensorsFile {
  std::map<std::string, StoredTensor> tensors;
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" object
};

// Reads and validates a whole file. Throws gproj::Error naming `path`: kIO when the OS refuses the read,
// kDtype for an element type other than BF16/F16/F32/F64, kFormat for anything else that is malformed
// (truncation, bad JSON, wrong field types, negative extents, size mismatches, out-of-range, overlapping
// or gapped data). Bytes after the last tensor are allowed and ignored.
SafetensorsFile read_safetensors(const std::string& path);

// The validation of read_safetensors on an in-memory image; `what` names the source in messages.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what);

// Writes deterministically (tensors in name order, header padded with spaces to a multiple of 8 bytes)
// and atomically: "<path>.tmp.<pid>" in the same directory is written, fsynced and renamed over `path`;
// on failure the temporary is removed and `path` is left as it was. Throws kInvalidArgument for a tensor
// whose bytes do not match its shape and dtype, or a name that is not valid UTF-8 or is "__metadata__";
// kIO when the OS refuses.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

}  // namespace gproj
