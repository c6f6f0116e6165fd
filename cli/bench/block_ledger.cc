#include "cli/bench/block_ledger.h"

namespace iser::cli {

BlockLedger::BlockLedger(uint64_t blocks)
    : blocks_(blocks), state_(std::make_unique<std::atomic<uint32_t>[]>(blocks)) {}

bool BlockLedger::TryClaim(uint64_t block) {
  std::atomic<uint32_t>& s = state_[block];
  uint32_t v = s.load(std::memory_order_relaxed);
  while ((v & kClaimed) == 0) {
    if (s.compare_exchange_weak(v, v | kClaimed, std::memory_order_acquire,
                                std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

uint64_t BlockLedger::ClaimFrom(uint64_t block) {
  while (!TryClaim(block)) block = block + 1 == blocks_ ? 0 : block + 1;
  return block;
}

void BlockLedger::Release(uint64_t block) {
  state_[block].fetch_and(~kClaimed, std::memory_order_release);
}

uint32_t BlockLedger::generation(uint64_t block) const {
  return state_[block].load(std::memory_order_relaxed) & ~kClaimed;
}

uint32_t BlockLedger::NextGeneration(uint64_t block) {
  const uint32_t next = generation(block) + 1;
  state_[block].store(next | kClaimed, std::memory_order_relaxed);
  return next;
}

void BlockLedger::SetAll(uint32_t generation) {
  for (uint64_t b = 0; b < blocks_; ++b) state_[b].store(generation, std::memory_order_relaxed);
}

}  // namespace iser::cli
