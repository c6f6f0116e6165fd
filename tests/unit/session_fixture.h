// SessionTest: a Session opened over a FakeConnection (tests/harness/fake_datamover.h), for the
// session logic tests: no socket, no thread, a clock the test moves. Tasks made with NewRead and
// NewWrite live until the session is gone, so its teardown may still complete them.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "initiator/scsi/commands.h"
#include "initiator/session/session.h"
#include "tests/harness/fake_datamover.h"

namespace iser::test {

struct TestTask {
  Task task;
  std::vector<uint8_t> buffer;
  // Atomic: a recovering session may complete a task on its recovery thread.
  std::atomic<int> completions{0};
};

class SessionTest : public ::testing::Test {
 protected:
  SessionOptions Options() {
    SessionOptions o;
    o.portal = {"192.0.2.1", 3260};
    o.target_name = "iqn.2026-11.io.iser-connect.test:disk";
    o.initiator_name = "iqn.2026-11.io.iser-connect.test:host";
    o.datamover_factory = fake_.Factory();
    // Bounds a test that forgets to finish its tasks; no test waits for it.
    o.logout_timeout = std::chrono::milliseconds(200);
    // The session logic tests see a lost connection end the session, and commands wait as long
    // as the test likes; the recovery and timeout tests turn these on.
    o.recover = false;
    o.command_timeout = std::chrono::milliseconds(0);
    return o;
  }
  // A session that recovers, with no wait before the first reconnect (DefaultTime2Wait 0 on
  // both sides): the recovery tests run on the real clock.
  SessionOptions RecoveringOptions() {
    SessionOptions o = Options();
    o.recover = true;
    o.offer.default_time2wait = 0;
    std::vector<std::string> keys = DefaultTargetLoginKeys();
    for (std::string& k : keys) {
      if (k.starts_with("DefaultTime2Wait=")) k = "DefaultTime2Wait=0";
    }
    fake_.options().login_keys = keys;
    return o;
  }
  void Open() { Open(Options()); }
  void Open(const SessionOptions& o) {
    Result<std::unique_ptr<Session>> s = Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    session_ = std::move(*s);
  }
  TestTask& NewRead(uint32_t bytes) {
    TestTask& t = tasks_.emplace_back();
    t.buffer.assign(bytes, 0);
    scsi::Read(t.task, 0, bytes / 512, t.buffer.data(), bytes);
    Prepare(t);
    return t;
  }
  TestTask& NewWrite(uint32_t bytes) {
    TestTask& t = tasks_.emplace_back();
    t.buffer.resize(bytes);
    for (uint32_t i = 0; i < bytes; ++i) t.buffer[i] = static_cast<uint8_t>(i * 7 + 1);
    scsi::Write(t.task, 0, bytes / 512, t.buffer.data(), bytes, false);
    Prepare(t);
    return t;
  }
  // The SCSI Commands sent so far, in order (and forgets everything sent).
  std::vector<SentPdu> TakeCommands() {
    std::vector<SentPdu> out;
    for (SentPdu& p : fake_.TakeSent()) {
      if (p.kind == SentPdu::Kind::kCommand) out.push_back(std::move(p));
    }
    return out;
  }
  // Ends t as a good target would: a successful READ with all its data in one Data-In carrying
  // the status, anything else with a SCSI Response.
  void Respond(const TestTask& t, uint8_t scsi_status = 0) {
    if (t.task.direction == DataDirection::kRead && scsi_status == 0) {
      Bhs d = fake_.Header(Opcode::kDataIn, t.task.itt);
      d.set_flags(kFinalBit | kStatusBit);
      d.set_u32(bhs::kDataSN, t.task.next_data_sn);
      fake_.Deliver(d, std::vector<uint8_t>(t.task.transfer_length, 0x5a));
      return;
    }
    Bhs r = fake_.Header(Opcode::kScsiResponse, t.task.itt);
    r.b[3] = scsi_status;
    fake_.Deliver(r);
  }

  FakeConnection fake_;
  std::deque<TestTask> tasks_;
  std::unique_ptr<Session> session_;

 private:
  static void Prepare(TestTask& t) {
    t.task.context = &t;
    t.task.on_complete = [](Task* task) { ++static_cast<TestTask*>(task->context)->completions; };
  }
};

}  // namespace iser::test
