#include "wire/http/page.h"

namespace kvtier::wire::http {

Response page_response(const web::PageFile& file) {
  Response r;
  r.content_type = std::string(file.content_type);
  r.body = std::string(file.body);
  r.headers = {
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
       "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-cache"},
  };
  return r;
}

bool open_without_key(const Request& request) {
  if (request.method != "GET") return false;
  return request.path() == "/health" || web::find_page_file(request.path()) != nullptr;
}

}  // namespace kvtier::wire::http
