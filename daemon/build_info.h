// What this kvtierd is: its version (the project's, CMakeLists.txt) and the
// git revision it was built from ("unknown" outside a git checkout), read
// when the build was configured.
#pragma once

#include <string_view>

namespace kvtier::daemon {

std::string_view version();
std::string_view git_revision();

}  // namespace kvtier::daemon
