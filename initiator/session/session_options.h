// SessionOptions: everything needed to open a session to one target: where it is, who we are,
// the credentials, what we offer in login, the timeouts, and the datamover factory (the seam
// tests use to replace the transport).
#pragma once

#include <chrono>
#include <string>

#include "initiator/login/login.h"
#include "initiator/session/datamover_factory.h"
#include "initiator/transport/portal.h"

namespace iser {

struct SessionOptions {
  Portal portal;
  std::string target_name;
  TransportKind transport = TransportKind::kTcp;
  std::string initiator_name;
  std::string initiator_alias;
  ChapCredentials chap;
  OperationalOffer offer;
  std::chrono::milliseconds login_timeout{15000};
  std::chrono::milliseconds nop_interval{5000};  // 0: no keepalive
  std::chrono::milliseconds nop_timeout{5000};
  std::chrono::milliseconds logout_timeout{5000};
  int max_redirects = 4;
  // Empty: DefaultDatamoverFactory().
  DatamoverFactory datamover_factory;
};

}  // namespace iser
