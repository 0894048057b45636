// What this kvtier is: the project's version (CMakeLists.txt) and the git
// revision it was built from, as kvtierd and kvtierctl report them
// (--version, `health`, `stats`, /metrics, the start-up log).
//
// The revision is read at every build, not only when the build is
// configured, so a rebuild after a pull reports the new one; "-dirty" marks
// a tree with uncommitted changes, and "unknown" a build outside a git
// checkout.
#pragma once

#include <string>
#include <string_view>

namespace kvtier {

std::string_view version();
std::string_view git_revision();

// "kvtierd 0.1.0 (git 1a2b3c4d5e6f)": what `program --version` prints.
std::string version_text(std::string_view program);

}  // namespace kvtier
