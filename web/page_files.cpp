#include "web/page_files.h"

#include <array>

namespace kvtier::web {

namespace embedded {  // embedded_page.cpp, written by embed_files.cmake
extern const std::string_view index_html;
extern const std::string_view page_css;
extern const std::string_view page_js;
extern const std::string_view favicon_svg;
}  // namespace embedded

std::span<const PageFile> page_files() {
  static const std::array<PageFile, 4> files = {{
      {"/", "text/html; charset=utf-8", embedded::index_html},
      {"/page.css", "text/css; charset=utf-8", embedded::page_css},
      {"/page.js", "text/javascript; charset=utf-8", embedded::page_js},
      {"/favicon.svg", "image/svg+xml", embedded::favicon_svg},
  }};
  return files;
}

const PageFile* find_page_file(std::string_view path) {
  for (const PageFile& f : page_files())
    if (f.path == path) return &f;
  return nullptr;
}

}  // namespace kvtier::web
