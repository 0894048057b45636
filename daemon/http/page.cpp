// GET /, /page.css, /page.js, /favicon.svg: the page (web/page_files.h), a
// chat with the model and the tiers live, served without the API key (it
// holds no data; wire/http/page.h).
#include "wire/http/page.h"

#include "daemon/http/routes.h"

namespace kvtier::daemon::http {

using wire::http::Exchange;
using wire::http::Request;

void page(const Request& request, const std::shared_ptr<Exchange>& exchange, Context&) {
  // The route table names only the page's paths, so the file is there.
  exchange->respond(wire::http::page_response(*web::find_page_file(request.path())));
}

}  // namespace kvtier::daemon::http
