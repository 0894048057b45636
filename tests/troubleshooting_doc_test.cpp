// docs/troubleshooting.md quotes what kvtierd, kvtier-router and kvtierctl
// print, so that an operator can search for the words on the screen. Each
// quote must still be what the code prints: with its example values (a
// path, a uid, an errno's words) taken for the variable parts they are,
// every other part of it is in the strings the sources hold, piece by
// piece, in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;

// Every string literal of the sources a message can come from, adjacent
// ones joined as the compiler joins them.
std::vector<std::string> source_strings() {
  const fs::path root = KVTIER_SOURCE_DIR;
  std::vector<std::string> out;
  for (const char* folder :
       {"wire", "daemon", "engine", "tiers", "ctl", "router", "util", "kernels"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / folder)) {
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cpp" && ext != ".cu") continue;
      const std::string text = test_util::read_file(entry.path());
      std::string joined;
      std::size_t after_last = std::string::npos;  // where the last literal ended
      for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != '"' || (i > 0 && text[i - 1] == '\'')) continue;
        std::string literal;
        std::size_t j = i + 1;
        for (; j < text.size() && text[j] != '"'; ++j) {
          if (text[j] == '\\' && j + 1 < text.size()) {
            ++j;
            literal += text[j] == 'n' ? '\n' : text[j];
          } else {
            literal += text[j];
          }
        }
        const bool adjacent =
            after_last != std::string::npos && text.find_first_not_of(" \t\r\n", after_last) == i;
        if (adjacent) {
          joined += literal;
        } else {
          if (!joined.empty()) out.push_back(joined);
          joined = literal;
        }
        after_last = j + 1;
        i = j;
      }
      if (!joined.empty()) out.push_back(joined);
    }
  }
  return out;
}

bool joiner(char c) { return !std::isalnum(static_cast<unsigned char>(c)); }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && joiner(s.front())) s.remove_prefix(1);
  while (!s.empty() && joiner(s.back())) s.remove_suffix(1);
  return s;
}

// Whether `text` is made of pieces each of which some source string holds,
// the longest piece first: at least 8 characters, or else a whole string
// but for its punctuation (a value the code puts in, "AF_INET", "L3", or a
// short part of a message, " sockets"). Punctuation and spaces between
// pieces join them ("(", "): ") and need no source.
bool in_sources(std::string_view text, const std::vector<std::string>& strings,
                std::string& missing) {
  std::set<std::string_view> wholes;
  for (const std::string& s : strings) wholes.insert(trimmed(s));
  for (;;) {
    while (!text.empty() && joiner(text.front())) text.remove_prefix(1);
    if (text.empty()) return true;
    std::size_t best = 0;
    for (const std::string& s : strings) {
      for (std::size_t n = std::min(text.size(), s.size()); n > best; --n) {
        if (s.find(text.substr(0, n)) != std::string::npos) {
          best = n;
          break;
        }
      }
    }
    if (best < 8) {  // the longest whole one that ends a word
      std::size_t n = best;
      for (; n > 0; --n)
        if ((n == text.size() || joiner(text[n])) && wholes.contains(trimmed(text.substr(0, n))))
          break;
      best = n;
    }
    if (best == 0) {
      missing = std::string(text);
      return false;
    }
    text.remove_prefix(best);
  }
}

// The quotes: indented lines that start with a program's name, and the
// backticked first cells of the tables of refusals.
std::vector<std::string> quotes(const std::string& page) {
  std::vector<std::string> out;
  std::istringstream in(page);
  for (std::string line; std::getline(in, line);) {
    for (const char* program : {"    kvtierd: ", "    kvtierctl: ", "    kvtier-router: "}) {
      if (line.starts_with(program)) out.push_back(line.substr(4));
    }
    if (line.starts_with("| `") && line.find("` |") != std::string::npos &&
        line.find("| kvtier") == std::string::npos)  // not the exit codes' rows
      out.push_back(line.substr(3, line.find("` |") - 3));
  }
  return out;
}

TEST(TroubleshootingDocTest, EveryMessageThePageQuotesIsOneTheCodePrints) {
  const std::string page =
      test_util::read_file(fs::path(KVTIER_SOURCE_DIR) / "docs/troubleshooting.md");
  ASSERT_FALSE(page.empty());
  const std::vector<std::string> strings = source_strings();
  ASSERT_GT(strings.size(), 1000u);
  // The page's example values, for the variable parts they stand for;
  // longest first. "..." is the page's own mark for one.
  const std::vector<std::pair<std::string, std::string>> examples = {
      {"/run/user/1000/kvtier/kvtierd.sock", "..."},
      {"/run/kvtier/kvtierd.sock", "..."},
      {"redis://10.0.0.5:6379", "..."},
      {"/var/lib/kvtier/l3", "..."},
      {"/run/kvtier", "..."},
      {"No such file or directory", "..."},
      {"Permission denied", "..."},
      {"Cannot allocate memory", "..."},
      {"268435456", "..."},
      {"socket_group kvtier:", "socket_group ...:"},
      {"uid N", "uid ..."},
      {"group N", "group ..."},
  };
  const std::vector<std::string> prefixes = {
      "kvtierd: error: ", "kvtierd: warning: ", "kvtier-router: error: ", "kvtierctl: "};
  int checked = 0;
  for (std::string quote : quotes(page)) {
    const std::string original = quote;
    for (const std::string& p : prefixes)
      if (quote.starts_with(p)) quote.erase(0, p.size());
    for (const auto& [example, mark] : examples) {
      for (std::size_t at; (at = quote.find(example)) != std::string::npos;)
        quote.replace(at, example.size(), mark);
    }
    std::size_t from = 0;
    for (std::size_t cut; from <= quote.size(); from = cut + 3) {
      cut = quote.find("...", from);
      if (cut == std::string::npos) cut = quote.size();
      const std::string part = quote.substr(from, cut - from);
      std::string missing;
      const bool alnum = std::any_of(part.begin(), part.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c));
      });
      if (alnum) {
        EXPECT_TRUE(in_sources(part, strings, missing))
            << "docs/troubleshooting.md quotes \"" << original << "\": no source prints \""
            << missing << "\"";
        ++checked;
      }
      if (cut == quote.size()) break;
    }
  }
  EXPECT_GE(checked, 15);
}

}  // namespace
}  // namespace kvtier
