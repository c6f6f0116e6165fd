// How the session moves SCSI data, driven over the fake datamover: immediate data and
// unsolicited Data-Out per ImmediateData/InitialR2T/FirstBurstLength, R2T → Data-Out under
// MaxBurstLength, and Data-In with phase-collapsed status and residuals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "initiator/scsi/sense.h"
#include "tests/unit/session_fixture.h"

namespace iser::test {
namespace {

class SessionDataTest : public SessionTest {
 protected:
  // Login answers with these keys replacing the fake's defaults of the same name.
  void OpenWith(std::vector<std::string> keys) {
    for (const std::string& k : keys) {
      const std::string name = k.substr(0, k.find('=') + 1);
      for (std::string& d : fake_.options().login_keys) {
        if (d.compare(0, name.size(), name) == 0) d = k;
      }
    }
    Open();
  }
  Bhs R2T(const TestTask& t, uint32_t r2tsn, uint32_t offset, uint32_t length) {
    Bhs b = fake_.Header(Opcode::kR2T, t.task.itt);
    b.set_u32(bhs::kTtt, 0x5500 + r2tsn);
    b.set_u32(bhs::kDataSN, r2tsn);
    b.set_u32(bhs::kBufferOffset, offset);
    b.set_u32(bhs::kDesiredLength, length);
    return b;
  }
  Bhs DataIn(const TestTask& t, uint32_t data_sn, uint32_t offset, uint8_t flags = 0) {
    Bhs b = fake_.Header(Opcode::kDataIn, t.task.itt);
    b.set_flags(flags);
    b.set_u32(bhs::kDataSN, data_sn);
    b.set_u32(bhs::kBufferOffset, offset);
    return b;
  }
  void ExpectProtocolFailure(const std::string& words) {
    ASSERT_TRUE(fake_.failed());
    EXPECT_EQ(fake_.failure().code(), StatusCode::kProtocolError) << fake_.failure().message();
    EXPECT_NE(fake_.failure().message().find(words), std::string::npos)
        << fake_.failure().message();
  }
};

struct BurstCase {
  const char* immediate_data;
  const char* initial_r2t;
  uint32_t transfer_length;
  uint32_t immediate_bytes;
  uint32_t unsolicited_bytes;
};

class SessionBurstTest : public SessionDataTest, public ::testing::WithParamInterface<BurstCase> {};

TEST_P(SessionBurstTest, ImmediateAndUnsolicitedDataFollowTheNegotiatedKeys) {
  const BurstCase& c = GetParam();
  OpenWith({std::string("ImmediateData=") + c.immediate_data,
            std::string("InitialR2T=") + c.initial_r2t, "FirstBurstLength=16384",
            "MaxRecvDataSegmentLength=8192"});
  TestTask& w = NewWrite(c.transfer_length);
  session_->Submit(&w.task);
  std::vector<SentPdu> sent = TakeCommands();
  ASSERT_EQ(sent.size(), 1u);
  const SentPdu& cmd = sent[0];
  EXPECT_EQ(cmd.bhs.data_segment_length(), c.immediate_bytes);
  ASSERT_EQ(cmd.data.size(), c.immediate_bytes);
  EXPECT_TRUE(std::equal(cmd.data.begin(), cmd.data.end(), w.buffer.begin()));
  EXPECT_EQ(cmd.unsolicited_bytes, c.unsolicited_bytes);
  EXPECT_EQ((cmd.bhs.flags() & kFinalBit) != 0, c.unsolicited_bytes == 0);
  EXPECT_NE(cmd.bhs.flags() & kWriteBit, 0);
  EXPECT_EQ(cmd.bhs.u32(bhs::kExpectedDataTransferLength), c.transfer_length);
  Respond(w);
  EXPECT_EQ(w.completions, 1);
}

INSTANTIATE_TEST_SUITE_P(Keys, SessionBurstTest,
                         ::testing::Values(BurstCase{"Yes", "No", 65536, 8192, 8192},
                                           BurstCase{"Yes", "Yes", 65536, 8192, 0},
                                           BurstCase{"No", "No", 65536, 0, 16384},
                                           BurstCase{"No", "Yes", 65536, 0, 0},
                                           BurstCase{"Yes", "No", 4096, 4096, 0},
                                           BurstCase{"Yes", "No", 12288, 8192, 4096}));

TEST_F(SessionDataTest, R2TsAreAnsweredWithTheRequestedBytes) {
  OpenWith({"MaxBurstLength=32768", "FirstBurstLength=16384"});
  TestTask& w = NewWrite(65536);
  session_->Submit(&w.task);
  ASSERT_EQ(TakeCommands().size(), 1u);
  fake_.Deliver(R2T(w, 0, 0, 32768));
  fake_.Deliver(R2T(w, 1, 32768, 32768));
  std::vector<SentPdu> sent = fake_.TakeSent();
  ASSERT_EQ(sent.size(), 2u);
  for (uint32_t i = 0; i < 2; ++i) {
    EXPECT_EQ(sent[i].kind, SentPdu::Kind::kDataOut);
    EXPECT_EQ(sent[i].task, &w.task);
    EXPECT_EQ(sent[i].ttt, 0x5500 + i);
    EXPECT_EQ(sent[i].offset, 32768 * i);
    EXPECT_EQ(sent[i].length, 32768u);
    EXPECT_TRUE(std::equal(sent[i].data.begin(), sent[i].data.end(), w.buffer.begin() + 32768 * i));
  }
  Respond(w);
  EXPECT_EQ(w.completions, 1);
  EXPECT_TRUE(w.task.status.ok());
  EXPECT_FALSE(fake_.failed());
}

TEST_F(SessionDataTest, AnR2TAboveMaxBurstLengthFailsTheConnection) {
  OpenWith({"MaxBurstLength=32768", "FirstBurstLength=16384"});
  TestTask& w = NewWrite(65536);
  session_->Submit(&w.task);
  fake_.Deliver(R2T(w, 0, 0, 32769));
  ExpectProtocolFailure("MaxBurstLength");
  EXPECT_EQ(w.completions, 1);
  EXPECT_FALSE(w.task.status.ok());
  for (const SentPdu& p : fake_.sent()) EXPECT_NE(p.kind, SentPdu::Kind::kDataOut);
}

TEST_F(SessionDataTest, AnR2TBeyondTheTransferLengthFailsTheConnection) {
  Open();
  TestTask& w = NewWrite(8192);
  session_->Submit(&w.task);
  fake_.Deliver(R2T(w, 0, 4096, 8192));
  ExpectProtocolFailure("outside the command's 8192 bytes");
  EXPECT_EQ(w.completions, 1);
}

TEST_F(SessionDataTest, AnR2TOutOfSequenceFailsTheConnection) {
  Open();
  TestTask& w = NewWrite(8192);
  session_->Submit(&w.task);
  fake_.Deliver(R2T(w, 1, 0, 4096));
  ExpectProtocolFailure("R2TSN 1, expected 0");
}

TEST_F(SessionDataTest, AnR2TForAReadFailsTheConnection) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  fake_.Deliver(R2T(r, 0, 0, 4096));
  ExpectProtocolFailure("writes no data");
}

TEST_F(SessionDataTest, DataInLandsInTheBufferAndTheLastCarriesTheStatus) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  std::vector<uint8_t> a(4096, 0xa1), b(4096, 0xb2);
  fake_.Deliver(DataIn(r, 0, 0), a);
  EXPECT_EQ(r.completions, 0);
  fake_.Deliver(DataIn(r, 1, 4096, kFinalBit | kStatusBit), b);
  ASSERT_EQ(r.completions, 1);
  EXPECT_TRUE(r.task.status.ok()) << r.task.status.message();
  EXPECT_EQ(r.task.scsi_status, 0);
  EXPECT_FALSE(r.task.residual_underflow);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), r.buffer.begin()));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), r.buffer.begin() + 4096));
  EXPECT_FALSE(fake_.failed());
}

TEST_F(SessionDataTest, DataInWithUnderflowCompletesWithTheResidual) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  Bhs d = DataIn(r, 0, 0, kFinalBit | kStatusBit | kResidualUnderflow);
  d.set_u32(bhs::kResidualCount, 4096);
  fake_.Deliver(d, std::vector<uint8_t>(4096, 0x33));
  ASSERT_EQ(r.completions, 1);
  EXPECT_TRUE(r.task.status.ok()) << r.task.status.message();
  EXPECT_TRUE(r.task.residual_underflow);
  EXPECT_EQ(r.task.residual, 4096u);
  EXPECT_FALSE(fake_.failed());
}

TEST_F(SessionDataTest, DataInWithOverflowCompletesWithTheResidual) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  Bhs d = DataIn(r, 0, 0, kFinalBit | kStatusBit | kResidualOverflow);
  d.set_u32(bhs::kResidualCount, 512);
  fake_.Deliver(d, std::vector<uint8_t>(8192, 0x44));
  ASSERT_EQ(r.completions, 1);
  EXPECT_TRUE(r.task.status.ok()) << r.task.status.message();
  EXPECT_TRUE(r.task.residual_overflow);
  EXPECT_EQ(r.task.residual, 512u);
}

TEST_F(SessionDataTest, StatsCountCommandsAndTheBytesTheyMoved) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  Bhs d = DataIn(r, 0, 0, kFinalBit | kStatusBit | kResidualUnderflow);
  d.set_u32(bhs::kResidualCount, 4096);
  fake_.Deliver(d, std::vector<uint8_t>(4096, 0x33));
  TestTask& w = NewWrite(4096);
  session_->Submit(&w.task);
  Respond(w);
  TestTask& failed = NewWrite(8192);
  session_->Submit(&failed.task);
  Respond(failed, scsi_status::kReservationConflict);
  ASSERT_EQ(r.completions + w.completions + failed.completions, 3);
  const SessionStats s = session_->stats();
  EXPECT_EQ(s.commands, 3u);
  EXPECT_EQ(s.bytes_read, 4096u);
  EXPECT_EQ(s.bytes_written, 4096u);
}

TEST_F(SessionDataTest, DataInOutOfSequenceFailsTheConnection) {
  Open();
  TestTask& r = NewRead(8192);
  session_->Submit(&r.task);
  fake_.Deliver(DataIn(r, 1, 0), std::vector<uint8_t>(512));
  ExpectProtocolFailure("DataSN 1, expected 0");
  EXPECT_EQ(r.completions, 1);
}

TEST_F(SessionDataTest, DataInBeyondTheTransferLengthFailsTheConnection) {
  Open();
  TestTask& r = NewRead(4096);
  session_->Submit(&r.task);
  fake_.Deliver(DataIn(r, 0, 2048), std::vector<uint8_t>(4096));
  ExpectProtocolFailure("beyond the expected transfer length");
}

// Defect 6: a status-only Data-In (no data segment, so no PlaceDataIn) for an ITT that is not
// in flight.
TEST_F(SessionDataTest, ADataInWithoutDataForAnUnknownIttFailsTheConnection) {
  Open();
  TestTask& r = NewRead(4096);
  session_->Submit(&r.task);
  Bhs d = DataIn(r, 0, 0, kFinalBit | kStatusBit);
  d.set_itt(r.task.itt ^ 0x400);  // same slot, another generation
  fake_.Deliver(d);
  ExpectProtocolFailure("unknown ITT");
  EXPECT_EQ(r.completions, 1);
}

// Defect 6 where it crashed: Session::HandleDataIn dereferenced its task unchecked, trusting the
// datamover to have placed the data (and so checked the ITT) first.
TEST_F(SessionDataTest, ADataInWithDataThatWasNeverPlacedFailsTheConnection) {
  Open();
  TestTask& r = NewRead(4096);
  session_->Submit(&r.task);
  Bhs d = DataIn(r, 0, 0, kFinalBit | kStatusBit);
  d.set_itt(r.task.itt ^ 0x400);  // same slot, another generation
  fake_.DeliverUnplaced(d, std::vector<uint8_t>(512, 7));
  ExpectProtocolFailure("unknown ITT");
  EXPECT_EQ(r.completions, 1);
}

TEST_F(SessionDataTest, ADataInAfterTheTaskCompletedFailsTheConnection) {
  Open();
  TestTask& r = NewRead(4096);
  session_->Submit(&r.task);
  fake_.Deliver(DataIn(r, 0, 0, kFinalBit | kStatusBit), std::vector<uint8_t>(4096, 1));
  ASSERT_EQ(r.completions, 1);
  fake_.Deliver(DataIn(r, 1, 0, kFinalBit | kStatusBit));
  ExpectProtocolFailure("unknown ITT");
  EXPECT_EQ(r.completions, 1);
}

}  // namespace
}  // namespace iser::test
