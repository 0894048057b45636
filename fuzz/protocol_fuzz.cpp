// libFuzzer target for kvtierd's request parser: every input goes through
// protocol_fuzz_one (protocol_fuzz_one.h), which aborts when a property
// breaks. Build and run: see fuzz/CMakeLists.txt.
//
// Half of the mutations are libFuzzer's own, on bytes; the other half are
// structure-aware (protocol_fuzz_gen.h): a fresh request line, or the input
// with a nested value spliced in. Byte mutations alone never reach the depths
// that once overflowed the daemon's stack.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_defaults.h"
#include "fuzz/protocol_fuzz_gen.h"
#include "fuzz/protocol_fuzz_one.h"

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// Unless the command line says otherwise: inputs up to a line at kvtierd's
// default limit and one byte more (libFuzzer's default is 4 KiB, or the
// largest corpus file, far too short for deep lines), at full length from
// the start (-len_control=0: libFuzzer's length control would otherwise
// cap the mutator's max_size at a few bytes for the first minutes).
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  kvtier::fuzz::add_default_flags(
      argc, argv,
      {"-max_len=" + std::to_string(kvtier::wire::kProtocolFuzzMaxLineBytes + 1),
       "-len_control=0"});
  return 0;
}

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  kvtier::wire::ProtocolFuzzRng pick(seed);
  std::string out;
  switch (pick.below(4)) {
    case 0:
      out = kvtier::wire::ProtocolFuzzGen(pick.next(), max_size).input();
      break;
    case 1:
      out = kvtier::wire::ProtocolFuzzGen(pick.next(), max_size)
                .deepen(std::string_view(reinterpret_cast<const char*>(data), size));
      break;
    default:
      return LLVMFuzzerMutate(data, size, max_size);
  }
  return kvtier::fuzz::mutation_out(out, data, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvtier::wire::protocol_fuzz_one(data, size);
  return 0;
}
