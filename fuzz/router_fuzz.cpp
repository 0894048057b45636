// libFuzzer target for kvtier-router's front doors, JSON-RPC and HTTP: every
// input is one client's bytes, sent through the harness of
// router_fuzz_one.h (a real RouterServer in front of two stand-in
// daemons), which aborts when a property breaks. Build and run: see
// fuzz/CMakeLists.txt.
//
// A quarter of the mutations write a fresh client (router_fuzz_gen.h), an
// eighth a deep JSON-RPC line of the daemon protocol's generator, an eighth
// deepen the input; the rest are libFuzzer's own, on bytes.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz/fuzz_defaults.h"
#include "fuzz/protocol_fuzz_gen.h"
#include "fuzz/router_fuzz_gen.h"
#include "fuzz/router_fuzz_one.h"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// Unless the command line says otherwise: inputs up to a line at the
// router's default --max-line-bytes and one byte more (libFuzzer's default
// is 4 KiB), so an over-long line and a body over the limit are reachable.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  kvtier::fuzz::add_default_flags(argc, argv, {"-max_len=" + std::to_string((1 << 20) + 1)});
  return 0;
}

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  kvtier::wire::ProtocolFuzzRng pick(seed);
  std::string out;
  switch (pick.below(8)) {
    case 0:
    case 1:
      out = kvtier::router::RouterFuzzGen(pick.next(), max_size).input();
      break;
    case 2:
      out = kvtier::wire::ProtocolFuzzGen(pick.next(), max_size).input();
      break;
    case 3:
      out = kvtier::wire::ProtocolFuzzGen(pick.next(), max_size)
                .deepen(std::string_view(reinterpret_cast<const char*>(data), size));
      break;
    default:
      return LLVMFuzzerMutate(data, size, max_size);
  }
  return kvtier::fuzz::mutation_out(out, data, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One router for the whole run, as a real one serves client after client.
  static auto* harness =
      new kvtier::router::RouterFuzz(std::string(KVTIER_SOURCE_DIR) + "/models/fortunes-char");
  harness->one(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
