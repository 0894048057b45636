#include "wire/http/errors.h"

#include <nlohmann/json.hpp>

namespace kvtier::wire::http {

nlohmann::json error_object(int status, const std::string& message, const std::string& param,
                            const std::string& code) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  const auto or_null = [](const std::string& s) {
    return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
  };
  return {
      {"error",
       {{"message", message}, {"type", type}, {"param", or_null(param)}, {"code", or_null(code)}}}};
}

Response error_response(int status, const std::string& message, const std::string& param,
                        const std::string& code) {
  Response r;
  r.status = status;
  r.body = error_object(status, message, param, code)
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

}  // namespace kvtier::wire::http
