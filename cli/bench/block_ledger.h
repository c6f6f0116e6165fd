// BlockLedger: for bench --verify, per --bs block of the range, the generation of the last write
// (what a read must find there; 0: not written in this run, content unknown) and whether an I/O
// is in flight on it.
//
// An I/O first claims its block and releases it on completion, so no two I/Os on one block are
// ever in flight together: a read never races a write whose outcome it could not predict, and
// no two writes race to decide a block's content. Only the claim holder reads or changes a
// block's generation; claims and releases order those accesses between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace iser::cli {

class BlockLedger {
 public:
  explicit BlockLedger(uint64_t blocks);

  uint64_t blocks() const { return blocks_; }

  // Claims block if no I/O holds it.
  bool TryClaim(uint64_t block);
  // Claims the first free block at or after block, wrapping around; there must be fewer
  // claims held than blocks.
  uint64_t ClaimFrom(uint64_t block);
  void Release(uint64_t block);

  // The claim holder's view: what the block holds, and the generation a write it is about to
  // make will put there (recorded now: a failed write ends the run).
  uint32_t generation(uint64_t block) const;
  uint32_t NextGeneration(uint64_t block);

  // Every block holds this generation (after a prefill); no claims may be held.
  void SetAll(uint32_t generation);

 private:
  static constexpr uint32_t kClaimed = 1u << 31;

  uint64_t blocks_;
  // Low 31 bits: the generation; top bit: claimed.
  std::unique_ptr<std::atomic<uint32_t>[]> state_;
};

}  // namespace iser::cli
