/*
 * kt-agent: the relay. With --relay-port N the agent listens on 127.0.0.1:N inside the computer and
 * carries every accepted connection to the server as a stream of frames (the server runs the egress
 * proxy; the computer itself has no other network):
 *   RELAY_OPEN (agent: a new stream, its id chosen by the agent, never reused)
 *   RELAY_DATA (either way), RELAY_EOF (either way: no more data in that direction),
 *   RELAY_CREDIT u32 (either way: that many bytes of the other side's DATA were consumed),
 *   RELAY_RESET (server: abort), RELAY_CLOSED u8 reason (agent: the stream is gone; 0 clean, 1 reset)
 * The server may open streams too (preview URLs): RELAY_CONNECT u16 port, with an id of its own that
 * has the top bit set (the agent's ids never do), asks the agent to connect to 127.0.0.1:port inside
 * the computer, without --relay-port too; the agent answers RELAY_OPEN once connected, or
 * RELAY_CLOSED 2 when it cannot. The computer gets no network from it: only the server's stream.
 * Flow control is per stream and direction: a side sends DATA only while the bytes it sent and the
 * other side has not credited stay within RELAY_WINDOW. The agent stops reading a socket whose window
 * is full, and buffers at most a window of the server's data per stream, so a slow stream costs only
 * itself and memory stays bounded.
 */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct stream {
  uint32_t id;
  int fd;
  uint32_t unacked;     /* bytes sent to the server, not credited yet */
  struct obuf in;       /* the server's data, not written to the socket yet */
  uint32_t to_credit;   /* bytes written to the socket, not credited to the server yet */
  int sock_eof;         /* the socket said EOF (sent RELAY_EOF) */
  int server_eof;       /* the server said EOF */
  int write_shut;       /* shutdown(SHUT_WR) done */
  uint32_t armed;       /* epoll events registered */
  int connecting;       /* RELAY_CONNECT: the connect is in progress */
};

#define SERVER_IDS 0x80000000u

static int listen_fd = -1;
static struct stream **streams;
static size_t nstreams, live_streams;
static uint32_t next_stream_id = 1;
static char buf[RELAY_CHUNK];

int relay_listen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    fprintf(stderr, "kt-agent: cannot listen on 127.0.0.1:%d for the relay: %s\n", port, strerror(e));
    return 0;
  }
  listen_fd = fd;
  ep_add(fd, tag(0, K_RELAY_LISTEN), EPOLLIN);
  return port;
}

static size_t slot_of(const struct stream *s) {
  for (size_t i = 0; i < nstreams; i++) if (streams[i] == s) return i;
  return (size_t)-1;
}

static struct stream *find(uint32_t id) {
  for (size_t i = 0; i < nstreams; i++) if (streams[i] && streams[i]->id == id) return streams[i];
  return NULL;
}

static void close_stream(struct stream *s, int reason) {
  size_t slot = slot_of(s);
  if (reason != 0) {
    struct linger lg = { 1, 0 }; /* abort: the client sees a reset, not a clean end */
    setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  }
  close_fd(&s->fd);
  ob_free(&s->in);
  char r = (char)reason;
  send_frame(T_RELAY_CLOSED, s->id, &r, 1, NULL, 0);
  if (slot != (size_t)-1) streams[slot] = NULL;
  live_streams--;
  free(s);
}

/* Registers what the stream waits for: input while its window has room, output while data waits. */
static void arm(struct stream *s) {
  uint32_t want = 0;
  if (!s->sock_eof && s->unacked < RELAY_WINDOW) want |= EPOLLIN;
  if (ob_pending(&s->in) > 0) want |= EPOLLOUT;
  if (want != s->armed) {
    ep_mod(s->fd, tag(slot_of(s), K_STREAM), want);
    s->armed = want;
  }
}

static void credit_server(struct stream *s, int force) {
  if (s->to_credit == 0 || (!force && s->to_credit < RELAY_WINDOW / 4)) return;
  send_u32(T_RELAY_CREDIT, s->id, s->to_credit);
  s->to_credit = 0;
}

/* Both directions ended and everything was written: the stream is done. Returns 1 when closed. */
static int maybe_done(struct stream *s) {
  if (s->server_eof && ob_pending(&s->in) == 0 && !s->write_shut) {
    shutdown(s->fd, SHUT_WR);
    s->write_shut = 1;
  }
  if (s->sock_eof && s->write_shut) { close_stream(s, 0); return 1; }
  return 0;
}

static void flush(struct stream *s) {
  ssize_t n = ob_flush(&s->in, s->fd);
  if (n < 0) { close_stream(s, 1); return; }
  s->to_credit += (uint32_t)n;
  credit_server(s, ob_pending(&s->in) == 0);
  if (maybe_done(s)) return;
  arm(s);
}

void relay_accept(void) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (live_streams >= RELAY_MAX_STREAMS || next_stream_id >= SERVER_IDS) { close(fd); continue; }
    /* Each frame's bytes go out at once: with Nagle, a TLS handshake's small writes to the client
       wait for its delayed ACK (about 40 ms per round). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct stream *s = calloc(1, sizeof *s);
    if (!s) { close(fd); continue; }
    s->id = next_stream_id++;
    s->fd = fd;
    size_t slot = (size_t)-1;
    for (size_t i = 0; i < nstreams; i++) if (!streams[i]) { slot = i; break; }
    if (slot == (size_t)-1) {
      struct stream **grown = realloc(streams, (nstreams + 1) * sizeof *streams);
      if (!grown) { close(fd); free(s); continue; }
      streams = grown;
      slot = nstreams++;
    }
    streams[slot] = s;
    live_streams++;
    send_frame(T_RELAY_OPEN, s->id, NULL, 0, NULL, 0);
    s->armed = EPOLLIN;
    ep_add(fd, tag(slot, K_STREAM), EPOLLIN);
  }
}

/* RELAY_CONNECT: a stream the server opens to a loopback port inside the computer. */
static void relay_connect(uint32_t id, const char *pl, size_t len) {
  char reason = 2;
  if (find(id)) return; /* the server never reuses an id */
  if (len != 2 || !(id & SERVER_IDS)) { send_frame(T_RELAY_CLOSED, id, &reason, 1, NULL, 0); return; }
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(get16(pl)) };
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = live_streams >= RELAY_MAX_STREAMS ? -1 : socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct stream *s = fd < 0 ? NULL : calloc(1, sizeof *s);
  size_t slot = (size_t)-1;
  if (s) for (size_t i = 0; i < nstreams; i++) if (!streams[i]) { slot = i; break; }
  if (s && slot == (size_t)-1) {
    struct stream **grown = realloc(streams, (nstreams + 1) * sizeof *streams);
    if (grown) { streams = grown; slot = nstreams++; }
  }
  int r = slot == (size_t)-1 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
  if (slot == (size_t)-1 || (r < 0 && errno != EINPROGRESS)) {
    if (fd >= 0) close(fd);
    free(s);
    send_frame(T_RELAY_CLOSED, id, &reason, 1, NULL, 0);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s->id = id;
  s->fd = fd;
  s->connecting = 1;
  streams[slot] = s;
  live_streams++;
  s->armed = EPOLLOUT;
  ep_add(fd, tag(slot, K_STREAM), EPOLLOUT);
}

/* The connect of a RELAY_CONNECT stream ended: RELAY_OPEN, or RELAY_CLOSED 2. */
static void connected(struct stream *s) {
  int err = 0;
  socklen_t n = sizeof err;
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &n) < 0 || err != 0) { close_stream(s, 2); return; }
  s->connecting = 0;
  send_frame(T_RELAY_OPEN, s->id, NULL, 0, NULL, 0);
  arm(s);
}

void relay_event(size_t slot, uint32_t events) {
  if (slot >= nstreams || !streams[slot]) return;
  struct stream *s = streams[slot];
  if (s->connecting) { connected(s); return; }
  if (events & EPOLLOUT) {
    flush(s);
    if (slot >= nstreams || streams[slot] != s) return;
  }
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !s->sock_eof && s->unacked < RELAY_WINDOW) {
    size_t room = RELAY_WINDOW - s->unacked;
    ssize_t n;
    do n = read(s->fd, buf, room < sizeof buf ? room : sizeof buf); while (n < 0 && errno == EINTR);
    if (n > 0) {
      s->unacked += (uint32_t)n;
      send_frame(T_RELAY_DATA, s->id, buf, (size_t)n, NULL, 0);
    } else if (n == 0) {
      s->sock_eof = 1;
      send_frame(T_RELAY_EOF, s->id, NULL, 0, NULL, 0);
      if (maybe_done(s)) return;
    } else if (errno != EAGAIN) {
      close_stream(s, 1);
      return;
    }
  }
  arm(s);
}

void relay_frame(int type, uint32_t id, const char *pl, size_t len) {
  if (type == T_RELAY_CONNECT) { relay_connect(id, pl, len); return; }
  struct stream *s = find(id);
  if (!s) return; /* gone already (its RELAY_CLOSED is on the way) */
  switch (type) {
  case T_RELAY_DATA_IN:
    if (s->server_eof || s->connecting) break;
    ob_push(&s->in, pl, len);
    flush(s);
    break;
  case T_RELAY_EOF_IN:
    if (s->connecting) break;
    s->server_eof = 1;
    if (!maybe_done(s)) arm(s);
    break;
  case T_RELAY_CREDIT_IN:
    if (len >= 4 && !s->connecting) {
      uint32_t n = get32(pl);
      s->unacked = n > s->unacked ? 0 : s->unacked - n;
      arm(s);
    }
    break;
  case T_RELAY_RESET:
    close_stream(s, 1);
    break;
  }
}
