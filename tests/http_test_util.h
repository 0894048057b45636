// Helpers for the black-box tests of the HTTP API, on kvtierd
// (daemon_http_test.cpp) and on kvtier-router (router_http_test.cpp): real
// curl against a Unix socket or a TCP port, the events of a server-sent
// stream, a sample of a Prometheus answer, and promtool's check of one.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvtier::test_util {

struct HttpAnswer {
  int status = 0;  // 0: curl could not get one
  std::string body;
  nlohmann::json doc() const { return nlohmann::json::parse(body, nullptr, false); }
};

// `curl` METHOD PATH against the Unix socket `socket` (or, with `socket`
// empty, http://127.0.0.1:`port`), with `body` as JSON when given (written
// to a file in `dir`), and `extra` more arguments.
inline HttpAnswer curl(const std::string& socket, const std::filesystem::path& dir,
                       const std::string& method, const std::string& path,
                       const std::optional<nlohmann::json>& body = std::nullopt,
                       const std::string& extra = "", int port = 0) {
  std::string cmd = "curl -s -N --max-time 60 -w '\\n%{http_code}' -X " + method + " " + extra;
  if (!socket.empty()) cmd += " --unix-socket '" + socket + "'";
  if (body) {
    const std::string file = (dir / "body.json").string();
    std::ofstream(file) << body->dump();
    cmd += " -H 'Content-Type: application/json' --data-binary @'" + file + "'";
  }
  cmd += socket.empty() ? " 'http://127.0.0.1:" + std::to_string(port) + path + "'"
                        : " 'http://localhost" + path + "'";
  const CommandResult run = run_command(cmd + " 2>/dev/null");
  HttpAnswer a;
  const std::size_t nl = run.output.rfind('\n');
  if (nl == std::string::npos) return a;
  a.status = std::atoi(run.output.c_str() + nl + 1);
  a.body = run.output.substr(0, nl);
  return a;
}

// The JSON payloads of a server-sent event stream, "[DONE]" included as a
// string.
inline std::vector<nlohmann::json> sse_events(const std::string& body) {
  std::vector<nlohmann::json> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    at += 6;
    const std::size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at, end - at);
    out.push_back(data == "[DONE]" ? nlohmann::json("[DONE]")
                                   : nlohmann::json::parse(data, nullptr, false));
    at = end;
  }
  return out;
}

// The value of the sample `series` (name and labels as /metrics writes
// them) in a Prometheus text answer; -1 when absent.
inline double metric(const std::string& text, const std::string& series) {
  std::size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') return std::atof(text.c_str() + at + series.size() + 1);
    at += series.size();
  }
  return -1;
}

// `promtool check metrics` on `text` (written to a file in `dir`): its
// exit status and what it said (nothing, when the lint passes).
inline CommandResult promtool_check(const std::string& text, const std::filesystem::path& dir) {
  const std::string file = (dir / "metrics.txt").string();
  std::ofstream(file) << text;
  return run_command("promtool check metrics < '" + file + "' 2>&1");
}

}  // namespace kvtier::test_util
