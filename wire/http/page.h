// Serving web/'s page (web/page_files.h) on either front door: kvtierd's
// routes and the router's answer GET of the page's files with
// page_response, and a connection lets those through without the API key.
#pragma once

#include "web/page_files.h"
#include "wire/http/exchange.h"

namespace kvtier::wire::http {

// The file with the headers that hold the page to itself: a
// Content-Security-Policy allowing only its own files and its own origin
// (nothing inline, nothing from elsewhere, no framing), nosniff, no
// referrer, and no-cache, so a new binary's page is never served stale.
Response page_response(const web::PageFile& file);

// Whether `request` may go without the API key: GET /health (load balancers)
// and GET of the page's files, which hold no data.
bool open_without_key(const Request& request);

}  // namespace kvtier::wire::http
