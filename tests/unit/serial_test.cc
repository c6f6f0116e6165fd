// Serial number arithmetic and the CmdSN window, including wrap-around at 2^32.
#include <gtest/gtest.h>

#include "initiator/session/serial.h"

namespace iser {
namespace {

TEST(Serial, ComparesAcrossWrap) {
  EXPECT_TRUE(SerialLess(0xfffffff0u, 0x10u));
  EXPECT_FALSE(SerialLess(0x10u, 0xfffffff0u));
  EXPECT_TRUE(SerialGreater(0u, 0xffffffffu));
  EXPECT_TRUE(SerialLessEqual(5u, 5u));
  EXPECT_FALSE(SerialLess(5u, 5u));
}

TEST(CmdWindow, CommandsPastMaxCmdSNWait) {
  CmdWindow w;
  w.Reset(1, 1, 2);  // room for CmdSN 1 and 2
  ASSERT_TRUE(w.Open());
  EXPECT_EQ(w.Take(), 1u);
  ASSERT_TRUE(w.Open());
  EXPECT_EQ(w.Take(), 2u);
  EXPECT_FALSE(w.Open());
  w.Update(3, 10);
  EXPECT_TRUE(w.Open());
}

TEST(CmdWindow, WrapsAroundTwoToTheThirtyTwo) {
  CmdWindow w;
  w.Reset(0xfffffffeu, 0xfffffffeu, 0x00000001u);
  int sent = 0;
  while (w.Open()) {
    w.Take();
    ++sent;
  }
  EXPECT_EQ(sent, 4);  // 0xfffffffe, 0xffffffff, 0, 1
  EXPECT_EQ(w.next(), 2u);
  w.Update(2, 5);
  EXPECT_TRUE(w.Open());
  EXPECT_EQ(w.max(), 5u);
}

TEST(CmdWindow, IgnoresStaleAndInvalidUpdates) {
  CmdWindow w;
  w.Reset(10, 10, 20);
  w.Update(9, 15);  // older: neither moves back
  EXPECT_EQ(w.exp(), 10u);
  EXPECT_EQ(w.max(), 20u);
  w.Update(30, 20);  // MaxCmdSN < ExpCmdSN - 1: invalid, ignored entirely
  EXPECT_EQ(w.exp(), 10u);
  w.Update(12, 11);  // MaxCmdSN = ExpCmdSN - 1: window closed, valid
  EXPECT_EQ(w.exp(), 12u);
  EXPECT_EQ(w.max(), 20u);  // does not shrink
}

}  // namespace
}  // namespace iser
