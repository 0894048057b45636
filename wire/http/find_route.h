// Dispatch by a table of routes, for kvtierd's routes (daemon/http/routes.h)
// and the router's front door (router/http_front.h) alike.
#pragma once

#include <span>
#include <string>
#include <utility>

#include "wire/http/errors.h"
#include "wire/http/exchange.h"

namespace kvtier::wire::http {

// The row of `table` (rows with `method` and `path`) that `request` asks
// for, or nullptr after answering 404 (no row has its path) or 405 (rows
// have it under other methods, said in Allow) on `exchange`. kvtierd's
// table and the router's both dispatch through it.
template <class Row>
const Row* find_route(std::span<const Row> table, const Request& request, Exchange& exchange) {
  bool path_known = false;
  for (const Row& row : table) {
    if (request.path() != row.path) continue;
    path_known = true;
    if (request.method == row.method) return &row;
  }
  const std::string what = request.method + " " + std::string(request.path());
  if (!path_known) {
    exchange.respond(error_response(404, "no such endpoint: " + what));
    return nullptr;
  }
  Response r = error_response(405, "method not allowed: " + what);
  for (const Row& row : table)
    if (request.path() == row.path) r.headers.emplace_back("Allow", row.method);
  exchange.respond(std::move(r));
  return nullptr;
}

}  // namespace kvtier::wire::http
