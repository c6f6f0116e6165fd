// PrepareSession and OpenSession: the portals that session recovery tries (docs/recovery.md,
// "Settings") include every portal SendTargets reports for the target, and a discovery that
// fails does not keep the session from opening. Against a real tgtd, except where tgtd cannot
// answer as other targets do (below).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "discovery/connect.h"
#include "initiator/text/text.h"
#include "tests/harness/tgt_fixture.h"
#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using test::FakePdu;
using test::FakeTarget;
using test::FreePort;
using test::TgtFixture;

constexpr const char* kIqn = "iqn.2026-11.io.iser-connect.test:connect";

class ConnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(tgt_.Start(&error)) << error;
    tgt_.AddTarget(1, kIqn);
    tgt_.AddLun(1, 1, 16u << 20);
    options_.initiator_name = "iqn.2026-11.io.iser-connect.test:initiator";
    options_.login_timeout = std::chrono::seconds(10);
  }

  // A second portal of the same tgtd, so SendTargets reports the target at both.
  Portal AddSecondPortal() {
    const Portal second{"127.0.0.1", FreePort()};
    tgt_.MustAdm("--lld iscsi --op new --mode portal --param portal=" + second.ToString());
    return second;
  }

  std::string Url(const std::string& args = "") const {
    return "iscsi://" + tgt_.portal() + "/" + kIqn + "/1" + args;
  }

  TgtFixture tgt_;
  ConnectOptions options_;
};

// tgtd reports the portal a discovery arrives at: the URL's own, left out since it is tried
// first anyway; the URL's second portal stays where the URL put it.
TEST_F(ConnectTest, TheUrlsOwnPortalIsNoAlternate) {
  const Portal second = AddSecondPortal();
  Result<IscsiUrl> url = ParseIscsiUrl(Url("?portal=" + second.ToString()));
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  Result<SessionOptions> so = PrepareSession(*url, options_);
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_EQ(so->alternate_portals, std::vector<Portal>{second});
}

TEST_F(ConnectTest, OpenSessionLogsInAtTheUrlsPortalWithTwoPortals) {
  AddSecondPortal();
  Result<IscsiUrl> url = ParseIscsiUrl(Url());
  ASSERT_TRUE(url.ok());
  Result<std::shared_ptr<Session>> s = OpenSession(*url, options_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->portal(), url->portal);
  EXPECT_TRUE((*s)->Close().ok());
}

// Discovery at a portal that refuses connections adds nothing, and is not the error: the
// session's own attempt at that portal is.
TEST_F(ConnectTest, AFailedDiscoveryAddsNothingAndIsNotTheError) {
  const Portal closed{"127.0.0.1", FreePort()};
  Result<IscsiUrl> url =
      ParseIscsiUrl("iscsi://" + closed.ToString() + "/" + kIqn + "?portal=" + tgt_.portal());
  ASSERT_TRUE(url.ok());
  Result<SessionOptions> so = PrepareSession(*url, options_);
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_EQ(so->alternate_portals, (std::vector<Portal>{{"127.0.0.1", tgt_.port()}}));
}

// A target the discovery does not report (another initiator's, or gone) adds nothing either.
TEST_F(ConnectTest, ATargetSendTargetsDoesNotReportAddsNothing) {
  AddSecondPortal();
  Result<IscsiUrl> url =
      ParseIscsiUrl("iscsi://" + tgt_.portal() + "/iqn.2026-11.io.iser-connect.test:absent");
  ASSERT_TRUE(url.ok());
  Result<SessionOptions> so = PrepareSession(*url, options_);
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_TRUE(so->alternate_portals.empty());
}

// A scripted discovery target's answer to a Text Request: text, whole, in one final PDU.
void AnswerText(FakeTarget& t, const FakePdu& req, const std::string& text) {
  Bhs rsp = test::ResponseHeader(Opcode::kTextResponse, req.bhs.itt(), t.next_statsn(), 2, 64);
  rsp.set_flags(kFinalBit);
  rsp.set_u32(bhs::kTtt, kReservedTag);
  rsp.set_data_segment_length(static_cast<uint32_t>(text.size()));
  t.Send(rsp, std::vector<uint8_t>(text.begin(), text.end()));
}

// Answers the discovery session's Logout Request, when it comes.
void AnswerLogout(FakeTarget& t) {
  FakePdu logout;
  if (t.Read(&logout) && logout.bhs.opcode() == Opcode::kLogoutRequest) {
    t.Send(test::ResponseHeader(Opcode::kLogoutResponse, logout.bhs.itt(), t.next_statsn(), 2, 64));
  }
}

// PrepareSession of a URL, as a login does before it logs in (its discovery included).
Result<SessionOptions> PrepareFor(const std::string& url_text) {
  Result<IscsiUrl> url = ParseIscsiUrl(url_text);
  if (!url.ok()) return url.status();
  ConnectOptions options;
  options.initiator_name = "iqn.2026-11.io.iser-connect.test:initiator";
  options.login_timeout = std::chrono::seconds(5);
  return PrepareSession(*url, options);
}

// A target with portals in several portal groups, as LIO reports them: every one of them is an
// alternate, after the URL's, once. A scripted target, because tgtd's SendTargets reports only
// the address the discovery connection arrived at, never a target's other portals.
TEST(ConnectFakeTarget, EveryDiscoveredPortalOfTheTargetInEveryGroupFollowsTheUrls) {
  const std::string target = "iqn.2026-11.io.iser-connect.test:fake";
  std::atomic<bool> asked{false};
  std::atomic<uint16_t> own_port{0};
  FakeTarget fake({}, [&](FakeTarget& t) {
    FakePdu req;
    if (!t.Read(&req) || req.bhs.opcode() != Opcode::kTextRequest) return;
    asked = true;
    const std::string answer =
        EncodeText({{"TargetName", "iqn.2026-11.io.iser-connect.test:other"},
                    {"TargetAddress", "192.0.2.50:3260,1"},
                    {"TargetName", target},
                    {"TargetAddress", "127.0.0.1:" + std::to_string(own_port.load()) + ",1"},
                    {"TargetAddress", "192.0.2.1:3260,1"},
                    {"TargetAddress", "[2001:db8::1]:3262,2"},
                    {"TargetAddress", "192.0.2.9:3260,3"},
                    {"TargetAddress", "192.0.2.1:3260,4"}});
    AnswerText(t, req, answer);
    AnswerLogout(t);
  });
  own_port = fake.port();
  Result<SessionOptions> so = PrepareFor("iscsi://127.0.0.1:" + std::to_string(own_port.load()) +
                                         "/" + target + "?portal=192.0.2.9:3260");
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  EXPECT_TRUE(asked) << "no SendTargets";
  EXPECT_EQ(so->alternate_portals,
            (std::vector<Portal>{{"192.0.2.9", 3260}, {"192.0.2.1", 3260}, {"2001:db8::1", 3262}}));
}

// A target that answers SendTargets=<name> without the target (or rejects it) is asked for All
// on the same discovery session, so that a login still learns the target's other portals. A
// scripted target, because tgtd answers the named form.
TEST(ConnectFakeTarget, ATargetWithoutAnAnswerForItsNameIsAskedForAll) {
  const std::string target = "iqn.2026-11.io.iser-connect.test:fake";
  std::vector<std::string> asked;
  std::mutex mu;
  FakeTarget fake({}, [&](FakeTarget& t) {
    for (int i = 0; i < 2; ++i) {
      FakePdu req;
      if (!t.Read(&req) || req.bhs.opcode() != Opcode::kTextRequest) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        asked.emplace_back(req.data.begin(), req.data.end());
      }
      AnswerText(t, req,
                 i == 0
                     ? std::string()
                     : EncodeText({{"TargetName", target}, {"TargetAddress", "192.0.2.1:3260,1"}}));
    }
    AnswerLogout(t);
  });
  Result<SessionOptions> so =
      PrepareFor("iscsi://127.0.0.1:" + std::to_string(fake.port()) + "/" + target);
  ASSERT_TRUE(so.ok()) << so.status().ToString();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[0], std::string("SendTargets=") + target + '\0');
  EXPECT_EQ(asked[1], std::string("SendTargets=All") + '\0');
  EXPECT_EQ(so->alternate_portals, (std::vector<Portal>{{"192.0.2.1", 3260}}));
}

}  // namespace
}  // namespace iser
