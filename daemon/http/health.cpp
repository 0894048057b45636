// GET /health: 200 {"status": "ok"} while the daemon serves, 503
// {"status": "draining"} once it is stopping (load balancers take it out of
// rotation then). Needs no API key.
#include "daemon/control.h"
#include "daemon/http/routes.h"
#include "wire/http/openai.h"

namespace kvtier::daemon::http {

using wire::http::dump;
using wire::http::Exchange;
using wire::http::Request;
using wire::http::Response;

void health(const Request&, const std::shared_ptr<Exchange>& exchange, Context& context) {
  const bool stopping = context.control.stopping();
  Response r;
  r.status = stopping ? 503 : 200;
  r.body = dump({{"status", stopping ? "draining" : "ok"}, {"device", context.engine.device()}});
  exchange->respond(std::move(r));
}

}  // namespace kvtier::daemon::http
