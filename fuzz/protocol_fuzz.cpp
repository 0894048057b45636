// libFuzzer target for kvtierd's request parser: every input goes through
// protocol_fuzz_one (protocol_fuzz_one.h), which aborts when a property
// breaks. Build and run: see fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>

#include "fuzz/protocol_fuzz_one.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvtier::daemon::protocol_fuzz_one(data, size);
  return 0;
}
