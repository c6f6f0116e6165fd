// Connecting and logging in: from SessionOptions to a datamover in full feature phase's doorway.
// Makes a datamover through the options' factory, connects to the portal, logs in (adapting the
// operational offer to iSER when that is the transport) and follows login redirects, at most
// options.max_redirects of them. Used by Session::Open and by the Discovery session.
//
// Contract: on success *dm is connected and logged in, *outcome describes the session and
// *connected_portal is where it ended up after redirects. Every error names the portal.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "initiator/base/status.h"
#include "initiator/login/login.h"
#include "initiator/session/session_options.h"
#include "initiator/transport/datamover.h"
#include "initiator/transport/portal.h"

namespace iser {

Status ConnectAndLogin(const SessionOptions& options, SessionType type,
                       std::unique_ptr<Datamover>* dm, LoginOutcome* outcome,
                       Portal* connected_portal);
// The same with a given ISID: a recovery logs in with its session's ISID and TSIH 0, so that the
// target reinstates the session (ends the old one and its tasks first; RFC 7143 §6.3.5).
Status ConnectAndLogin(const SessionOptions& options, SessionType type,
                       const std::array<uint8_t, 6>& isid, std::unique_ptr<Datamover>* dm,
                       LoginOutcome* outcome, Portal* connected_portal);

}  // namespace iser
