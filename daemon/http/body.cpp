#include "daemon/http/body.h"

#include "daemon/http/errors.h"
#include "daemon/protocol.h"

namespace kvtier::daemon::http {

std::expected<nlohmann::json, Response> json_body(const Request& request) {
  auto doc = json_parse(request.body);
  if (!doc) return std::unexpected(error_response(400, "the request body: " + doc.error().message));
  return std::move(*doc);
}

}  // namespace kvtier::daemon::http
