// A credential kept in a file (the remote tier's secret and Redis
// password): read whole, refused when every user of the machine may read it
// (like ssh's keys: a secret the whole machine can read protects nothing),
// and with one trailing newline, as editors leave, dropped.
#pragma once

#include <cstddef>
#include <expected>
#include <string>

namespace kvtier::util {

// The file's contents, or why not, starting "SETTING PATH: ".
std::expected<std::string, std::string> read_private_file(const std::string& setting,
                                                          const std::string& path,
                                                          std::size_t max_bytes);

}  // namespace kvtier::util
