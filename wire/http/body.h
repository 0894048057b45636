// A request's JSON body, read with the protocol's limits (protocol.h
// json_parse: no NUL byte, at most kMaxJsonDepth levels): the document, or
// the 400 to answer with.
#pragma once

#include <expected>
#include <nlohmann/json.hpp>

#include "wire/http/exchange.h"

namespace kvtier::wire::http {

std::expected<nlohmann::json, Response> json_body(const Request& request);

}  // namespace kvtier::wire::http
