// GET /tiers: the JSON-RPC `tiers` method's answer (cache_methods.h,
// tiers_to_json), for the page and any client that would rather not parse
// /metrics: per tier its capacity, use, hits, moves, bytes and errors, the
// blocks no tier had, and the load costs. 404 while the prefix cache is off.
#include "daemon/cache_methods.h"
#include "daemon/http/routes.h"
#include "wire/http/errors.h"
#include "wire/http/openai.h"

namespace kvtier::daemon::http {

using wire::http::dump;
using wire::http::error_response;
using wire::http::Exchange;
using wire::http::Request;
using wire::http::Response;

void tiers(const Request&, const std::shared_ptr<Exchange>& exchange, Context& context) {
  context.engine.stats([exchange](EngineStats s) {  // on the engine thread
    exchange->post([exchange, s = std::move(s)] {
      if (!s.cache)
        return exchange->respond(
            error_response(404, no_prefix_cache_error().message, "", "no_prefix_cache"));
      Response r;
      r.body = dump(tiers_to_json(*s.cache, s.requests));
      exchange->respond(std::move(r));
    });
  });
}

}  // namespace kvtier::daemon::http
