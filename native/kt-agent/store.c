/*
 * kt-agent: the retained output of each stream, on the computer's disk.
 *
 * A stream's bytes are addressed by their offset since the process started. The store keeps the
 * first `store_head` bytes and the last `store_tail` bytes of each stream (everything while it is
 * shorter than both), in one file per stream: the head at file offset 0, then a ring. What falls out
 * between them is counted, never kept, so a reader is told exactly what is missing. A write the disk
 * refuses (full, quota) moves the start of what is retained past it: the bytes are counted as fallen
 * out rather than served from stale file contents.
 *
 * The files are unnamed (O_TMPFILE, or created and unlinked at once where the filesystem has no
 * O_TMPFILE): no path reaches them, and the agent is non-dumpable, so no guest can open them through
 * /proc either. A stream's file is made with its first byte: most streams of short commands (stderr
 * above all) never write one, and making a file (an inode on ext4) costs more than starting `true`.
 * Their space is freed when the process's record is evicted, or the agent ends.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef O_TMPFILE
#define O_TMPFILE (020000000 | O_DIRECTORY)
#endif

int store_dir = -1;
uint64_t store_head = 8u << 20, store_tail = 24u << 20;

void store_init(struct store *s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

static int store_open(struct store *s) {
  s->opened = 1;
  s->fd = openat(store_dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (s->fd >= 0) return 0;
  /* No O_TMPFILE here (overlayfs before 6.6, say): a fresh name, unlinked before anything is written. */
  for (int attempt = 0; attempt < 16; attempt++) {
    unsigned char r[8];
    char name[32];
    if (getrandom(r, sizeof r, 0) != sizeof r) return -1;
    snprintf(name, sizeof name, ".kt-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    s->fd = openat(store_dir, name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->fd >= 0) {
      unlinkat(store_dir, name, 0);
      return 0;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

void store_close(struct store *s) {
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
}

static int write_at(int fd, const char *data, size_t len, uint64_t at) {
  while (len > 0) {
    ssize_t n = pwrite(fd, data, len, (off_t)at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    data += n;
    len -= (size_t)n;
    at += (uint64_t)n;
  }
  return 0;
}

/* The first retained tail byte. */
static uint64_t tail_start(const struct store *s) {
  uint64_t start = s->total > store_tail ? s->total - store_tail : 0;
  if (start < store_head) start = store_head;
  if (start < s->floor) start = s->floor;
  return start < s->total ? start : s->total;
}

int store_append(struct store *s, const char *data, size_t len) {
  int unopened = !s->opened && store_open(s) < 0;
  uint64_t at = s->total;
  s->total += len;
  int failed = s->fd < 0;
  if (!failed && at < store_head) {
    size_t n = store_head - at < len ? (size_t)(store_head - at) : len;
    if (write_at(s->fd, data, n, at) < 0) failed = 1;
    else s->head_valid = at + n;
    data += n;
    len -= n;
    at += n;
  }
  if (!failed && len > 0 && store_tail > 0) {
    /* Only the last store_tail bytes of a chunk can stay. */
    if (len > store_tail) { data += len - store_tail; at += len - store_tail; len = (size_t)store_tail; }
    uint64_t pos = (at - store_head) % store_tail;
    size_t first = store_tail - pos < len ? (size_t)(store_tail - pos) : len;
    if (write_at(s->fd, data, first, store_head + pos) < 0 ||
        (first < len && write_at(s->fd, data + first, len - first, store_head) < 0)) failed = 1;
  }
  if (failed) s->floor = s->total; /* nothing before this point can be trusted to be on disk */
  return unopened ? -1 : 0;
}

size_t store_read(const struct store *s, uint64_t from, size_t max, char *buf, uint64_t *start) {
  uint64_t head_len = s->head_valid < s->total ? s->head_valid : s->total;
  if (head_len > store_head) head_len = store_head;
  if (from > s->total) from = s->total;
  if (from < head_len) {
    size_t n = head_len - from < max ? (size_t)(head_len - from) : max;
    *start = from;
    ssize_t got = s->fd < 0 ? -1 : pread(s->fd, buf, n, (off_t)from);
    return got > 0 ? (size_t)got : 0;
  }
  uint64_t tail = tail_start(s);
  if (from < tail) from = tail;
  *start = from;
  size_t n = s->total - from < max ? (size_t)(s->total - from) : max;
  if (n == 0 || s->fd < 0 || store_tail == 0) return 0;
  uint64_t pos = (from - store_head) % store_tail;
  size_t first = store_tail - pos < n ? (size_t)(store_tail - pos) : n;
  ssize_t a = pread(s->fd, buf, first, (off_t)(store_head + pos));
  if (a != (ssize_t)first) return a > 0 ? (size_t)a : 0;
  if (first == n) return n;
  ssize_t b = pread(s->fd, buf + first, n - first, (off_t)store_head);
  return first + (b > 0 ? (size_t)b : 0);
}

uint64_t store_first_after(const struct store *s, uint64_t from) {
  uint64_t head_len = s->head_valid < store_head ? s->head_valid : store_head;
  if (from < head_len || from >= s->total) return from > s->total ? s->total : from;
  uint64_t tail = tail_start(s);
  return from < tail ? tail : from;
}
