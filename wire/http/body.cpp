#include "wire/http/body.h"

#include "wire/http/errors.h"
#include "wire/protocol.h"

namespace kvtier::wire::http {

std::expected<nlohmann::json, Response> json_body(const Request& request) {
  auto doc = json_parse(request.body);
  if (!doc) return std::unexpected(error_response(400, "the request body: " + doc.error().message));
  return std::move(*doc);
}

}  // namespace kvtier::wire::http
