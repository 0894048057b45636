// What the fuzz targets (protocol_fuzz.cpp, router_fuzz.cpp) share: the
// flags each adds to libFuzzer's command line unless the user gave them,
// from its LLVMFuzzerInitialize, and the copy-out of a custom mutation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::fuzz {

// Appends each of `defaults` ("-name=value") whose "-name=" is not in argv.
inline void add_default_flags(int* argc, char*** argv,
                              std::initializer_list<std::string> defaults) {
  static std::vector<std::string> added;
  static std::vector<char*> args;
  args.assign(*argv, *argv + *argc);
  for (const std::string& flag : defaults) {
    const std::string_view name = std::string_view(flag).substr(0, flag.find('=') + 1);
    const bool given = std::any_of(args.begin(), args.end(), [&](const char* a) {
      return std::string_view(a).starts_with(name);
    });
    if (!given) added.push_back(flag);
  }
  for (std::string& flag : added) args.push_back(flag.data());
  *argc = static_cast<int>(args.size());
  args.push_back(nullptr);  // argv[argc] is null, as main's is
  *argv = args.data();
}

// A custom mutator's result: `out` copied over the input, cut to
// `max_size`; its length.
inline std::size_t mutation_out(const std::string& out, std::uint8_t* data, std::size_t max_size) {
  const std::size_t n = std::min(out.size(), max_size);
  std::memcpy(data, out.data(), n);
  return n;
}

}  // namespace kvtier::fuzz
