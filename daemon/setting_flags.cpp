#include "daemon/setting_flags.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace kvtier::daemon {

using nlohmann::json;

namespace {

constexpr std::array<const char*, 6> kUnits = {"", "KiB", "MiB", "GiB", "TiB", "PiB"};

// A byte count in the largest power of 1024 that divides it ("256MiB"),
// which a size flag reads back.
std::string bytes_text(std::uint64_t n) {
  std::size_t unit = 0;
  while (n != 0 && n % 1024 == 0 && unit + 1 < kUnits.size()) {
    n /= 1024;
    ++unit;
  }
  return std::to_string(n) + kUnits[unit];
}

// The type column of --help: what the flag takes.
std::string type_text(const Setting& s) {
  switch (s.type) {
    case SettingType::kBool:
      return "";
    case SettingType::kInt:
      return "INT in [" + range_end_text(s.range.min) + ", " + range_end_text(s.range.max) + "]";
    case SettingType::kBytes:
      return "SIZE in [" + bytes_text(static_cast<std::uint64_t>(s.range.min)) + ", " +
             bytes_text(static_cast<std::uint64_t>(s.range.max)) + "]";
    case SettingType::kSeconds:
      return "SECONDS in [" + range_end_text(s.range.min) + ", " + range_end_text(s.range.max) +
             "]";
    case SettingType::kText:
      return "TEXT";
    case SettingType::kDirectory:
      return "DIR";
    case SettingType::kChoice: {  // as CLI11 shows a set: TEXT:{fcfs,priority}
      std::string text;
      for (std::string_view c : s.choices) text += (text.empty() ? "TEXT:{" : ",") + std::string(c);
      return text + "}";
    }
  }
  return "";
}

// The default --help shows: as the flag would take it; none when empty.
std::string default_text(const Setting& s, const DaemonConfig& defaults) {
  const json v = s.get(defaults);
  if (v.is_string()) return v.get<std::string>();
  if (s.type == SettingType::kBytes) return bytes_text(v.get<std::uint64_t>());
  return v.dump();
}

// A flag's or file key's text as JSON, for setting_store() to check: a
// number when all of it reads as a finite one in decimal (as in JSON, so
// config.set and the command line read the same numbers; a leading '+' as
// TOML allows it), else the string, which a numeric row then refuses,
// quoting it.
json from_text(const Setting& s, const std::string& text) {
  if (s.type != SettingType::kInt && s.type != SettingType::kBytes &&
      s.type != SettingType::kSeconds) {
    return text;
  }
  const char* first = text.data() + (text.starts_with('+') ? 1 : 0);
  const char* last = text.data() + text.size();
  if (first == last) return text;
  if (std::int64_t i = 0; std::from_chars(first, last, i).ptr == last) return i;
  if (std::uint64_t u = 0; std::from_chars(first, last, u).ptr == last) return u;
  if (double d = 0; std::from_chars(first, last, d).ptr == last && std::isfinite(d)) return d;
  return text;
}

}  // namespace

std::expected<json, std::string> setting_value_from_text(const Setting& s, std::string text) {
  if (s.type == SettingType::kBytes) {
    // AsSizeValue throws what it cannot read, where CLI11 would catch it.
    try {
      CLI::AsSizeValue size(false);
      if (std::string error = size(text); !error.empty()) return std::unexpected(error);
    } catch (const CLI::ParseError& e) {
      return std::unexpected(std::string(e.what()));
    }
  }
  return from_text(s, text);
}

namespace {

// The row's check, run by CLI11 on each value it parses; CLI11 puts the
// flag's name in front of the message.
CLI::Validator check_of(const Setting& s) {
  return CLI::Validator(
      [&s](std::string& text) -> std::string {
        DaemonConfig scratch;
        auto ok = setting_store(s, scratch, from_text(s, text));
        return ok ? std::string() : ok.error();
      },
      "");
}

// Sizes with a suffix (CLI11's AsSizeValue, powers of 1024), turned into
// bytes before the check, which refuses a negative one.
CLI::Validator size_value() {
  CLI::AsSizeValue size(false);
  size.description("");
  return size;
}

CLI::Option* option_add(CLI::App& app, const Setting& s, std::string& text, bool& on,
                        const DaemonConfig& defaults) {
  std::string description = s.description;
  if (s.runtime) description += " (runtime)";
  const std::string flag = setting_flag(s);
  CLI::Option* o = nullptr;
  if (s.type == SettingType::kBool) {
    on = s.get(defaults).get<bool>();
    o = app.add_flag(flag + ",!--no-" + flag.substr(2), on, description);
  } else {
    o = app.add_option(flag, text, description)->type_name(type_text(s));
    if (s.type == SettingType::kBytes) o->transform(size_value());
    if (s.type == SettingType::kDirectory) {
      CLI::Validator directory = CLI::ExistingDirectory;
      o->check(directory.description(""));
    }
    o->check(check_of(s));
  }
  return o->default_str(default_text(s, defaults));
}

}  // namespace

SettingFlags::SettingFlags(CLI::App& app, const DaemonConfig& defaults)
    : flags_(settings().size()) {
  // In SettingGroup's order.
  const std::array<CLI::App*, 3> groups = {
      &app, app.add_option_group("server", "Serve requests on a Unix socket"),
      app.add_option_group("tiers", "Prefix cache and KV tiers (restart to change)")};
  for (std::size_t i = 0; i < flags_.size(); ++i) {
    Flag& f = flags_[i];
    f.setting = &settings()[i];
    CLI::App& group = *groups[static_cast<std::size_t>(f.setting->group)];
    f.option = option_add(group, *f.setting, f.text, f.on, defaults);
  }
}

std::expected<void, std::string> SettingFlags::apply(DaemonConfig& config) const {
  for (const Flag& f : flags_) {
    if (f.option->count() == 0) continue;
    const json value =
        f.setting->type == SettingType::kBool ? json(f.on) : from_text(*f.setting, f.text);
    if (auto ok = setting_store(*f.setting, config, value); !ok)
      return std::unexpected(setting_flag(*f.setting) + ": " + ok.error());
  }
  return {};
}

bool SettingFlags::given(std::string_view name) const {
  auto it = std::ranges::find_if(flags_, [&](const Flag& f) { return name == f.setting->name; });
  return it != flags_.end() && it->option->count() > 0;
}

}  // namespace kvtier::daemon
