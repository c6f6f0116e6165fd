// Discovery of a big portal against a scripted target: tgtd sends a SendTargets answer of any
// length in one Text Response PDU (up to the MaxRecvDataSegmentLength we declared), 64893 bytes
// for 1000 targets. tests/fuse/big_portal.sh does the same against a real tgtd, end to end; this
// one needs no root and runs in a second.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "discovery/discovery.h"
#include "initiator/text/text.h"
#include "tests/integration/fake_target.h"

namespace iser {
namespace {

using test::FakePdu;
using test::FakeTarget;
using test::ResponseHeader;

SessionOptions OptionsFor(const FakeTarget& t) {
  return test::LoopbackOptions(t.port(), "");  // a discovery session names no target
}

// A SendTargets answer for 1000 targets in one Text Response of about 70 KiB: longer than the
// login phase's 8 KiB, within the MaxRecvDataSegmentLength we declared.
TEST(BigSendTargets, OneTextResponseOf1000Targets) {
  constexpr int kTargets = 1000;
  TextPairs pairs;
  for (int i = 1; i <= kTargets; ++i) {
    pairs.push_back({"TargetName", "iqn.2026-11.example:target-" + std::to_string(i)});
    pairs.push_back({"TargetAddress", "127.0.0.1:3260,1"});
  }
  const std::string answer = EncodeText(pairs);
  ASSERT_GT(answer.size(), 65536u);
  FakeTarget target({}, [&](FakeTarget& t) {
    FakePdu req;
    if (!t.Read(&req) || req.bhs.opcode() != Opcode::kTextRequest) return;
    Bhs rsp = ResponseHeader(Opcode::kTextResponse, req.bhs.itt(), t.next_statsn(), 2, 64);
    rsp.set_u32(bhs::kTtt, kReservedTag);
    rsp.set_data_segment_length(static_cast<uint32_t>(answer.size()));
    t.Send(rsp, std::vector<uint8_t>(answer.begin(), answer.end()));
    FakePdu logout;
    if (t.Read(&logout) && logout.bhs.opcode() == Opcode::kLogoutRequest) {
      t.Send(ResponseHeader(Opcode::kLogoutResponse, logout.bhs.itt(), t.next_statsn(), 2, 64));
    }
  });
  Result<std::vector<DiscoveredTarget>> targets = DiscoverTargets(OptionsFor(target));
  ASSERT_TRUE(targets.ok()) << targets.status().ToString();
  ASSERT_EQ(targets->size(), static_cast<size_t>(kTargets));
  EXPECT_EQ(targets->back().name, "iqn.2026-11.example:target-1000");
}

}  // namespace
}  // namespace iser
