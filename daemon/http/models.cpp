// GET /v1/models: the one model this daemon serves, as OpenAI lists models,
// with its context length as vLLM gives it (max_model_len).
#include "daemon/control.h"
#include "daemon/http/openai.h"
#include "daemon/http/routes.h"

namespace kvtier::daemon::http {

void list_models(const Request&, const std::shared_ptr<Exchange>& exchange, Context& context) {
  static const std::int64_t started = unix_now();
  Response r;
  r.body = dump({{"object", "list"},
                 {"data",
                  {{{"id", served_model_name(context.control.config())},
                    {"object", "model"},
                    {"created", started},
                    {"owned_by", "kvtier"},
                    {"max_model_len", context.engine.model_config().block_size}}}}});
  exchange->respond(std::move(r));
}

}  // namespace kvtier::daemon::http
