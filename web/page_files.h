// The page kvtierd and kvtier-router serve at GET / (docs/http.md): a chat
// with the model, each answer showing where its prompt came from (L1, L2,
// L3, remote, computed), and the tiers live (from the router: the fleet).
// Four files of our own in web/page/, compiled in (CMakeLists.txt): the
// page fetches nothing from elsewhere, and a Content-Security-Policy of ours
// (wire/http/page.h) holds it to its own files and its own origin.
//
// The files hold no data, so they are served without the API key; the page
// asks for the key and sends it on its API calls like any client.
#pragma once

#include <span>
#include <string_view>

namespace kvtier::web {

struct PageFile {
  std::string_view path;          // "/", "/page.css", "/page.js", "/favicon.svg"
  std::string_view content_type;  // with its charset
  std::string_view body;
};

std::span<const PageFile> page_files();

// The file served at `path`, or nullptr.
const PageFile* find_page_file(std::string_view path);

}  // namespace kvtier::web
