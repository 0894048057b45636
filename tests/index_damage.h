// Damage done to an L3 index directory between two runs, as a disk, a
// person or a script might: the kinds both the index's tests
// (l3_index_test.cpp) and the store's (l3_store_test.cpp) must find moved
// aside. Each test adds the kinds only it can tell apart.
#pragma once

#include <filesystem>
#include <vector>

#include "tests/test_util.h"

namespace kvtier::test_util {

struct IndexDamage {
  const char* name;
  void (*apply)(const std::filesystem::path& index);
};

inline std::vector<IndexDamage> index_damage_kinds() {
  return {
      {"CURRENT deleted",
       [](const std::filesystem::path& index) { std::filesystem::remove(index / "CURRENT"); }},
      {"the MANIFEST deleted",
       [](const std::filesystem::path& index) {
         for (const auto& e : std::filesystem::directory_iterator(index))
           if (e.path().filename().string().starts_with("MANIFEST-"))
             std::filesystem::remove(e.path());
       }},
      {"every file replaced by garbage",
       [](const std::filesystem::path& index) {
         for (const auto& e : std::filesystem::directory_iterator(index))
           if (e.is_regular_file() && e.path().filename() != "LOCK")
             write_file(e.path(), "garbage, not a RocksDB file\n");
       }},
      {"the index path a regular file",
       [](const std::filesystem::path& index) {
         std::filesystem::remove_all(index);
         write_file(index, "x");
       }},
  };
}

}  // namespace kvtier::test_util
