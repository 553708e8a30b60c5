/* kt-agent: byte order, buffers, epoll and time helpers. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

int epfd = -1;

void put16(char *p, uint16_t v) { p[0] = (char)v; p[1] = (char)(v >> 8); }
void put32(char *p, uint32_t v) { p[0] = (char)v; p[1] = (char)(v >> 8); p[2] = (char)(v >> 16); p[3] = (char)(v >> 24); }
uint16_t get16(const char *p) { const unsigned char *u = (const unsigned char *)p; return (uint16_t)(u[0] | (u[1] << 8)); }
uint32_t get32(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return u[0] | (u[1] << 8) | (u[2] << 16) | ((uint32_t)u[3] << 24);
}
void put64(char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }
uint64_t get64(const char *p) { return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32); }

void die(const char *what) {
  fprintf(stderr, "kt-agent: %s: %s\n", what, strerror(errno));
  shutdown_and_exit();
}

void ob_push(struct obuf *b, const char *data, size_t len) {
  if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
  if (b->len + len > b->cap) {
    if (b->off > 0) { memmove(b->buf, b->buf + b->off, b->len - b->off); b->len -= b->off; b->off = 0; }
    if (b->len + len > b->cap) {
      size_t cap = b->cap ? b->cap : 4096;
      while (cap < b->len + len) cap *= 2;
      char *nb = realloc(b->buf, cap);
      if (!nb) die("realloc");
      b->buf = nb;
      b->cap = cap;
    }
  }
  memcpy(b->buf + b->len, data, len);
  b->len += len;
}

size_t ob_pending(const struct obuf *b) { return b->len - b->off; }

ssize_t ob_flush(struct obuf *b, int fd) {
  ssize_t total = 0;
  while (ob_pending(b) > 0) {
    ssize_t w = write(fd, b->buf + b->off, ob_pending(b));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return total;
      return -1;
    }
    b->off += (size_t)w;
    total += w;
  }
  b->off = b->len = 0;
  /* A burst's buffer is not kept by an idle connection. */
  if (b->cap > (1u << 20)) ob_free(b);
  return total;
}

void ob_free(struct obuf *b) { free(b->buf); b->buf = NULL; b->len = b->off = b->cap = 0; }

uint64_t tag(size_t slot, int kind) { return ((uint64_t)slot << 8) | (uint64_t)kind; }

void ep_add(int fd, uint64_t t, uint32_t events) {
  struct epoll_event ev = { .events = events, .data.u64 = t };
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl add");
}

void ep_mod(int fd, uint64_t t, uint32_t events) {
  struct epoll_event ev = { .events = events, .data.u64 = t };
  epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}

void close_fd(int *fd) {
  if (*fd >= 0) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, *fd, NULL);
    close(*fd);
    *fd = -1;
  }
}

void set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
