#include "initiator/session/connect_login.h"

#include "initiator/base/log.h"

namespace iser {

namespace {

// The key set iSER targets expect (docs/iser-wire.md, "Login keys"): data moves by RDMA, so R2T
// and burst sizes only bound what the target reads per request, and iSER carries no digests.
void AdaptOfferToIser(OperationalOffer* offer) {
  offer->rdma_extensions = true;
  offer->header_digest = {DigestType::kNone};
  offer->data_digest = {DigestType::kNone};
  offer->initial_r2t = true;
  offer->first_burst_length = 65536;
  offer->max_burst_length = 262144;
  offer->max_recv_data_segment_length = 8192;  // our receive buffers hold 8 KiB of data
}

}  // namespace

Status ConnectAndLogin(const SessionOptions& options, SessionType type,
                       std::unique_ptr<Datamover>* dm_out, LoginOutcome* outcome,
                       Portal* connected_portal) {
  return ConnectAndLogin(options, type, RandomIsid(), dm_out, outcome, connected_portal);
}

Status ConnectAndLogin(const SessionOptions& options, SessionType type,
                       const std::array<uint8_t, 6>& isid, std::unique_ptr<Datamover>* dm_out,
                       LoginOutcome* outcome, Portal* connected_portal) {
  Portal portal = options.portal;
  LoginRequestParams req;
  req.initiator_name = options.initiator_name;
  req.initiator_alias = options.initiator_alias;
  req.target_name = type == SessionType::kNormal ? options.target_name : std::string();
  req.session_type = type;
  req.isid = isid;
  req.cmdsn = 1;
  req.itt = 0;
  req.offer = options.offer;
  if (options.transport == TransportKind::kIser) AdaptOfferToIser(&req.offer);
  req.chap = options.chap;
  const DatamoverFactory factory =
      options.datamover_factory ? options.datamover_factory : DefaultDatamoverFactory();
  for (int hop = 0;; ++hop) {
    Result<std::unique_ptr<Datamover>> dm = factory(options.transport);
    if (!dm.ok()) return dm.status();
    const Deadline deadline = Clock::now() + options.login_timeout;
    Status st = (*dm)->Connect(portal, deadline);
    if (!st.ok()) return st;
    st = Login(**dm, req, deadline, outcome);
    if (!st.ok()) return st;
    if (outcome->redirect) {
      if (hop >= options.max_redirects) {
        return Status::LoginFailed("login to " + portal.ToString() + " redirected more than " +
                                   std::to_string(options.max_redirects) + " times");
      }
      Log(LogLevel::kInfo,
          "portal " + portal.ToString() + " redirected us to " + outcome->redirect->ToString());
      portal = *outcome->redirect;
      continue;
    }
    *dm_out = std::move(*dm);
    *connected_portal = portal;
    return Status::OK();
  }
}

}  // namespace iser
