// engine/cache/tier.h: the one table of the tiers, and PerTier. Besides
// PerTier's arithmetic, a check of the claim the header makes: no code
// outside it names a tier ("l1", "L2", ...) or sizes an array of four by
// hand, so that a tier added there is counted on every surface at once.
#include "engine/cache/tier.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace kvtier {
namespace {

namespace fs = std::filesystem;

TEST(TierTest, PerTierIsIndexedByTierOrNumberAndSums) {
  PerTier<int> v;
  v[Tier::kL1] = 1;
  v[2] = 3;
  v[Tier::kRemote] = 5;
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[Tier::kL3], 3);
  EXPECT_EQ(v.total(), 9);
  EXPECT_EQ(PerTier<int>::size(), kNumTiers);
  EXPECT_STREQ(to_string(Tier::kRemote), kTierNames[kNumTiers - 1].name);
}

// A line's code: what precedes a // comment that is not inside a string.
std::string code_of(const std::string& line) {
  bool quoted = false;
  for (std::size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] == '\\' && quoted) {
      ++i;
    } else if (line[i] == '"') {
      quoted = !quoted;
    } else if (!quoted && line[i] == '/' && line[i + 1] == '/') {
      return line.substr(0, i);
    }
  }
  return line;
}

TEST(TierTest, NoCodeOutsideTheTableNamesOrCountsTheTiers) {
  const fs::path root = KVTIER_SOURCE_DIR;
  // A tier's name or label as a string of its own ("l1", "L3"), but not a
  // path's last part (dir / "l3": L3's folder), which is taken out first.
  const std::regex name(R"re("(l[123]|L[123])")re");
  const std::regex path_part(R"re(/\s*"l3")re");
  // An array of four where arrays per tier would be (the surfaces that
  // count or show the tiers): "[4]" or "std::array<T, 4>".
  const std::regex four(R"re(\[4\]|std::array<[^<>]*,\s*4\s*>)re");
  // Lines that match but are not about the tier table, each with why.
  struct Allowed {
    const char* file;
    const char* line;
    const char* why;
  };
  const Allowed allowed[] = {
      {"bench/soak.cpp", "{\"l1\", {\"L1 recompute\"",
       "the L1-only setup's tag, in its files' names (scripts/plot_soak.sh reads them)"},
  };
  struct Folder {
    const char* path;
    bool counts;  // held to `four` as well as `name`
  };
  int files = 0;
  for (const Folder folder :
       {Folder{"engine", true}, Folder{"tiers", true}, Folder{"wire", true}, Folder{"daemon", true},
        Folder{"router", true}, Folder{"ctl", true}, Folder{"bench", true},
        Folder{"kernels", false}, Folder{"util", false}, Folder{"fuzz", false}}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder.path)) {
      const fs::path& p = entry.path();
      const std::string ext = p.extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
      const std::string rel = fs::relative(p, root).string();
      if (rel == "engine/cache/tier.h") continue;
      ++files;
      std::ifstream in(p);
      int number = 0;
      for (std::string line; std::getline(in, line);) {
        ++number;
        const std::string code = std::regex_replace(code_of(line), path_part, "");
        const bool named = std::regex_search(code, name);
        const bool counted = folder.counts && std::regex_search(code, four);
        bool ok = !named && !counted;
        for (const Allowed& a : allowed)
          ok = ok || (rel == a.file && line.find(a.line) != std::string::npos);
        EXPECT_TRUE(ok) << rel << ":" << number << " names or counts the tiers by hand "
                        << "(use kTierNames, kNumTiers, PerTier): " << line;
      }
    }
  }
  EXPECT_GT(files, 100);
}

}  // namespace
}  // namespace kvtier
