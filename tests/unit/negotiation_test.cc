// Operational negotiation: what we propose, and every result function against target answers,
// target proposals, special answers and rule violations.
#include <gtest/gtest.h>

#include "initiator/login/negotiation.h"

namespace iser {
namespace {

std::string ValueOf(const TextPairs& pairs, const std::string& key) {
  const TextPair* p = FindKey(pairs, key);
  return p ? p->value : "<absent>";
}

TEST(Negotiation, NormalSessionProposesEveryOperationalKey) {
  OperationalOffer o;
  o.header_digest = {DigestType::kCrc32c, DigestType::kNone};
  OperationalNegotiator n(SessionType::kNormal, o);
  const TextPairs p = n.Proposals();
  EXPECT_EQ(ValueOf(p, "HeaderDigest"), "CRC32C,None");
  EXPECT_EQ(ValueOf(p, "DataDigest"), "None");
  EXPECT_EQ(ValueOf(p, "InitialR2T"), "No");
  EXPECT_EQ(ValueOf(p, "ImmediateData"), "Yes");
  EXPECT_EQ(ValueOf(p, "MaxRecvDataSegmentLength"), "16777215");
  EXPECT_EQ(ValueOf(p, "MaxBurstLength"), "16776192");
  EXPECT_EQ(ValueOf(p, "FirstBurstLength"), "262144");
  EXPECT_EQ(ValueOf(p, "MaxConnections"), "1");
  EXPECT_EQ(ValueOf(p, "IFMarker"), "No");
  EXPECT_EQ(ValueOf(p, "RDMAExtensions"), "<absent>");
  EXPECT_FALSE(n.AllAnswered());
}

TEST(Negotiation, DiscoveryProposesOnlyWhatApplies) {
  OperationalNegotiator n(SessionType::kDiscovery, OperationalOffer{});
  const TextPairs p = n.Proposals();
  EXPECT_EQ(ValueOf(p, "InitialR2T"), "<absent>");
  EXPECT_EQ(ValueOf(p, "MaxBurstLength"), "<absent>");
  EXPECT_EQ(ValueOf(p, "MaxRecvDataSegmentLength"), "16777215");
  EXPECT_EQ(ValueOf(p, "HeaderDigest"), "None");
}

TEST(Negotiation, IserForcesNoDigestsAndSendsIserKeys) {
  OperationalOffer o;
  o.rdma_extensions = true;
  o.header_digest = {DigestType::kCrc32c};
  OperationalNegotiator n(SessionType::kNormal, o);
  const TextPairs p = n.Proposals();
  EXPECT_EQ(ValueOf(p, "HeaderDigest"), "None");
  EXPECT_EQ(ValueOf(p, "RDMAExtensions"), "Yes");
  EXPECT_EQ(ValueOf(p, "InitiatorRecvDataSegmentLength"), "8192");
  EXPECT_EQ(ValueOf(p, "TargetRecvDataSegmentLength"), "8192");
  EXPECT_EQ(ValueOf(p, "MaxRecvDataSegmentLength"), "<absent>");
  EXPECT_EQ(ValueOf(p, "IFMarker"), "<absent>");
}

// tgt 1.0.85's answers over iSER (docs/iser-wire.md, "Login keys").
TEST(Negotiation, TgtIserAnswers) {
  OperationalOffer o;
  o.rdma_extensions = true;
  OperationalNegotiator n(SessionType::kNormal, o);
  TextPairs replies;
  Status st = n.HandleResponse({{"HeaderDigest", "None"},
                                {"DataDigest", "None"},
                                {"ImmediateData", "No"},
                                {"InitialR2T", "Yes"},
                                {"MaxBurstLength", "262144"},
                                {"FirstBurstLength", "65536"},
                                {"RDMAExtensions", "Yes"},
                                {"InitiatorRecvDataSegmentLength", "262144"},
                                {"TargetRecvDataSegmentLength", "8192"},
                                {"DefaultTime2Retain", "0"},
                                {"DefaultTime2Wait", "2"},
                                {"MaxConnections", "1"},
                                {"MaxOutstandingR2T", "1"},
                                {"DataPDUInOrder", "Yes"},
                                {"DataSequenceInOrder", "Yes"},
                                {"ErrorRecoveryLevel", "0"}},
                               &replies);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(replies.empty());
  EXPECT_TRUE(n.AllAnswered());
  const NegotiatedParams& p = n.params();
  EXPECT_TRUE(p.rdma_extensions);
  EXPECT_FALSE(p.immediate_data);
  EXPECT_TRUE(p.initial_r2t);
  EXPECT_EQ(p.max_burst_length, 262144u);
  EXPECT_EQ(p.initiator_recv_data_segment_length, 8192u) << "min(ours, answer)";
  EXPECT_EQ(p.target_recv_data_segment_length, 8192u);
}

TEST(Negotiation, BooleanAndOrRules) {
  OperationalOffer o;
  o.immediate_data = false;
  o.initial_r2t = true;
  OperationalNegotiator n(SessionType::kNormal, o);
  TextPairs r;
  EXPECT_FALSE(n.HandleResponse({{"ImmediateData", "Yes"}}, &r).ok()) << "AND: No stays No";
  OperationalNegotiator n2(SessionType::kNormal, o);
  EXPECT_FALSE(n2.HandleResponse({{"InitialR2T", "No"}}, &r).ok()) << "OR: Yes stays Yes";
  OperationalNegotiator n3(SessionType::kNormal, OperationalOffer{});
  ASSERT_TRUE(n3.HandleResponse({{"ImmediateData", "No"}, {"InitialR2T", "Yes"}}, &r).ok());
  EXPECT_FALSE(n3.params().immediate_data);
  EXPECT_TRUE(n3.params().initial_r2t);
  OperationalNegotiator n4(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(n4.HandleResponse({{"ImmediateData", "Maybe"}}, &r).ok());
}

TEST(Negotiation, NumericMinAndMax) {
  TextPairs r;
  OperationalNegotiator n(SessionType::kNormal, OperationalOffer{});
  ASSERT_TRUE(
      n.HandleResponse({{"MaxBurstLength", "0x40000"}, {"DefaultTime2Wait", "20"}}, &r).ok());
  EXPECT_EQ(n.params().max_burst_length, 262144u);
  EXPECT_EQ(n.params().default_time2wait, 20u);
  OperationalNegotiator up(SessionType::kNormal, OperationalOffer{});
  Status st = up.HandleResponse({{"MaxBurstLength", "16777215"}}, &r);
  EXPECT_FALSE(st.ok()) << "a min key may not go up";
  EXPECT_NE(st.message().find("MaxBurstLength"), std::string::npos) << st.message();
  OperationalNegotiator down(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(down.HandleResponse({{"DefaultTime2Wait", "1"}}, &r).ok()) << "max key down";
  OperationalNegotiator range(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(range.HandleResponse({{"MaxBurstLength", "100"}}, &r).ok()) << "below 512";
  OperationalNegotiator junk(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(junk.HandleResponse({{"MaxBurstLength", "12ab"}}, &r).ok());
  OperationalNegotiator huge(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(huge.HandleResponse({{"ErrorRecoveryLevel", "99999999999"}}, &r).ok());
}

TEST(Negotiation, FirstBurstMayNotExceedMaxBurst) {
  TextPairs r;
  OperationalNegotiator n(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(
      n.HandleResponse({{"MaxBurstLength", "65536"}, {"FirstBurstLength", "262144"}}, &r).ok());
}

TEST(Negotiation, DigestListAnswerMustBeOneWeOffered) {
  OperationalOffer o;
  o.header_digest = {DigestType::kCrc32c};
  TextPairs r;
  OperationalNegotiator n(SessionType::kNormal, o);
  Status st = n.HandleResponse({{"HeaderDigest", "None"}}, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("HeaderDigest=None"), std::string::npos) << st.message();
  OperationalNegotiator ok(SessionType::kNormal, o);
  ASSERT_TRUE(ok.HandleResponse({{"HeaderDigest", "CRC32C"}}, &r).ok());
  EXPECT_EQ(ok.params().header_digest, DigestType::kCrc32c);
}

TEST(Negotiation, SpecialAnswersKeepDefaults) {
  TextPairs r;
  OperationalNegotiator n(SessionType::kNormal, OperationalOffer{});
  ASSERT_TRUE(n.HandleResponse({{"ImmediateData", "Reject"},
                                {"MaxConnections", "Irrelevant"},
                                {"IFMarker", "NotUnderstood"}},
                               &r)
                  .ok());
  EXPECT_TRUE(n.params().immediate_data);  // RFC default Yes
  EXPECT_EQ(n.params().max_connections, 1u);
}

TEST(Negotiation, TargetProposalsAreAnswered) {
  OperationalOffer o;
  o.header_digest = {DigestType::kNone, DigestType::kCrc32c};
  OperationalNegotiator n(SessionType::kNormal, o);
  TextPairs r;
  // Keys we did not propose (pretend): the target proposes, we compute and reply.
  ASSERT_TRUE(n.HandleResponse({{"X-com.vendor.Thing", "1"}}, &r).ok());
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].value, "NotUnderstood");
  OperationalNegotiator n2(SessionType::kDiscovery, o);
  r.clear();
  ASSERT_TRUE(n2.HandleResponse({{"InitialR2T", "Yes"}, {"MaxBurstLength", "1024"}}, &r).ok());
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].value, "Irrelevant");
  EXPECT_EQ(r[1].value, "Irrelevant");
}

TEST(Negotiation, AKeyAnsweredTwiceIsAnError) {
  OperationalOffer o;
  o.header_digest = {DigestType::kNone, DigestType::kCrc32c};
  OperationalNegotiator n(SessionType::kNormal, o);
  TextPairs r;
  ASSERT_TRUE(n.HandleResponse({{"HeaderDigest", "CRC32C"}}, &r).ok());
  EXPECT_EQ(n.params().header_digest, DigestType::kCrc32c);
  Status st = n.HandleResponse({{"HeaderDigest", "None"}}, &r);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.message();
}

TEST(Negotiation, DeclarationsAreRecorded) {
  OperationalNegotiator n(SessionType::kNormal, OperationalOffer{});
  TextPairs r;
  ASSERT_TRUE(n.HandleResponse({{"MaxRecvDataSegmentLength", "65536"},
                                {"TargetAlias", "disk one"},
                                {"TargetPortalGroupTag", "7"}},
                               &r)
                  .ok());
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(n.params().target_max_recv_data_segment_length, 65536u);
  EXPECT_EQ(n.params().initiator_max_recv_data_segment_length, 16777215u);
  EXPECT_EQ(n.params().target_alias, "disk one");
  EXPECT_EQ(*n.params().target_portal_group_tag, 7);
  OperationalNegotiator bad(SessionType::kNormal, OperationalOffer{});
  EXPECT_FALSE(bad.HandleResponse({{"MaxRecvDataSegmentLength", "100"}}, &r).ok());
  EXPECT_FALSE(bad.HandleResponse({{"TargetPortalGroupTag", "0"}}, &r).ok());
}

TEST(Negotiation, BurstLengthsMayArriveInSeparateResponses) {
  TextPairs r;
  OperationalNegotiator n(SessionType::kNormal, OperationalOffer{});
  // MaxBurstLength alone first: FirstBurstLength is still our 262144 offer, yet not an error.
  ASSERT_TRUE(n.HandleResponse({{"MaxBurstLength", "0x10000"}}, &r).ok());
  EXPECT_EQ(n.params().max_burst_length, 65536u);
  ASSERT_TRUE(n.HandleResponse({{"FirstBurstLength", "65536"}}, &r).ok());
  EXPECT_EQ(n.params().first_burst_length, 65536u);
  OperationalNegotiator late(SessionType::kNormal, OperationalOffer{});
  ASSERT_TRUE(late.HandleResponse({{"MaxBurstLength", "65536"}}, &r).ok());
  EXPECT_FALSE(late.HandleResponse({{"FirstBurstLength", "131072"}}, &r).ok());
}

TEST(Negotiation, TargetProposesKeysWeDidNotSend) {
  TextPairs r;
  OperationalNegotiator tcp(SessionType::kNormal, OperationalOffer{});
  ASSERT_TRUE(tcp.HandleResponse(
                     {{"RDMAExtensions", "Yes"}, {"InitiatorRecvDataSegmentLength", "8192"}}, &r)
                  .ok());
  EXPECT_EQ(
      r, (TextPairs{{"RDMAExtensions", "No"}, {"InitiatorRecvDataSegmentLength", "Irrelevant"}}));
  EXPECT_FALSE(tcp.params().rdma_extensions);

  OperationalOffer o;
  o.rdma_extensions = true;
  OperationalNegotiator iser(SessionType::kNormal, o);
  r.clear();
  ASSERT_TRUE(
      iser.HandleResponse({{"IFMarker", "Yes"}, {"MaxRecvDataSegmentLength", "0x2000"}}, &r).ok());
  EXPECT_EQ(r, (TextPairs{{"IFMarker", "No"}}));
  EXPECT_FALSE(iser.params().if_marker);
  EXPECT_EQ(iser.params().target_max_recv_data_segment_length, 8192u);

  OperationalNegotiator disc(SessionType::kDiscovery, OperationalOffer{});
  r.clear();
  ASSERT_TRUE(disc.HandleResponse({{"OFMarker", "No"}, {"MaxConnections", "4"}}, &r).ok());
  EXPECT_EQ(r, (TextPairs{{"OFMarker", "No"}, {"MaxConnections", "Irrelevant"}}));
}

}  // namespace
}  // namespace iser
