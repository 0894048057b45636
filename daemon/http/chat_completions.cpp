// POST /v1/chat/completions: the conversation rendered through the model's
// chat template (wire/chat_template.h), then as /v1/completions.
#include "daemon/control.h"
#include "daemon/http/generation.h"
#include "daemon/http/routes.h"
#include "wire/http/body.h"
#include "wire/http/completion_params.h"
#include "wire/http/errors.h"
#include "wire/http/openai.h"

namespace kvtier::daemon::http {

using wire::http::chat_spec;
using wire::http::error_response;
using wire::http::Exchange;
using wire::http::json_body;
using wire::http::ParamError;
using wire::http::Request;
using wire::http::served_model_name;

void chat_completions(const Request& request, const std::shared_ptr<Exchange>& exchange,
                      Context& context) {
  auto body = json_body(request);
  if (!body) return exchange->respond(std::move(body.error()));
  auto spec = chat_spec(*body, served_model_name(context.control.config().model_dir),
                        context.chat_template, context.engine.model_config().block_size);
  if (!spec) {
    const ParamError& e = spec.error();
    return exchange->respond(error_response(e.status, e.message, e.param, e.code));
  }
  run_generation(std::move(*spec), exchange, context);
}

}  // namespace kvtier::daemon::http
