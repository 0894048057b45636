#include "util/private_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kvtier::util {

std::expected<std::string, std::string> read_private_file(const std::string& setting,
                                                          const std::string& path,
                                                          std::size_t max_bytes) {
  const std::string where = setting + " " + path + ": ";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::unexpected(where + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return std::unexpected(where + "not a file");
  if ((st.st_mode & S_IROTH) != 0)
    return std::unexpected(where + "readable by every user of the machine; chmod o-r it");
  if (static_cast<std::size_t>(st.st_size) > max_bytes + 1)
    return std::unexpected(where + "more than " + std::to_string(max_bytes) + " bytes");
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::unexpected(where + "cannot be read");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.size() > max_bytes)
    return std::unexpected(where + "more than " + std::to_string(max_bytes) + " bytes");
  return text;
}

}  // namespace kvtier::util
