// kvtierd: serves text generation from a GPT-2 family model on a Unix socket
// (docs/protocol.md). With --prompt it instead generates once, prints the
// text and exits (oneshot.h).
//
// Every setting is a flag and may also come from a TOML file given
// with --config (cli.h); config.h lists them and says which change at run
// time.
#include <omp.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "daemon/cli.h"
#include "daemon/config.h"
#include "daemon/engine_loop.h"
#include "daemon/oneshot.h"
#include "daemon/server.h"
#include "daemon/service_checks.h"
#include "daemon/start_checks.h"
#include "daemon/systemd_notify.h"
#include "engine/build_info.h"
#include "wire/access.h"
#include "wire/default_paths.h"
#include "wire/log.h"
#include "wire/unix_socket.h"

namespace {

using namespace kvtier::daemon;
using namespace kvtier::wire;

// Defaults found at run time: the flags' defaults for --model and --socket.
DaemonConfig default_config() {
  DaemonConfig c;
  c.model_dir = default_model_dir();
  c.socket_path = default_socket_path();
  return c;
}

int serve(const CommandLine& cl, const std::vector<std::string>& args) {
  const DaemonConfig& c = cl.config;
  log_level_set(c.log_level);
  log_info(kvtier::version_text("kvtierd") + " starting: model " + c.model_dir + ", device " +
           c.device);
  auto socket_group = socket_group_of(c);
  if (!socket_group) {
    log_error(socket_group.error());
    return kExitConfig;
  }

  // A client that vanishes mid-write must cost an EPIPE, not the daemon.
  std::signal(SIGPIPE, SIG_IGN);

  auto activated = activated_socket();
  if (!activated) {
    log_error(activated.error());
    return 1;
  }
  auto checks = service_checks(c, *socket_group, *activated);
  if (!checks) {
    log_error(checks.error());
    return kExitConfig;
  }
  for (const std::string& w : checks->warnings) log_warning(w);
  if (!*activated) {
    // Before the model loads: a daemon that could not bind says so at once.
    if (auto ok = socket_path_check(c.socket_path); !ok) {
      log_error(ok.error());
      return kExitConfig;
    }
    if (auto ok = socket_dir_prepare(c.socket_path, default_socket_path()); !ok) {
      log_error(ok.error());
      return kExitConfig;
    }
  }

  auto plan = start_checks(c, StartCheck::kStart);  // what --check-config refuses too
  if (!plan) {
    log_error(plan.error());
    return kExitConfig;
  }
  notify_status("loading the model from " + c.model_dir);
  auto engine = EngineLoop::create(c.model_dir, {c.scheduler, c.max_pending, c.device});
  if (!engine) {
    log_error(engine.error());
    return kExitConfig;
  }
  asio::io_context io(1);  // one Asio thread: sessions need no locks among themselves
  ServerOptions server_options;
  server_options.config = c;
  server_options.session = {.max_output_bytes = c.max_output_bytes,
                            .daemon_uid = ::geteuid(),
                            .allow_any_uid = c.allow_any_uid};
  server_options.socket_group = plan->socket_group;
  server_options.activated_fd = activated->value_or(-1);
  server_options.chat_template = std::move(plan->chat_template);
  server_options.http_listen = std::move(plan->http_listen);
  // SIGHUP parses the same arguments again: the file as it is now, the
  // command line still winning (cli.h).
  if (!cl.config_file.empty()) {
    server_options.reload = [args]() -> std::expected<DaemonConfig, std::string> {
      auto again = cli_parse(args, default_config());
      if (!again) {
        const std::string& err = again.error().err;
        return std::unexpected(err.substr(0, err.find('\n')));
      }
      return again->config;
    };
  }
  Server server(io, **engine, std::move(server_options));
  if (auto ok = server.listen(); !ok) {
    log_error(ok.error());
    return kExitConfig;
  }
  (*engine)->start();
  server.start();
  io.run();
  (*engine)->stop();  // already stopped by the server, unless run() failed early
  // Destroying the engine destroys the scheduler and its prefix cache, which
  // waits for the L3 writes in flight: a restart on the same l3_path then
  // finds every block this run wrote through. Done here, not at exit, so
  // "stopped" is logged once they are on disk.
  engine->reset();
  log_info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  auto cl = cli_parse(args, default_config());
  if (!cl) {
    std::cout << cl.error().out << std::flush;
    if (cl.error().code == kExitConfig)
      log_error(cl.error().err);  // the form of every start-up refusal
    else
      std::cerr << cl.error().err << std::flush;
    return cl.error().code;
  }
  if (cl->config.threads > 0) omp_set_num_threads(cl->config.threads);
  // The last line of defence: sizes are checked against the machine before
  // anything is allocated, but an allocation refused anyway (memory taken
  // meanwhile) must end in a message and exit 1, not an abort.
  try {
    if (cl->check_only) {
      // What the start would refuse from the files alone (start_checks.h).
      if (auto plan = start_checks(cl->config, StartCheck::kCheckConfig); !plan) {
        log_error(plan.error());
        return kExitConfig;
      }
      std::cout << "kvtierd: the settings are valid\n";
      return 0;
    }
    if (cl->oneshot) return oneshot_run(*cl->oneshot);
    return serve(*cl, args);
  } catch (const std::bad_alloc&) {
    log_error("out of memory (an allocation was refused); lower the sizes of the pools");
  } catch (const std::exception& e) {
    log_error(std::string("stopped by an unexpected error: ") + e.what());
  }
  return 1;
}
