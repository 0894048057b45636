// kvtier-router: one socket in front of a fleet of kvtierd daemons, sending
// each request to the daemon that holds most of its prefix, in the fastest
// tier, for the least load (route_choice.h). Clients speak kvtierd's
// protocol to it unchanged, or kvtierd's OpenAI HTTP API (docs/protocol.md,
// docs/http.md; docs/fleet.md, "A router").
//
//   kvtier-router --daemon /run/kvtier/a.sock --daemon /run/kvtier/b.sock
//
// Exit codes, as kvtierd's (wire/cli_exit.h): 0 after a clean stop, 1 for an
// unexpected failure, 2 for a command line it cannot read (an unknown
// flag, a missing value, no --daemon), 78 for a configuration it cannot
// run with (a value out of range, a model or key file it cannot read, a
// socket it cannot bind).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "engine/build_info.h"
#include "engine/model/model_folder.h"
#include "engine/model/tokenizer.h"
#include "router/daemon_address.h"
#include "router/router.h"
#include "router/router_server.h"
#include "util/private_file.h"
#include "wire/chat_template.h"
#include "wire/cli_exit.h"
#include "wire/default_paths.h"
#include "wire/http/listener.h"
#include "wire/http/openai.h"
#include "wire/log.h"

namespace {

using namespace kvtier;
using namespace kvtier::wire;

int serve(int argc, char** argv) {
  const std::string default_socket = default_socket_path("kvtier-router.sock");
  router::RouterServerOptions o;
  o.socket_path = default_socket;
  std::vector<std::string> daemons;
  std::string model_dir = default_model_dir();
  std::string log_level = "info";
  std::string http_listen, http_api_key_file, daemon_api_key_file;

  CLI::App app{"kvtier-router: routes requests to the kvtierd daemon that holds their prefix"};
  app.add_option("--daemon", daemons,
                 "a kvtierd's Unix socket, or tcp://HOST:PORT for its TCP listener (repeat for "
                 "each daemon)")
      ->required()
      ->allow_extra_args(false);  // one address a flag: `--daemon --socket X` is an error
  app.add_option("--daemon-api-key-file", daemon_api_key_file,
                 "a file (mode 0600) holding the API key of the daemons at tcp:// addresses");
  app.add_option("--socket", o.socket_path, "the router's own Unix socket")->capture_default_str();
  app.add_option("--model", model_dir,
                 "the daemons' model folder (the router reads its config and tokenizer)")
      ->capture_default_str();
  app.add_option("--max-connections", o.max_connections, "client connections open at once")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--max-line-bytes", o.session.max_line_bytes, "the longest request line")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-output-bytes", o.session.max_output_bytes,
                 "reply bytes queued for a client before it is dropped")
      ->check(CLI::Range(std::size_t{4096}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--http-listen", http_listen,
                 "also serve HTTP and JSON-RPC on TCP: PORT (loopback) or HOST:PORT, as kvtierd's "
                 "http_listen");
  app.add_option("--http-api-key-file", http_api_key_file,
                 "a file (mode 0600) holding the API key TCP clients give: HTTP as a Bearer "
                 "token, JSON-RPC by `auth` (required beyond loopback)");
  app.add_option("--http-timeout", o.http.request_timeout,
                 "seconds an HTTP request has to arrive whole, and an idle one to stay open")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--drain-timeout", o.drain_timeout,
                 "seconds a stopping router (SIGTERM, `shutdown`) lets requests in flight finish; "
                 "0 ends them at once (an error answer; cancelled on their daemons)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "error, warning, info or debug")->capture_default_str();
  app.set_version_flag("--version", version_text("kvtier-router"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const CliExit exit = cli_parse_failure(app, e);
    std::cout << exit.out << std::flush;
    if (exit.code == kExitConfig) {
      log_program_set("kvtier-router");
      log_error(exit.err);  // the form of every start-up refusal
    } else {
      std::cerr << exit.err << std::flush;
    }
    return exit.code;
  }

  log_program_set("kvtier-router");
  auto level = log_level_parse(log_level);
  if (!level) {
    std::cerr << "kvtier-router: --log-level: " << level.error() << "\n";
    return kExitConfig;
  }
  log_level_set(*level);
  std::signal(SIGPIPE, SIG_IGN);

  auto config = read_model_config(model_dir);
  if (!config) {
    log_error("--model: " + config.error());
    return kExitConfig;
  }
  auto tokenizer = Tokenizer::load(config->tokenizer);
  if (!tokenizer) {
    log_error("--model: " + tokenizer.error());
    return kExitConfig;
  }
  auto chat_template = ChatTemplate::load(model_dir, config->tokenizer);
  if (!chat_template) {
    log_error("--model: " + chat_template.error());
    return kExitConfig;
  }
  auto listen = wire::http::listen_spec(http_listen, http_api_key_file);
  if (!listen) {
    log_error(listen.error());
    return kExitConfig;
  }
  o.http_listen = std::move(*listen);
  std::string daemon_key;
  if (!daemon_api_key_file.empty()) {
    auto key = util::read_private_file("--daemon-api-key-file", daemon_api_key_file, 4096);
    if (!key) {
      log_error(key.error());
      return kExitConfig;
    }
    daemon_key = std::move(*key);
  }
  std::vector<router::DaemonAddress> addresses;
  for (const std::string& d : daemons) {
    auto address = router::daemon_address_parse(d, daemon_key);
    if (!address) {
      log_error(address.error());
      return kExitConfig;
    }
    addresses.push_back(std::move(*address));
  }
  o.http.served_model = wire::http::served_model_name(model_dir);
  o.http.max_body_bytes = o.session.max_line_bytes;
  if (auto ok = socket_dir_prepare(o.socket_path, default_socket); !ok) {
    log_error(ok.error());
    return kExitConfig;
  }
  o.session.router_uid = ::geteuid();
  boost::asio::io_context io(1);
  router::Router router(io, std::move(addresses), std::move(*config), std::move(*tokenizer),
                        std::move(*chat_template));
  router::RouterServer server(io, router, o);
  if (auto ok = server.listen(); !ok) {
    log_error(ok.error());
    return kExitConfig;
  }
  server.start();
  io.run();
  log_info("stopped");
  log_flush(std::chrono::seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // As kvtierd: an allocation refused or an error nothing expected ends in
  // a message and exit 1, not an abort.
  try {
    return serve(argc, argv);
  } catch (const std::bad_alloc&) {
    log_error("out of memory (an allocation was refused)");
  } catch (const std::exception& e) {
    log_error(std::string("stopped by an unexpected error: ") + e.what());
  }
  log_flush(std::chrono::seconds(2));
  return 1;
}
