// What is generated from the settings table (settings_table.cpp): the
// checks every way of setting a value goes through, config.get's listing,
// config.set, the SIGHUP reload's runtime part and the diff both log.
#include "daemon/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace kvtier::daemon {

using nlohmann::json;

namespace {

bool is_number(SettingType type) {
  return type == SettingType::kInt || type == SettingType::kBytes || type == SettingType::kSeconds;
}

std::string range_text(SettingRange range) {
  return "[" + range_end_text(range.min) + ", " + range_end_text(range.max) + "]";
}

std::string choices_text(std::span<const std::string_view> choices) {
  std::string text;
  for (std::string_view c : choices) text += (text.empty() ? "\"" : ", \"") + std::string(c) + "\"";
  return text;
}

// Whether `v` has the row's type and lies in its range or choices. JSON's
// non-negative integers parse as unsigned: the minimum applies to them too
// (it once did not, and "max_pending": 0 got through).
bool accepted(const Setting& s, const json& v) {
  switch (s.type) {
    case SettingType::kBool:
      return v.is_boolean();
    case SettingType::kText:
    case SettingType::kDirectory:
      return v.is_string();
    case SettingType::kChoice:
      return v.is_string() && std::ranges::find(s.choices, v.get<std::string>()) != s.choices.end();
    case SettingType::kInt:
    case SettingType::kBytes:
      if (!v.is_number_integer()) return false;
      break;
    case SettingType::kSeconds:
      if (!v.is_number()) return false;
      break;
  }
  // Doubles compare exactly here: below 2^53 every limit is exact, and a
  // value past 2^53 rounds to a double far outside every range. NaN fails.
  const double x = v.is_number_unsigned()  ? static_cast<double>(v.get<std::uint64_t>())
                   : v.is_number_integer() ? static_cast<double>(v.get<std::int64_t>())
                                           : v.get<double>();
  return x >= s.range.min && x <= s.range.max;
}

std::string runtime_names() {
  std::string names;
  for (const Setting& s : settings()) {
    if (!s.runtime) continue;
    if (!names.empty()) names += ", ";
    names += s.name;
  }
  return names;
}

// config.get's entry for one row.
json entry_of(const Setting& s, const DaemonConfig& config) {
  static const DaemonConfig kDefaults;
  json entry = {{"value", s.get(config)}, {"runtime", s.runtime}, {"description", s.description}};
  if (!s.default_found_at_start) entry["default"] = s.get(kDefaults);
  if (is_number(s.type)) {
    entry["range"] = s.type == SettingType::kSeconds
                         ? json::array({s.range.min, s.range.max})
                         : json::array({static_cast<std::int64_t>(s.range.min),
                                        static_cast<std::int64_t>(s.range.max)});
  }
  if (s.type == SettingType::kChoice) {
    entry["choices"] = json::array();
    for (std::string_view c : s.choices) entry["choices"].push_back(std::string(c));
  }
  return entry;
}

}  // namespace

const Setting* setting_find(std::string_view name) {
  for (const Setting& s : settings()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string setting_flag(const Setting& s) {
  std::string flag = std::string("--") + s.name;
  std::ranges::replace(flag, '_', '-');
  return flag;
}

std::string range_end_text(double v) {
  // Whole ends (all but remote_timeout's millisecond) as integers: a %g
  // would print 1048576 as 1.04858e+06.
  if (v == static_cast<double>(static_cast<long long>(v)))
    return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string setting_accepts(const Setting& s) {
  switch (s.type) {
    case SettingType::kBool:
      return "true or false";
    case SettingType::kInt:
    case SettingType::kBytes:
      return "an integer in " + range_text(s.range);
    case SettingType::kSeconds:
      return "a number of seconds in " + range_text(s.range);
    case SettingType::kText:
      return "a string";
    case SettingType::kDirectory:
      return "the path of a directory";
    case SettingType::kChoice:
      return "one of " + choices_text(s.choices);
  }
  return "";
}

std::expected<void, std::string> setting_store(const Setting& s, DaemonConfig& config,
                                               const json& value) {
  if (!accepted(s, value))
    return std::unexpected("must be " + setting_accepts(s) + ", got " + value.dump());
  return s.set(config, value);
}

json config_to_json(const DaemonConfig& config) {
  json out = json::object();
  for (const Setting& s : settings()) out[s.name] = entry_of(s, config);
  return out;
}

std::expected<DaemonConfig, std::string> config_with_changes(const DaemonConfig& current,
                                                             const json& changes) {
  if (!changes.is_object() || changes.empty()) {
    return std::unexpected("config.set takes {\"<setting>\": <value>, ...}; runtime settings: " +
                           runtime_names());
  }
  DaemonConfig next = current;
  for (const auto& [name, value] : changes.items()) {
    const Setting* s = setting_find(name);
    if (!s) {
      return std::unexpected("unknown setting '" + name +
                             "' (runtime settings: " + runtime_names() + ")");
    }
    if (!s->runtime) {
      return std::unexpected("'" + name + "' cannot change while kvtierd runs (restart it with " +
                             setting_flag(*s) + ")");
    }
    if (auto ok = setting_store(*s, next, value); !ok)
      return std::unexpected("'" + name + "' " + ok.error());
  }
  if (auto ok = next.scheduler.validate(); !ok) return std::unexpected(ok.error());
  return next;
}

std::expected<DaemonConfig, std::string> config_with_runtime_of(const DaemonConfig& current,
                                                                const DaemonConfig& loaded) {
  json changes = json::object();
  for (const Setting& s : settings()) {
    if (s.runtime) changes[s.name] = s.get(loaded);
  }
  return config_with_changes(current, changes);
}

std::vector<SettingChange> config_diff(const DaemonConfig& a, const DaemonConfig& b) {
  std::vector<SettingChange> changes;
  for (const Setting& s : settings()) {
    json from = s.get(a), to = s.get(b);
    if (from != to) changes.push_back({&s, std::move(from), std::move(to)});
  }
  return changes;
}

}  // namespace kvtier::daemon
