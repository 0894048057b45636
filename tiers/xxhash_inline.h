// xxHash, compiled into the caller (XXH_INLINE_ALL) rather than called in
// Debian's libxxhash, which is built for baseline x86-64 (SSE2). Inline, the
// block checksums (L3, the remote tier) use the vector unit this build
// targets (AVX2 or AVX-512 under KVTIER_NATIVE): several times faster on
// block-sized values. The hashes are the same whatever the code path.
#pragma once

// AVX2 even where AVX-512 is there: GCC 12 warns of an uninitialised
// variable inside its own AVX-512 intrinsics once xxHash's loop is inlined
// (a false positive that no pragma reaches), and a checksum over memory
// gains little from the wider unit.
#if defined(__AVX2__)
#define XXH_VECTOR XXH_AVX2
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>
