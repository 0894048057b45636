#include "daemon/build_info.h"

namespace kvtier::daemon {

std::string_view version() { return KVTIER_VERSION; }
std::string_view git_revision() { return KVTIER_GIT_REVISION; }

}  // namespace kvtier::daemon
