// POST /v1/chat/completions: the conversation rendered through the model's
// chat template (chat_template.h), then as /v1/completions.
#include "daemon/control.h"
#include "daemon/http/body.h"
#include "daemon/http/completion_params.h"
#include "daemon/http/errors.h"
#include "daemon/http/openai.h"
#include "daemon/http/routes.h"

namespace kvtier::daemon::http {

void chat_completions(const Request& request, const std::shared_ptr<Exchange>& exchange,
                      Context& context) {
  auto body = json_body(request);
  if (!body) return exchange->respond(std::move(body.error()));
  auto spec = chat_spec(*body, served_model_name(context.control.config()), context.chat_template,
                        context.engine.model_config().block_size);
  if (!spec) {
    const ParamError& e = spec.error();
    return exchange->respond(error_response(e.status, e.message, e.param, e.code));
  }
  run_generation(std::move(*spec), exchange, context);
}

}  // namespace kvtier::daemon::http
