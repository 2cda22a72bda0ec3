// Safetensors reader (strict validation of header, extents and offsets) and atomic, deterministic writer.
// Exercised by tests/io/safetensors_test.cc and, through parse_safetensors, by the header fuzzer.
#include "gproj/safetensors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "gproj/error.h"
#include "io/messages.h"
#include "io/file.h"

namespace gproj {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

using io::fail;
using io::format_shape;
using io::quoted;

std::string format_range(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

bool dtype_from_name(const std::string& name, DType* dtype) {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32, DType::kF64}) {
    if (name == dtype_name(d)) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

// Byte count of a tensor with non-negative extents `shape`. Every partial product of the non-zero extents
// must fit in int64 (so strides derived from the shape cannot overflow either) and the byte count in
// uint64; false otherwise.
bool checked_byte_count(const std::vector<int64_t>& shape, DType dtype, uint64_t* bytes) {
  int64_t product = 1;
  bool empty = false;
  for (int64_t extent : shape) {
    if (extent == 0) {
      empty = true;
      continue;
    }
    if (product > kInt64Max / extent) return false;
    product *= extent;
  }
  const uint64_t numel = empty ? 0 : static_cast<uint64_t>(product);
  if (numel > std::numeric_limits<uint64_t>::max() / dtype_size(dtype)) return false;
  *bytes = numel * dtype_size(dtype);
  return true;
}

// Parses the JSON header, rejecting duplicate keys in any object: nlohmann would silently keep the last
// one, and a duplicated tensor name would make the file mean two things.
nlohmann::json parse_header(const uint8_t* begin, const uint8_t* end, const std::string& what) {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each open object, innermost last
  auto reject_duplicates = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    switch (event) {
      case nlohmann::json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case nlohmann::json::parse_event_t::key: {
        const auto& key = parsed.get_ref<const std::string&>();
        if (!open_objects.back().insert(key).second)
          fail(ErrorCode::kFormat, what, "duplicate key " + quoted(key) + " in header");
        break;
      }
      case nlohmann::json::parse_event_t::object_end: open_objects.pop_back(); break;
      default: break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(begin, end, reject_duplicates);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kFormat, what, std::string("invalid JSON header: ") + e.what());
  }
}

// A JSON integer >= 0 (nlohmann stores "-0" as a signed zero, hence the two cases).
bool get_nonnegative(const nlohmann::json& j, uint64_t* value) {
  if (j.is_number_unsigned()) {
    *value = j.get<uint64_t>();
    return true;
  }
  if (!j.is_number_integer() || j.get<int64_t>() < 0) return false;
  *value = static_cast<uint64_t>(j.get<int64_t>());
  return true;
}

struct Entry {
  StoredTensor tensor;
  uint64_t begin = 0, end = 0;  // data_offsets
};

Entry parse_entry(const std::string& name, const nlohmann::json& json, const uint8_t* data, uint64_t data_size,
                  const std::string& what) {
  const std::string where = "tensor " + quoted(name) + ": ";
  if (!json.is_object()) fail(ErrorCode::kFormat, what, where + "entry is not a JSON object");
  for (const auto& field : json.items()) {
    if (field.key() != "dtype" && field.key() != "shape" && field.key() != "data_offsets") {
      fail(ErrorCode::kFormat, what, where + "unexpected field " + quoted(field.key()));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!json.contains(field)) fail(ErrorCode::kFormat, what, where + "missing field " + quoted(field));
  }

  Entry e;
  StoredTensor& t = e.tensor;
  const nlohmann::json& dtype = json["dtype"];
  if (!dtype.is_string()) fail(ErrorCode::kFormat, what, where + "\"dtype\" is not a string");
  if (!dtype_from_name(dtype.get_ref<const std::string&>(), &t.dtype)) {
    fail(ErrorCode::kDtype, what,
         where + "unknown dtype " + quoted(dtype.get_ref<const std::string&>()) + " (expected BF16, F16, F32 or F64)");
  }

  const nlohmann::json& shape = json["shape"];
  if (!shape.is_array()) fail(ErrorCode::kFormat, what, where + "\"shape\" is not an array");
  for (const nlohmann::json& extent : shape) {
    if (!extent.is_number_integer()) fail(ErrorCode::kFormat, what, where + "\"shape\" holds a non-integer");
    uint64_t value;
    if (!get_nonnegative(extent, &value)) {
      fail(ErrorCode::kFormat, what, where + "negative extent " + extent.dump() + " in shape");
    }
    if (value > static_cast<uint64_t>(kInt64Max)) {
      fail(ErrorCode::kFormat, what, where + "extent " + extent.dump() + " overflows int64");
    }
    t.shape.push_back(static_cast<int64_t>(value));
  }
  uint64_t byte_count;
  if (!checked_byte_count(t.shape, t.dtype, &byte_count)) {
    fail(ErrorCode::kFormat, what, where + "element count of shape " + format_shape(t.shape) + " overflows");
  }

  const nlohmann::json& offsets = json["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !get_nonnegative(offsets[0], &e.begin) ||
      !get_nonnegative(offsets[1], &e.end)) {
    fail(ErrorCode::kFormat, what, where + "\"data_offsets\" is not an array of two non-negative integers");
  }
  const std::string range = "data_offsets " + format_range(e.begin, e.end);
  if (e.end < e.begin) fail(ErrorCode::kFormat, what, where + range + " are reversed");
  if (e.end - e.begin != byte_count) {
    fail(ErrorCode::kFormat, what,
         where + range + " span " + std::to_string(e.end - e.begin) + " bytes but shape " + format_shape(t.shape) +
             " of " + dtype_name(t.dtype) + " needs " + std::to_string(byte_count));
  }
  if (e.end > data_size) {
    fail(ErrorCode::kFormat, what,
         where + range + " run out of range of the data section (" + std::to_string(data_size) + " bytes)");
  }
  t.bytes.assign(data + e.begin, data + e.end);
  return e;
}

struct Placement {
  uint64_t begin, end;
  const std::string* name;
};

// The tensors must tile the data section from offset 0 without overlaps or gaps; only bytes after the last
// tensor are tolerated.
void check_placements(std::vector<Placement> placements, const std::string& what) {
  std::sort(placements.begin(), placements.end(),
            [](const Placement& a, const Placement& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t next = 0;
  const Placement* previous = nullptr;
  for (const Placement& p : placements) {
    if (p.begin < next) {
      fail(ErrorCode::kFormat, what,
           "tensors " + quoted(*previous->name) + " " + format_range(previous->begin, previous->end) + " and " +
               quoted(*p.name) + " " + format_range(p.begin, p.end) + " overlap");
    }
    if (p.begin > next) {
      fail(ErrorCode::kFormat, what,
           "gap of " + std::to_string(p.begin - next) + " unused bytes before tensor " + quoted(*p.name) +
               " at data offset " + std::to_string(next));
    }
    next = p.end;
    previous = &p;
  }
}

// The header text: "__metadata__" first, then the tensors in name order with consecutive offsets, padded
// with spaces to a multiple of 8 bytes so that the data section starts aligned.
std::string build_header(const SafetensorsFile& file, const std::string& what) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    const std::string where = "tensor " + quoted(name) + ": ";
    if (name == "__metadata__") fail(ErrorCode::kInvalidArgument, what, "a tensor cannot be named \"__metadata__\"");
    for (int64_t extent : t.shape) {
      if (extent < 0)
        fail(ErrorCode::kInvalidArgument, what, where + "negative extent in shape " + format_shape(t.shape));
    }
    uint64_t byte_count;
    if (!checked_byte_count(t.shape, t.dtype, &byte_count) || byte_count != t.bytes.size()) {
      fail(ErrorCode::kInvalidArgument, what,
           where + "holds " + std::to_string(t.bytes.size()) + " bytes, which does not match shape " +
               format_shape(t.shape) + " of " + dtype_name(t.dtype));
    }
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", nlohmann::ordered_json::array({offset, offset + byte_count})}};
    offset += byte_count;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::type_error&) {
    fail(ErrorCode::kInvalidArgument, what, "a tensor name or metadata string is not valid UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
  }
  return "?";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF32: return 4;
    case DType::kF64: return 8;
  }
  return 0;
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 8) {
    fail(ErrorCode::kFormat, what, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | data[i];
  if (header_size > kMaxHeaderBytes) {
    fail(ErrorCode::kFormat, what,
         "header length " + std::to_string(header_size) + " is absurdly large (limit " +
             std::to_string(kMaxHeaderBytes) + " bytes)");
  }
  if (header_size > size - 8) {
    fail(ErrorCode::kFormat, what,
         "header length " + std::to_string(header_size) + " runs beyond the end of the file (" +
             std::to_string(size - 8) + " bytes after the length field)");
  }
  const uint8_t* header_begin = data + 8;
  const uint8_t* data_begin = header_begin + header_size;
  const uint64_t data_size = size - 8 - header_size;

  const nlohmann::json header = parse_header(header_begin, data_begin, what);
  if (!header.is_object()) fail(ErrorCode::kFormat, what, "header is not a JSON object");

  SafetensorsFile file;
  std::vector<Placement> placements;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) fail(ErrorCode::kFormat, what, "\"__metadata__\" is not a JSON object");
      for (const auto& m : item.value().items()) {
        if (!m.value().is_string())
          fail(ErrorCode::kFormat, what, "metadata value of " + quoted(m.key()) + " is not a string");
        file.metadata.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    Entry e = parse_entry(item.key(), item.value(), data_begin, data_size, what);
    const auto inserted = file.tensors.emplace(item.key(), std::move(e.tensor));
    placements.push_back({e.begin, e.end, &inserted.first->first});
  }
  check_placements(std::move(placements), what);
  return file;
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return parse_safetensors(bytes.data(), bytes.size(), path);
}

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  const std::string header = build_header(file, path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::vector<FilePiece> pieces{{length, sizeof length}, {header.data(), header.size()}};
  for (const auto& entry : file.tensors) pieces.push_back({entry.second.bytes.data(), entry.second.bytes.size()});
  write_file_atomic(path, pieces);
}

}  // namespace gproj
