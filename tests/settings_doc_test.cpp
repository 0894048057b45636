// The documentation of the settings against the code: docs/protocol.md's
// settings table (under "### config.get") against the settings table
// (daemon/settings_table.cpp), and docs/tuning.md's block sizes and sizing
// table against the KV layout, the int8 encoding and kvtierd's sizes.
//
// The protocol table is read strictly: its header and rule as written
// below, one row per setting in `kvtierd --help`'s order, five cells a row.
// A setting missing from the doc, a row the code lacks, a row named twice,
// and a row whose runtime, default or accepted values are not the code's
// each fail, naming the row's line. Cells:
//   setting  `name`
//   runtime  yes | no
//   default  a code span holding the JSON value config.get's "default"
//            gives, then optionally a note in brackets (" (256 MiB)"); or,
//            for model and socket, text starting "found at start"
//   accepts  bool | text | directory | int|bytes|seconds in [MIN, MAX]
//            (a number or 2^N each) | one of `"a"`, `"b"` (in the code's
//            order)
//   meaning  any text, not empty
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <expected>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.h"
#include "daemon/setting_flags.h"
#include "engine/model/kv_layout.h"
#include "engine/model/model_config.h"
#include "kernels/kv_quant.h"
#include "test_util.h"
#include "tiers/align.h"

namespace kvtier::daemon {
namespace {

using nlohmann::json;

constexpr std::string_view kSection = "### config.get";
constexpr std::string_view kHeader = "| setting | runtime | default | accepts | meaning |";
constexpr std::string_view kRule = "| --- | --- | --- | --- | --- |";
constexpr std::string_view kFoundAtStart = "found at start";

std::string read_doc(std::string_view name) {
  return test_util::read_file(std::filesystem::path(KVTIER_SOURCE_DIR) / "docs" / name);
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// A table line's cells, split at every '|' not escaped as "\|" and trimmed;
// nullopt unless the line starts and ends with '|'.
std::optional<std::vector<std::string>> cells_of(std::string_view line) {
  if (line.size() < 2 || line.front() != '|' || line.back() != '|') return std::nullopt;
  std::vector<std::string> cells;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.emplace_back(trimmed(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

struct DocRow {
  int line = 0;  // in the markdown, from 1
  std::string setting, runtime, default_value, accepts, meaning;
};

// The rows of the settings table in the "### config.get" section. Refused:
// no such section, no header and rule as above, a table line anywhere else
// in the section (a second table, or the table broken in two), a row of
// other than five cells.
std::expected<std::vector<DocRow>, std::string> doc_settings_table(std::string_view markdown) {
  const std::vector<std::string_view> lines = lines_of(markdown);
  std::size_t i = 0;
  while (i < lines.size() && lines[i] != kSection) ++i;
  if (i == lines.size()) return std::unexpected("no \"" + std::string(kSection) + "\" section");
  std::size_t end = i + 1;
  while (end < lines.size() && !lines[end].starts_with("#")) ++end;
  std::size_t header = i + 1;
  while (header < end && lines[header] != kHeader) {
    if (lines[header].starts_with("|"))
      return std::unexpected("line " + std::to_string(header + 1) +
                             ": a table line before the settings table's header");
    ++header;
  }
  if (header == end) return std::unexpected("no settings table: \"" + std::string(kHeader) + "\"");
  if (header + 1 == end || lines[header + 1] != kRule)
    return std::unexpected("line " + std::to_string(header + 2) + ": not \"" + std::string(kRule) +
                           "\"");
  std::vector<DocRow> rows;
  std::size_t k = header + 2;
  for (; k < end && lines[k].starts_with("|"); ++k) {
    const auto cells = cells_of(lines[k]);
    const int line = static_cast<int>(k + 1);
    if (!cells || cells->size() != 5)
      return std::unexpected("line " + std::to_string(line) + ": a row of " +
                             std::to_string(cells ? cells->size() : 0) + " cells, not 5");
    rows.push_back({line, (*cells)[0], (*cells)[1], (*cells)[2], (*cells)[3], (*cells)[4]});
  }
  for (; k < end; ++k) {
    if (lines[k].starts_with("|"))
      return std::unexpected("line " + std::to_string(k + 1) +
                             ": a table line after the settings table ended");
  }
  return rows;
}

// "1048576", "0.001", "2^30".
std::optional<double> number_of(std::string_view text) {
  if (const std::size_t caret = text.find('^'); caret != std::string_view::npos) {
    if (text.substr(0, caret) != "2") return std::nullopt;
    const auto power = number_of(text.substr(caret + 1));
    if (!power || *power != std::floor(*power)) return std::nullopt;
    return std::ldexp(1.0, static_cast<int>(*power));
  }
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// What an accepts cell says.
struct Accepts {
  std::string kind;  // bool, text, directory, int, bytes, seconds, one of
  double min = 0, max = 0;
  std::vector<std::string> choices;
};

std::expected<Accepts, std::string> accepts_of(std::string_view cell) {
  Accepts a;
  if (cell == "bool" || cell == "text" || cell == "directory") {
    a.kind = cell;
    return a;
  }
  if (cell.starts_with("one of ")) {
    a.kind = "one of";
    std::string_view rest = cell.substr(7);
    while (true) {
      if (!rest.starts_with('`')) return std::unexpected("a choice not in a code span");
      const std::size_t close = rest.find('`', 1);
      if (close == std::string_view::npos) return std::unexpected("an unclosed code span");
      const json choice = json::parse(rest.substr(1, close - 1), nullptr, false);
      if (!choice.is_string()) return std::unexpected("a choice that is not a JSON string");
      a.choices.push_back(choice.get<std::string>());
      rest.remove_prefix(close + 1);
      if (rest.empty()) return a;
      if (!rest.starts_with(", ")) return std::unexpected("choices not separated by \", \"");
      rest.remove_prefix(2);
    }
  }
  const std::size_t in = cell.find(" in [");
  if (in == std::string_view::npos || !cell.ends_with("]"))
    return std::unexpected("neither bool, text, directory, a range nor choices");
  a.kind = cell.substr(0, in);
  const std::string_view ends = cell.substr(in + 5, cell.size() - in - 6);
  const std::size_t comma = ends.find(", ");
  if (comma == std::string_view::npos) return std::unexpected("a range without \", \"");
  const auto min = number_of(ends.substr(0, comma));
  const auto max = number_of(ends.substr(comma + 2));
  if (!min || !max) return std::unexpected("a range end that is not a number");
  a.min = *min;
  a.max = *max;
  return a;
}

std::string kind_of(SettingType type) {
  switch (type) {
    case SettingType::kBool:
      return "bool";
    case SettingType::kInt:
      return "int";
    case SettingType::kBytes:
      return "bytes";
    case SettingType::kSeconds:
      return "seconds";
    case SettingType::kText:
      return "text";
    case SettingType::kDirectory:
      return "directory";
    case SettingType::kChoice:
      return "one of";
  }
  return "?";
}

// What one row states that the code does not: empty when they agree.
std::vector<std::string> row_vs_code(const DocRow& row, const Setting& s) {
  std::vector<std::string> problems;
  const std::string at = "line " + std::to_string(row.line) + ", " + s.name + ": ";
  if (row.runtime != (s.runtime ? "yes" : "no"))
    problems.push_back(at + "runtime says '" + row.runtime + "', the code " +
                       (s.runtime ? "yes" : "no"));
  if (s.default_found_at_start) {
    if (!row.default_value.starts_with(kFoundAtStart))
      problems.push_back(at + "the default is found at start, so the cell must begin \"" +
                         std::string(kFoundAtStart) + "\"");
  } else {
    const std::string_view cell = row.default_value;
    const std::size_t close = cell.starts_with('`') ? cell.find('`', 1) : std::string_view::npos;
    const std::string_view note = close == std::string_view::npos ? "" : cell.substr(close + 1);
    const json value = close == std::string_view::npos
                           ? json(json::value_t::discarded)
                           : json::parse(cell.substr(1, close - 1), nullptr, false);
    if (value.is_discarded()) {
      problems.push_back(at + "the default '" + row.default_value +
                         "' does not start with a JSON value in a code span");
    } else if (value != s.get(DaemonConfig{})) {
      problems.push_back(at + "the default is " + value.dump() + ", the code's " +
                         s.get(DaemonConfig{}).dump());
    } else if (!note.empty() && !(note.starts_with(" (") && note.ends_with(")"))) {
      problems.push_back(at + "after the default only a note in brackets, not '" +
                         std::string(note) + "'");
    }
  }
  const auto accepts = accepts_of(row.accepts);
  if (!accepts) {
    problems.push_back(at + "accepts '" + row.accepts + "': " + accepts.error());
  } else if (accepts->kind != kind_of(s.type)) {
    problems.push_back(at + "accepts " + accepts->kind + ", the code " + kind_of(s.type));
  } else if (s.type == SettingType::kChoice) {
    const std::vector<std::string> code(s.choices.begin(), s.choices.end());
    if (accepts->choices != code)
      problems.push_back(at + "choices " + json(accepts->choices).dump() + ", the code's " +
                         json(code).dump());
  } else if (accepts->min != s.range.min || accepts->max != s.range.max) {
    problems.push_back(at + "range [" + range_end_text(accepts->min) + ", " +
                       range_end_text(accepts->max) + "], the code's [" +
                       range_end_text(s.range.min) + ", " + range_end_text(s.range.max) + "]");
  }
  if (row.meaning.empty()) problems.push_back(at + "no meaning");
  return problems;
}

// Where the doc's table and the code's disagree, one line each: empty when
// they agree.
std::vector<std::string> doc_vs_code(const std::vector<DocRow>& rows) {
  std::vector<std::string> problems;
  std::set<std::string> listed;
  std::vector<const Setting*> in_order;
  for (const DocRow& row : rows) {
    const std::string at = "line " + std::to_string(row.line) + ": ";
    const std::string_view cell = row.setting;
    const std::string name(cell.size() < 3 ? "" : cell.substr(1, cell.size() - 2));
    if (!cell.starts_with('`') || !cell.ends_with('`') || name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
      problems.push_back(at + "'" + row.setting + "' is not one `name`");
      continue;
    }
    const Setting* s = setting_find(name);
    if (s == nullptr) {
      problems.push_back(at + name + " is not a setting (daemon/settings_table.cpp has no row)");
      continue;
    }
    if (!listed.insert(name).second) {
      problems.push_back(at + name + " is listed twice");
      continue;
    }
    in_order.push_back(s);
    for (std::string& p : row_vs_code(row, *s)) problems.push_back(std::move(p));
  }
  for (const Setting& s : settings()) {
    if (!listed.contains(s.name))
      problems.push_back(std::string(s.name) + " is missing (daemon/settings_table.cpp has it)");
  }
  // The order only once both list the same settings: then the first place
  // they differ.
  if (in_order.size() == settings().size()) {
    for (std::size_t i = 0; i < in_order.size(); ++i) {
      if (in_order[i] != &settings()[i]) {
        problems.push_back(std::string(in_order[i]->name) + " is out of kvtierd --help's order (" +
                           settings()[i].name + " comes there)");
        break;
      }
    }
  }
  return problems;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

// The problems of the protocol doc `markdown`; a parse error as one problem.
std::vector<std::string> problems_of(std::string_view markdown) {
  const auto rows = doc_settings_table(markdown);
  if (!rows) return {rows.error()};
  return doc_vs_code(*rows);
}

// `markdown` with the first line of the config.get section that starts
// with `prefix` replaced by `line` (removed when `line` is nullopt, kept and
// followed by it with `after`).
std::string edited(std::string_view markdown, std::string_view prefix,
                   std::optional<std::string> line, bool after = false) {
  std::string out;
  bool in_section = false, found = false;
  for (std::string_view l : lines_of(markdown)) {
    in_section = in_section || l == kSection;
    if (in_section && !found && l.starts_with(prefix)) {
      found = true;
      if (after) out += std::string(l) + "\n";
      if (line) out += *line + "\n";
      continue;
    }
    out += std::string(l) + "\n";
  }
  EXPECT_TRUE(found) << prefix;
  return out;
}

// The row of `name` in the config.get section, as written.
std::string row_line(std::string_view markdown, std::string_view name) {
  const std::string prefix = "| `" + std::string(name) + "` |";
  bool in_section = false;
  for (std::string_view l : lines_of(markdown)) {
    in_section = in_section || l == kSection;
    if (in_section && l.starts_with(prefix)) return std::string(l);
  }
  ADD_FAILURE() << "no row for " << name;
  return {};
}

bool mentions(const std::vector<std::string>& problems, std::string_view needle) {
  for (const std::string& p : problems)
    if (p.find(needle) != std::string::npos) return true;
  return false;
}

TEST(SettingsDocTest, ProtocolMdListsEverySettingOnceInOrderAsTheCodeHasIt) {
  const std::string md = read_doc("protocol.md");
  ASSERT_FALSE(md.empty()) << "cannot read docs/protocol.md";
  const auto rows = doc_settings_table(md);
  ASSERT_TRUE(rows) << rows.error();
  EXPECT_EQ(rows->size(), settings().size());
  const std::vector<std::string> problems = doc_vs_code(*rows);
  EXPECT_TRUE(problems.empty()) << "docs/protocol.md's settings table against the code:\n"
                                << joined(problems);
}

TEST(SettingsDocTest, ARowMissingFromTheDocOrUnknownToTheCodeFails) {
  const std::string md = read_doc("protocol.md");
  const auto missing = problems_of(edited(md, "| `remote_secret` |", std::nullopt));
  EXPECT_TRUE(mentions(missing, "remote_secret is missing")) << joined(missing);

  const auto extra =
      problems_of(edited(md, "| `eviction` |", "| `no_such_setting` | no | `0` | bool | x |",
                         /*after=*/true));
  EXPECT_TRUE(mentions(extra, "no_such_setting is not a setting")) << joined(extra);

  const auto twice =
      problems_of(edited(md, "| `policy` |", row_line(md, "policy"), /*after=*/true));
  EXPECT_TRUE(mentions(twice, "policy is listed twice")) << joined(twice);

  // Two settings in one row, as the table once had them.
  const auto grouped = problems_of(edited(md, "| `threads` |",
                                          "| `threads`, `socket` | no | `0` | int in [0, 1024] "
                                          "| as given at start |"));
  EXPECT_TRUE(mentions(grouped, "is not one `name`")) << joined(grouped);
  EXPECT_TRUE(mentions(grouped, "threads is missing")) << joined(grouped);
}

TEST(SettingsDocTest, ARowOutOfOrderFails) {
  const std::string md = read_doc("protocol.md");
  const std::string moved =
      edited(edited(md, "| `model` |", std::nullopt), "| `eviction` |", row_line(md, "model"),
             /*after=*/true);
  const auto problems = problems_of(moved);
  ASSERT_EQ(problems.size(), 1u) << joined(problems);
  EXPECT_TRUE(mentions(problems, "threads is out of kvtierd --help's order")) << joined(problems);
}

TEST(SettingsDocTest, ARowStatingOtherThanTheCodeFails) {
  const std::string md = read_doc("protocol.md");
  const std::string pending = row_line(md, "max_pending");
  ASSERT_TRUE(test_util::contains(pending, "| yes | `256` | int in [1, 1048576] |"));
  auto with = [&](std::string_view from, std::string_view to) {
    std::string row = pending;
    row.replace(row.find(from), from.size(), to);
    return problems_of(edited(md, "| `max_pending` |", row));
  };
  EXPECT_TRUE(mentions(with("| yes |", "| no |"), "max_pending: runtime says 'no'"));
  EXPECT_TRUE(mentions(with("`256`", "`255`"), "max_pending: the default is 255"));
  EXPECT_TRUE(mentions(with("`256`", "256"), "max_pending: the default '256'"));
  EXPECT_TRUE(mentions(with("`256`", "`256` or so"), "only a note in brackets"));
  EXPECT_TRUE(with("[1, 1048576]", "[1, 2^20]").empty());  // the same number
  EXPECT_TRUE(mentions(with("[1, 1048576]", "[1, 1048575]"), "max_pending: range [1, 1048575]"));
  EXPECT_TRUE(mentions(with("int in", "bytes in"), "max_pending: accepts bytes, the code int"));
  EXPECT_TRUE(mentions(with("int in [1, 1048576]", "a positive int"), "max_pending: accepts"));

  const std::string policy = row_line(md, "policy");
  std::string one_choice = policy;
  const std::string both = "one of `\"fcfs\"`, `\"priority\"`";
  ASSERT_NE(one_choice.find(both), std::string::npos) << policy;
  one_choice.replace(one_choice.find(both), both.size(), "one of `\"fcfs\"`");
  EXPECT_TRUE(mentions(problems_of(edited(md, "| `policy` |", one_choice)), "policy: choices"));

  const std::string model = row_line(md, "model");
  std::string model_default = model;
  model_default.replace(model_default.find("found at start"), 14, "`\"models\"`");
  EXPECT_TRUE(mentions(problems_of(edited(md, "| `model` |", model_default)),
                       "model: the default is found at start"));
}

TEST(SettingsDocTest, ATableThatDoesNotParseIsRefused) {
  const std::string md = read_doc("protocol.md");
  const auto short_row = problems_of(edited(md, "| `threads` |", "| `threads` | no | `0` |"));
  EXPECT_TRUE(mentions(short_row, "a row of 3 cells, not 5")) << joined(short_row);

  // An escaped pipe is part of a cell, not a border.
  const auto escaped = problems_of(
      edited(md, "| `threads` |", "| `threads` | no | `0` | int in [0, 1024] | a \\| b |"));
  EXPECT_TRUE(escaped.empty()) << joined(escaped);

  const auto broken = problems_of(edited(md, "| `socket` |", "", /*after=*/true));
  EXPECT_TRUE(mentions(broken, "a table line after the settings table ended")) << joined(broken);

  const auto old_header =
      problems_of(edited(md, std::string(kHeader), "| setting | runtime | value |"));
  EXPECT_TRUE(mentions(old_header, "before the settings table's header")) << joined(old_header);

  EXPECT_TRUE(mentions(problems_of("# protocol\n"), "no \"### config.get\" section"));
  EXPECT_TRUE(mentions(problems_of("### config.get\n\ntext\n"), "no settings table"));
}

TEST(SettingsDocTest, RangeEndsReadAsNumbersOrPowersOfTwo) {
  EXPECT_EQ(number_of("1048576"), 1048576.0);
  EXPECT_EQ(number_of("2^40"), 1099511627776.0);
  EXPECT_EQ(number_of("0.001"), 0.001);
  EXPECT_FALSE(number_of("3^2"));
  EXPECT_FALSE(number_of("1 MiB"));
  EXPECT_FALSE(number_of(""));
}

// The rows of the table under the line `header` in `markdown`, each of
// `columns` cells; a failure when there is no such table or a row of
// another width.
std::vector<std::vector<std::string>> table_rows(std::string_view markdown, std::string_view header,
                                                 std::size_t columns) {
  const std::vector<std::string_view> lines = lines_of(markdown);
  std::size_t i = 0;
  while (i < lines.size() && lines[i] != header) ++i;
  if (i + 1 >= lines.size()) {
    ADD_FAILURE() << "no table \"" << header << "\"";
    return {};
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t k = i + 2; k < lines.size() && lines[k].starts_with("|"); ++k) {
    auto cells = cells_of(lines[k]);
    if (!cells || cells->size() != columns) {
      ADD_FAILURE() << "line " << k + 1 << ": not " << columns << " cells";
      continue;
    }
    rows.push_back(std::move(*cells));
  }
  return rows;
}

// "1,179,648" and "64 blocks" as numbers: the leading integer, commas
// dropped; -1 when there is none or `unit` does not follow it.
long leading_integer(std::string text, std::string_view unit = "") {
  std::erase(text, ',');
  long v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || std::string_view(end, text.data() + text.size()) != unit) return -1;
  return v;
}

// "64 blocks, 72 MiB": `blocks` blocks of `bytes` each.
std::string blocks_and_mib(long blocks, std::size_t bytes) {
  std::ostringstream out;
  out << blocks << " blocks, " << static_cast<double>(bytes) * blocks / (1 << 20) << " MiB";
  return out.str();
}

struct GuideModel {
  std::size_t exact = 0;  // bytes of an L1 block, an L2 or L3 slot
  int context = 0;
};

// docs/tuning.md's table of block sizes: each row's shape (layers, heads,
// KV heads, width, context) gives the bytes the row states, at page_size 16, as the
// engine lays a block out (engine/model/kv_layout.h) and the int8 format encodes
// it (kernels/kv_quant.h), in 4 KiB slots (L1 and L2 with the prefix
// cache, L3). Then the table of starting points: each row's L1, L2 and L3
// in blocks of its model, from its settings as kvtierd reads them.
TEST(SettingsDocTest, TuningGuideSizesAreTheEnginesOwn) {
  const std::string md = read_doc("tuning.md");
  ASSERT_FALSE(md.empty()) << "cannot read docs/tuning.md";
  std::map<std::string, GuideModel> models;
  for (const auto& row : table_rows(md,
                                    "| model | n_layer | n_head | n_kv_head | n_embd | context | "
                                    "block, exact | slot, int8 | a full context |",
                                    9)) {
    SCOPED_TRACE(row[0]);
    ModelConfig c;
    c.n_layer = static_cast<int>(leading_integer(row[1]));
    c.n_head = static_cast<int>(leading_integer(row[2]));
    c.n_kv_head = static_cast<int>(leading_integer(row[3]));
    c.n_embd = static_cast<int>(leading_integer(row[4]));
    c.block_size = static_cast<int>(leading_integer(row[5]));
    ASSERT_GT(c.n_layer, 0);
    ASSERT_GT(c.n_kv_head, 0);
    ASSERT_EQ(c.n_head % c.n_kv_head, 0);
    ASSERT_EQ(c.n_embd % c.n_head, 0);
    const KvLayout layout = KvLayout::of(c, 16);
    const std::size_t exact = tiers::round_up(layout.block_bytes(), 4096);
    const std::size_t int8 = tiers::round_up(kernels::kv_quant_bytes(layout.shape()), 4096);
    EXPECT_EQ(leading_integer(row[6]), static_cast<long>(exact));
    EXPECT_EQ(leading_integer(row[7]), static_cast<long>(int8));
    EXPECT_EQ(row[8], blocks_and_mib(c.block_size / 16, exact));
    EXPECT_TRUE(models.emplace(row[0], GuideModel{exact, c.block_size}).second) << "twice";
  }
  EXPECT_GE(models.size(), 3u);

  int rows = 0;
  for (const auto& row : table_rows(md,
                                    "| model | contexts | max_kv_tokens | L1 | l2_bytes | L2 | "
                                    "l3_bytes | L3 |",
                                    8)) {
    SCOPED_TRACE(row[0] + ", " + row[1] + " contexts");
    ++rows;
    ASSERT_TRUE(models.contains(row[0])) << "not in the table of block sizes";
    const GuideModel& m = models[row[0]];
    const long max_kv_tokens = leading_integer(row[2]);
    EXPECT_EQ(max_kv_tokens, leading_integer(row[1]) * m.context);
    EXPECT_EQ(row[3], blocks_and_mib(max_kv_tokens / 16, m.exact));
    // A size as kvtierd.toml gives it ("2G").
    auto bytes = [](std::string_view name, std::string_view cell) -> long {
      const json text = json::parse(cell.substr(1, cell.size() - 2), nullptr, false);
      if (!cell.starts_with('`') || !text.is_string()) return -1;
      const auto v = setting_value_from_text(*setting_find(name), text.get<std::string>());
      return v && v->is_number_integer() ? v->get<long>() : -1;
    };
    const long l2 = bytes("l2_bytes", row[4]), l3 = bytes("l3_bytes", row[6]);
    ASSERT_GT(l2, 0);
    ASSERT_GT(l3, 0);
    EXPECT_EQ(leading_integer(row[5], " blocks"), l2 / static_cast<long>(m.exact));
    EXPECT_EQ(leading_integer(row[7], " slots"), l3 / static_cast<long>(m.exact));
  }
  EXPECT_GE(rows, 3);
  // The first rows are the defaults.
  const DaemonConfig defaults;
  EXPECT_TRUE(test_util::contains(
      md, "| " + std::to_string(defaults.scheduler.max_kv_tokens) + " | 256 blocks, 16 MiB | `\"" +
              std::to_string(defaults.scheduler.cache.l2_bytes >> 20) + "M\"` |"));
}

}  // namespace
}  // namespace kvtier::daemon
