// Whole-file reads and crash-safe writes (temporary file in the same directory, fsync, rename, directory
// fsync). Exercised by tests/io/file_test.cc and by every writer: state files, reports, `gproj run` outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gproj {

struct FilePiece {
  const void* data;
  size_t size;
};

// Reads the whole file; throws ErrorCode::kIO naming the path and the system's reason.
std::vector<uint8_t> read_file(const std::string& path);

// Writes the pieces in order to "<path>.tmp.<pid>", syncs it, renames it over `path` and syncs the directory.
// On any failure the temporary file is removed and `path` is untouched; throws ErrorCode::kIO.
void write_file_atomic(const std::string& path, const std::vector<FilePiece>& pieces);
void write_text_atomic(const std::string& path, const std::string& text);

// Checks, before long work, that write_file_atomic(path, ...) can create its temporary file: creates and removes
// "<path>.tmp.<pid>" (`path` itself is not touched); throws ErrorCode::kIO naming the path and the reason (a
// missing folder, no permission) otherwise.
void check_writable(const std::string& path);

}  // namespace gproj
