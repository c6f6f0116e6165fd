// unaligned_client URI: an NBD client that ignores the export's minimum block size on purpose,
// to test that the plugin serves unaligned requests (read-modify-write) correctly, even when
// many of them share a block at the same time.
//
// Eight threads, one NBD connection each, write 1000-byte records at offsets that are multiples
// of 1000 (so neighbouring records share 512- and 4096-byte blocks), interleaved so that
// neighbours are written concurrently by different threads; then every record is read back with
// unaligned reads and checked. Exit status 0 when every byte is right.
#include <libnbd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kRecord = 1000;
constexpr int kThreads = 8;

void Fill(uint64_t index, uint8_t* out) {
  for (uint64_t i = 0; i < kRecord; ++i) out[i] = static_cast<uint8_t>(index * 131 + i * 7 + 1);
}

// A connection with libnbd's alignment check off, so requests reach the server as issued.
nbd_handle* Connect(const char* uri) {
  nbd_handle* h = nbd_create();
  if (h == nullptr || nbd_set_strict_mode(h, LIBNBD_STRICT_MASK & ~LIBNBD_STRICT_ALIGN) == -1 ||
      nbd_connect_uri(h, uri) == -1) {
    std::fprintf(stderr, "unaligned_client: %s\n", nbd_get_error());
    return nullptr;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: unaligned_client NBD-URI\n");
    return 2;
  }
  nbd_handle* h = Connect(argv[1]);
  if (h == nullptr) return 1;
  const int64_t size = nbd_get_size(h);
  // Start at an odd offset so no record is aligned, and stay within 4 MB.
  const uint64_t base = 333;
  const uint64_t records = std::min<uint64_t>(4000, (static_cast<uint64_t>(size) - base) / kRecord);

  std::vector<std::thread> threads;
  std::vector<int> failed(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      nbd_handle* c = Connect(argv[1]);
      if (c == nullptr) {
        failed[t] = 1;
        return;
      }
      uint8_t rec[kRecord];
      for (uint64_t r = t; r < records; r += kThreads) {
        Fill(r, rec);
        if (nbd_pwrite(c, rec, kRecord, base + r * kRecord, 0) == -1) {
          std::fprintf(stderr, "unaligned_client: pwrite record %llu: %s\n",
                       static_cast<unsigned long long>(r), nbd_get_error());
          failed[t] = 1;
          break;
        }
      }
      nbd_close(c);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int f : failed) {
    if (f) return 1;
  }

  uint8_t want[kRecord], got[kRecord];
  for (uint64_t r = 0; r < records; ++r) {
    Fill(r, want);
    if (nbd_pread(h, got, kRecord, base + r * kRecord, 0) == -1) {
      std::fprintf(stderr, "unaligned_client: pread: %s\n", nbd_get_error());
      return 1;
    }
    if (std::memcmp(want, got, kRecord) != 0) {
      std::fprintf(stderr, "unaligned_client: record %llu at offset %llu is wrong\n",
                   static_cast<unsigned long long>(r),
                   static_cast<unsigned long long>(base + r * kRecord));
      return 1;
    }
  }
  nbd_shutdown(h, 0);
  nbd_close(h);
  std::printf("unaligned_client: %llu records of %llu bytes from %d connections: ok\n",
              static_cast<unsigned long long>(records), static_cast<unsigned long long>(kRecord),
              kThreads);
  return 0;
}
