// path-cutter: the PathCutter (path_cutter.h) for shell tests, run as a coprocess or behind a
// fifo.
//
//   path-cutter TARGET_HOST:TARGET_PORT
//
// prints the port it listens on (127.0.0.1) as its first line, then reads commands from stdin,
// one a line, and answers each with one line once it has taken effect:
//   stall, cut, restore, reset   -> "ok"
//   stats                        -> "accepted N to_target N to_initiator N"
//   quit (or end of input)       -> exits, resetting the connections still open
//   anything else                -> "error: unknown command: ..."
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "tests/harness/path_cutter.h"

int main(int argc, char** argv) {
  const std::string target = argc == 2 ? argv[1] : "";
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size()) {
    std::fprintf(stderr, "usage: path-cutter TARGET_HOST:TARGET_PORT\n");
    return 2;
  }
  std::string host = target.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string port_text = target.substr(colon + 1);
  size_t parsed = 0;
  unsigned long port = 0;
  try {
    port = std::stoul(port_text, &parsed);
  } catch (const std::exception&) {
    parsed = 0;
  }
  if (parsed != port_text.size() || port == 0 || port > 65535) {
    std::fprintf(stderr, "path-cutter: bad port in %s\n", target.c_str());
    return 2;
  }

  auto cutter = iser::test::PathCutter::Start(host, static_cast<uint16_t>(port));
  if (!cutter.ok()) {
    std::fprintf(stderr, "%s\n", cutter.status().ToString().c_str());
    return 1;
  }
  std::cout << (*cutter)->port() << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "stall") {
      (*cutter)->Stall();
    } else if (line == "cut") {
      (*cutter)->Cut();
    } else if (line == "restore") {
      (*cutter)->Restore();
    } else if (line == "reset") {
      (*cutter)->Reset();
    } else if (line == "stats") {
      std::cout << "accepted " << (*cutter)->connections_accepted() << " to_target "
                << (*cutter)->bytes_to_target() << " to_initiator "
                << (*cutter)->bytes_to_initiator() << std::endl;
      continue;
    } else if (line == "quit") {
      break;
    } else {
      std::cout << "error: unknown command: " << line << std::endl;
      continue;
    }
    std::cout << "ok" << std::endl;
  }
  return 0;
}
