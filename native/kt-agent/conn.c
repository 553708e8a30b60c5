/*
 * kt-agent: the servers attached to the computer. Each is a connection accepted on the agent's
 * listening socket (a path only the server's side can reach: the host's state directory, or, in a
 * container, through an Engine exec of `kt-agent --connect`), and must prove first that it holds the
 * computer's key:
 *
 *   agent:  HELLO    u32 version | boot id (16) | agent nonce (32)
 *   server: AUTH     server nonce (32) | HMAC-SHA256(key, "kt-agent-v3 server" | boot | agent nonce | server nonce) | u32 flags
 *   agent:  WELCOME  HMAC-SHA256(key, "kt-agent-v3 agent" | boot | server nonce | agent nonce) | u32 relay port |
 *                    u64 head bytes | u64 tail bytes | u64 agent clock (ms since the epoch) | u32 flags
 *
 * Both nonces are fresh, so a recorded AUTH proves nothing on a later connection, and the server can
 * tell the real agent from anything else that answers. A connection that sends anything else first,
 * a wrong proof, or nothing within AUTH_MS is closed: only that attempt ends. AUTH flags: bit 0, the
 * server carries relay streams (the latest such connection gets new ones).
 *
 * An attached server's frames are never waited for: its output is queued per connection, watched
 * output is produced only while the queue has room (watch.c), and a server that stops reading while
 * its queue grows past QUEUE_LIMIT loses its connection. While its queue holds more than
 * PAUSE_INPUT, its requests are not read (each request's answer is bounded).
 */
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define AUTH_MS 10000
#define AUTH_PAYLOAD (NONCE_BYTES + 32 + 4)
#define MAX_PENDING 16
#define MAX_CONNS 64
#define ROOM (1u << 20)
#define PAUSE_INPUT (8u << 20)
#define QUEUE_LIMIT (256u << 20)

struct conn {
  int fd;
  size_t slot;
  int authed, dead;
  uint64_t deadline;
  unsigned char nonce[NONCE_BYTES];
  char *ibuf;
  size_t ilen, icap;
  struct obuf out;
  uint32_t armed;
  uint64_t relay;     /* nonzero: carries relay streams; the latest asked wins */
  int step;           /* holds the lifecycle lease */
  char step_name[MAX_STEP_NAME + 1];
};

unsigned char agent_key[KEY_BYTES];
unsigned char boot_id[BOOT_BYTES];
int relay_port_open;
static int listen_fd = -1;
static struct conn **conns;
static size_t nconns;
static uint64_t relay_seq;
/* Said to every server once it is attached (e.g. a bounding set the agent could not clear at start). */
static char notice[MAX_TEXT];

void conn_notice(const char *text) {
  snprintf(notice, sizeof notice, "%s", text);
}

void conn_listen(int fd) {
  listen_fd = fd;
  set_nonblock(fd, 1);
  ep_add(fd, tag(0, K_LISTEN), EPOLLIN);
}

static size_t count(int authed) {
  size_t n = 0;
  for (size_t i = 0; i < nconns; i++) if (conns[i] && !conns[i]->dead && conns[i]->authed == authed) n++;
  return n;
}

static void arm(struct conn *c) {
  if (c->dead) return;
  uint32_t want = 0;
  if (ob_pending(&c->out) <= PAUSE_INPUT) want |= EPOLLIN;
  if (ob_pending(&c->out) > 0) want |= EPOLLOUT;
  if (want != c->armed) {
    ep_mod(c->fd, tag(c->slot, K_CONN), want);
    c->armed = want;
  }
}

static void flush(struct conn *c) {
  if (c->dead) return;
  if (ob_flush(&c->out, c->fd) < 0) { c->dead = 1; return; }
  arm(c);
}

void conn_frame(struct conn *c, int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen) {
  if (c == NULL || c->dead) return;
  char h[HDR];
  put32(h, (uint32_t)(alen + blen));
  h[4] = (char)type;
  put32(h + 5, id);
  ob_push(&c->out, h, HDR);
  if (alen) ob_push(&c->out, a, alen);
  if (blen) ob_push(&c->out, b, blen);
  if (ob_pending(&c->out) > QUEUE_LIMIT) { c->dead = 1; return; } /* a server that reads nothing */
  flush(c);
}

void conn_text(struct conn *c, int type, uint32_t id, const char *text) {
  size_t len = strlen(text);
  conn_frame(c, type, id, text, len > MAX_TEXT ? MAX_TEXT : len, NULL, 0);
}

void conn_u32(struct conn *c, int type, uint32_t id, uint32_t v) {
  char b[4];
  put32(b, v);
  conn_frame(c, type, id, b, 4, NULL, 0);
}

int conn_room(const struct conn *c) { return !c->dead && ob_pending(&c->out) < ROOM; }

struct conn *conn_relay(void) {
  struct conn *best = NULL;
  for (size_t i = 0; i < nconns; i++) {
    struct conn *c = conns[i];
    if (c && c->authed && !c->dead && c->relay && (!best || c->relay > best->relay)) best = c;
  }
  return best;
}

void agent_log(const char *fmt, ...) {
  char text[MAX_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  for (size_t i = 0; i < nconns; i++)
    if (conns[i] && conns[i]->authed && conn_room(conns[i])) conn_text(conns[i], T_LOG, 0, text);
}

static void mac(const char *label, const unsigned char *first, const unsigned char *second, unsigned char out[32]) {
  struct iovec parts[4] = {
    { (void *)label, strlen(label) }, { boot_id, BOOT_BYTES }, { (void *)first, NONCE_BYTES }, { (void *)second, NONCE_BYTES }
  };
  hmac_sha256(agent_key, KEY_BYTES, parts, 4, out);
}

static void close_conn(struct conn *c) {
  watch_drop_conn(c);
  relay_drop_conn(c);
  close_fd(&c->fd);
  ob_free(&c->out);
  free(c->ibuf);
  conns[c->slot] = NULL;
  free(c);
}

void conn_accept(void) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (count(0) >= MAX_PENDING || count(1) + count(0) >= MAX_CONNS) { close(fd); continue; }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) { close(fd); continue; }
    c->fd = fd;
    c->deadline = now_ms() + AUTH_MS;
    if (getrandom(c->nonce, NONCE_BYTES, 0) != NONCE_BYTES) { close(fd); free(c); continue; }
    size_t slot = (size_t)-1;
    for (size_t i = 0; i < nconns; i++) if (!conns[i]) { slot = i; break; }
    if (slot == (size_t)-1) {
      struct conn **grown = realloc(conns, (nconns + 1) * sizeof *conns);
      if (!grown) { close(fd); free(c); continue; }
      conns = grown;
      slot = nconns++;
    }
    c->slot = slot;
    conns[slot] = c;
    c->armed = EPOLLIN;
    ep_add(fd, tag(slot, K_CONN), EPOLLIN);
    char hello[4 + BOOT_BYTES + NONCE_BYTES];
    put32(hello, PROTOCOL_VERSION);
    memcpy(hello + 4, boot_id, BOOT_BYTES);
    memcpy(hello + 4 + BOOT_BYTES, c->nonce, NONCE_BYTES);
    conn_frame(c, T_HELLO, 0, hello, sizeof hello, NULL, 0);
  }
}

static void authenticate(struct conn *c, const char *pl) {
  unsigned char expected[32];
  mac("kt-agent-v3 server", c->nonce, (const unsigned char *)pl, expected);
  if (!equal_ct(expected, (const unsigned char *)pl + NONCE_BYTES, 32)) {
    c->dead = 1; /* a forged or replayed attach: only this attempt ends */
    agent_log("refused an attach that did not prove the computer's key");
    return;
  }
  c->authed = 1;
  if (get32(pl + NONCE_BYTES + 32) & 1) c->relay = ++relay_seq;
  char welcome[32 + 4 + 8 + 8 + 8 + 4];
  mac("kt-agent-v3 agent", (const unsigned char *)pl, c->nonce, (unsigned char *)welcome);
  put32(welcome + 32, (uint32_t)relay_port_open);
  put64(welcome + 36, store_head);
  put64(welcome + 44, store_tail);
  put64(welcome + 52, wall_ms());
  put32(welcome + 60, 0);
  conn_frame(c, T_WELCOME, 0, welcome, sizeof welcome, NULL, 0);
  if (notice[0]) conn_text(c, T_LOG, 0, notice);
}

static void step(struct conn *c, uint32_t id, const char *pl, size_t len) {
  char answer[1 + MAX_STEP_NAME];
  if (len < 1) { answer[0] = 0; conn_frame(c, T_STEP_RESULT, id, answer, 1, NULL, 0); return; }
  if (pl[0] == 0) {
    c->step = 0;
    answer[0] = 1;
    conn_frame(c, T_STEP_RESULT, id, answer, 1, NULL, 0);
    return;
  }
  for (size_t i = 0; i < nconns; i++) {
    struct conn *o = conns[i];
    if (o && o != c && o->authed && !o->dead && o->step) {
      size_t n = strlen(o->step_name);
      answer[0] = 0;
      memcpy(answer + 1, o->step_name, n);
      conn_frame(c, T_STEP_RESULT, id, answer, 1 + n, NULL, 0);
      return;
    }
  }
  size_t n = len - 1 > MAX_STEP_NAME ? MAX_STEP_NAME : len - 1;
  memcpy(c->step_name, pl + 1, n);
  c->step_name[n] = 0;
  c->step = 1;
  answer[0] = 1;
  conn_frame(c, T_STEP_RESULT, id, answer, 1, NULL, 0);
}

static void on_frame(struct conn *c, int type, uint32_t id, char *pl, size_t len) {
  switch (type) {
  case T_SPAWN: case T_SPAWN_TTY: case T_SPAWN_DIRECT: proc_spawn(c, type, id, pl, len); break;
  case T_STDIN: case T_STDIN_EOF: case T_SIGNAL: case T_RESIZE: case T_NOTE: proc_control(type, id, pl, len); break;
  case T_WATCH: case T_UNWATCH: case T_READ: case T_LIST: watch_request(c, type, id, pl, len); break;
  case T_RELAY_DATA_IN: case T_RELAY_EOF_IN: case T_RELAY_CREDIT_IN: case T_RELAY_RESET: case T_RELAY_CONNECT:
    relay_frame(c, type, id, pl, len);
    break;
  case T_STEP: step(c, id, pl, len); break;
  case T_SHUTDOWN: shutdown_and_exit();
  default: c->dead = 1; break; /* AUTH again, or nothing this agent knows */
  }
}

static void on_input(struct conn *c) {
  for (;;) {
    if (c->dead || ob_pending(&c->out) > PAUSE_INPUT) return;
    if (c->icap - c->ilen < 64 * 1024) {
      size_t cap = c->icap ? c->icap * 2 : 128 * 1024;
      char *grown = realloc(c->ibuf, cap);
      if (!grown) die("realloc");
      c->ibuf = grown;
      c->icap = cap;
    }
    size_t asked = c->icap - c->ilen;
    ssize_t n = read(c->fd, c->ibuf + c->ilen, asked);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { c->dead = 1; return; }
    c->ilen += (size_t)n;
    size_t off = 0;
    while (!c->dead && c->ilen - off >= HDR) {
      uint32_t plen = get32(c->ibuf + off);
      int type = (unsigned char)c->ibuf[off + 4];
      /* Before authentication only AUTH, of its exact size, is read. */
      if (!c->authed && (type != T_AUTH || plen != AUTH_PAYLOAD)) { c->dead = 1; break; }
      if (plen > MAX_SERVER_FRAME) { c->dead = 1; break; }
      if (c->ilen - off < HDR + (size_t)plen) break;
      char *pl = c->ibuf + off + HDR;
      if (!c->authed) authenticate(c, pl);
      else on_frame(c, type, get32(c->ibuf + off + 5), pl, plen);
      off += HDR + plen;
    }
    if (c->dead) return;
    memmove(c->ibuf, c->ibuf + off, c->ilen - off);
    c->ilen -= off;
    if (c->icap > (8u << 20) && c->ilen < (64u << 10)) {
      char *shrunk = realloc(c->ibuf, 128 * 1024);
      if (shrunk) { c->ibuf = shrunk; c->icap = 128 * 1024; }
    }
    if ((size_t)n < asked) return; /* a short read: nothing more waits */
  }
}

void conn_event(size_t slot, uint32_t events) {
  if (slot >= nconns || !conns[slot]) return;
  struct conn *c = conns[slot];
  if (events & EPOLLOUT) {
    flush(c);
    if (conn_room(c)) watch_resume(c);
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_input(c);
  arm(c);
}

uint64_t conn_next_deadline(void) {
  uint64_t next = 0;
  for (size_t i = 0; i < nconns; i++)
    if (conns[i] && !conns[i]->authed && (next == 0 || conns[i]->deadline < next)) next = conns[i]->deadline;
  return next;
}

void conn_timers(void) {
  uint64_t now = now_ms();
  for (size_t i = 0; i < nconns; i++) {
    struct conn *c = conns[i];
    if (c && !c->authed && now >= c->deadline) c->dead = 1;
    if (c && c->dead) close_conn(c);
  }
}
