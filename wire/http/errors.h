// Errors as OpenAI's API writes them, which its client libraries turn into
// their exception types by status (400 BadRequestError, 401
// AuthenticationError, 404 NotFoundError, 429 RateLimitError, ...):
//
//   {"error": {"message": "...", "type": "invalid_request_error",
//              "param": "temperature", "code": null}}
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "wire/http/exchange.h"

namespace kvtier::wire::http {

// `type` follows from the status: invalid_request_error (4xx),
// authentication_error (401), rate_limit_error (429), server_error (5xx).
// `param` and `code` are null when empty.
nlohmann::json error_object(int status, const std::string& message, const std::string& param = {},
                            const std::string& code = {});
// The same as the body of an answer with that status.
Response error_response(int status, const std::string& message, const std::string& param = {},
                        const std::string& code = {});

}  // namespace kvtier::wire::http
