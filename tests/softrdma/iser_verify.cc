/* iser_verify INITIATOR URL BACKING_FILE ITERATIONS SEED
 * Writes random blocks of 512 B to 256 KiB through libiscsi (an iser:// URL), reads each back,
 * and compares both the read data and the target's backing file byte for byte. Exit 0 on success.
 */
#include <fcntl.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static int fail(const char* what, struct iscsi_context* iscsi) {
  fprintf(stderr, "FAIL: %s: %s\n", what, iscsi ? iscsi_get_error(iscsi) : "");
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s INITIATOR URL BACKING_FILE ITERATIONS SEED\n", argv[0]);
    return 2;
  }
  struct iscsi_context* iscsi = iscsi_create_context(argv[1]);
  struct iscsi_url* url = iscsi_parse_full_url(iscsi, argv[2]);
  if (!url) return fail("bad URL", iscsi);
  if (iscsi_init_transport(iscsi, url->transport)) return fail("transport", iscsi);
  iscsi_set_targetname(iscsi, url->target);
  iscsi_set_session_type(iscsi, ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(iscsi, ISCSI_HEADER_DIGEST_NONE);
  if (iscsi_full_connect_sync(iscsi, url->portal, url->lun)) return fail("login", iscsi);
  int fd = open(argv[3], O_RDONLY);
  if (fd < 0) return fail("backing file", nullptr);
  off_t size = lseek(fd, 0, SEEK_END);
  uint64_t blocks = (uint64_t)size / 512;
  int iterations = atoi(argv[4]);
  srandom((unsigned)atoi(argv[5]));
  auto* buf = static_cast<unsigned char*>(malloc(256 * 1024));
  auto* file = static_cast<unsigned char*>(malloc(256 * 1024));
  unsigned long long bytes = 0;
  for (int i = 0; i < iterations; i++) {
    uint32_t nblocks = 1 + random() % 512;
    uint64_t lba = random() % (blocks - nblocks + 1);
    uint32_t len = nblocks * 512;
    for (uint32_t j = 0; j < len; j++) buf[j] = (unsigned char)random();
    struct scsi_task* t = iscsi_write16_sync(iscsi, url->lun, lba, buf, len, 512, 0, 0, 0, 0, 0);
    if (!t || t->status != SCSI_STATUS_GOOD) return fail("WRITE(16)", iscsi);
    scsi_free_scsi_task(t);
    t = iscsi_read16_sync(iscsi, url->lun, lba, len, 512, 0, 0, 0, 0, 0);
    if (!t || t->status != SCSI_STATUS_GOOD) return fail("READ(16)", iscsi);
    if (t->datain.size != (int)len || memcmp(t->datain.data, buf, len)) {
      fprintf(stderr, "FAIL: read back differs at lba %llu len %u\n", (unsigned long long)lba, len);
      return 1;
    }
    scsi_free_scsi_task(t);
    if (pread(fd, file, len, (off_t)lba * 512) != (ssize_t)len || memcmp(file, buf, len)) {
      fprintf(stderr, "FAIL: backing file differs at lba %llu len %u\n", (unsigned long long)lba,
              len);
      return 1;
    }
    bytes += len;
  }
  printf("verified %d writes and reads, %llu bytes\n", iterations, bytes);
  free(buf);
  free(file);
  close(fd);
  iscsi_logout_sync(iscsi);
  iscsi_destroy_url(url);
  iscsi_destroy_context(iscsi);
  return 0;
}
