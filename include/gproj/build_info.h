// Facts about this build that reports record as provenance: version, git commit, build type, compiler.
// The commit is generated at build time by cmake/build_info.cmake; exercised by `gproj check --json`.
#pragma once

namespace gproj {

const char* build_git_commit();  // 12-hex-digit commit, "-dirty" when tracked files differ, or "unknown"
inline const char* build_version() { return GPROJ_VERSION; }
inline const char* build_type() { return GPROJ_BUILD_TYPE; }
inline const char* build_compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

}  // namespace gproj
