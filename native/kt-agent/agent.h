/*
 * kt-agent: shared declarations. See kt-agent.c for the protocol and the overall design.
 */
#ifndef KT_AGENT_H
#define KT_AGENT_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- frame types (u32 payloadLength LE | u8 type | u32 id LE | payload) ---- */
enum {
  /* server -> agent */
  T_SPAWN = 1, T_STDIN = 2, T_STDIN_EOF = 3, T_SIGNAL = 4, T_SPAWN_TTY = 5, T_RESIZE = 7,
  T_RELAY_DATA_IN = 8, T_RELAY_EOF_IN = 9, T_RELAY_CREDIT_IN = 10, T_RELAY_RESET = 11,
  T_SPAWN_DIRECT = 12, T_AUTH = 13, T_WATCH = 14, T_UNWATCH = 15,
  T_READ = 30, T_LIST = 31, T_NOTE = 32, T_SHUTDOWN = 33, T_STEP = 34,
  T_RELAY_CONNECT = 48, /* numbered apart: the other server -> agent types may grow */
  /* agent -> server */
  T_HELLO = 16, T_STARTED = 17, T_SPAWN_FAILED = 18, T_STDOUT = 19, T_STDERR = 20, T_EXIT = 21,
  T_CLOSED = 22, T_LOG = 23, T_UNWATCHED = 24,
  T_RELAY_OPEN = 25, T_RELAY_DATA = 26, T_RELAY_EOF = 27, T_RELAY_CREDIT = 28, T_RELAY_CLOSED = 29,
  T_WELCOME = 35, T_WATCHING = 36, T_READ_RESULT = 37, T_PROC = 38, T_LIST_END = 39, T_FAILED = 40,
  T_STEP_RESULT = 41
};

#define PROTOCOL_VERSION 3
#define HDR 9
/* Largest output payload the agent sends (the server rejects bigger ones), offset included. */
#define MAX_OUTPUT (1u << 20)
/* Largest text payload (SPAWN_FAILED, LOG, FAILED). */
#define MAX_TEXT 1024
/* Largest frame the agent accepts from an attached server. */
#define MAX_SERVER_FRAME (64u << 20)
/* What a server may attach to a process (its command, as it wants ps to show it), and a note. */
#define MAX_META 4096
#define MAX_NOTE 512
#define MAX_STEP_NAME 64
/* Relay: bytes in flight per stream and direction, and the largest DATA payload. */
#define RELAY_WINDOW (256u * 1024)
#define RELAY_CHUNK (64u * 1024)
#define RELAY_MAX_STREAMS 256
/* The attach handshake. */
#define KEY_BYTES 32
#define NONCE_BYTES 32
#define BOOT_BYTES 16

/* ---- epoll tags: slot << 8 | kind ---- */
enum { K_LISTEN = 1, K_SIGNAL, K_RELAY_LISTEN, K_OUT, K_ERR, K_IN, K_CTL, K_STREAM, K_CONN, K_BOOT };
uint64_t tag(size_t slot, int kind);
void ep_add(int fd, uint64_t t, uint32_t events);
void ep_mod(int fd, uint64_t t, uint32_t events);
void close_fd(int *fd);
void set_nonblock(int fd, int on);
extern int epfd;

void put16(char *p, uint16_t v);
void put32(char *p, uint32_t v);
void put64(char *p, uint64_t v);
uint16_t get16(const char *p);
uint32_t get32(const char *p);
uint64_t get64(const char *p);

/* ---- growable byte buffers ---- */
struct obuf { char *buf; size_t len, off, cap; };
void ob_push(struct obuf *b, const char *data, size_t len);
size_t ob_pending(const struct obuf *b);
/* Writes what it can; returns the bytes written, or -1 on an error other than EAGAIN. */
ssize_t ob_flush(struct obuf *b, int fd);
void ob_free(struct obuf *b);

uint64_t now_ms(void);      /* monotonic */
uint64_t wall_ms(void);     /* realtime: what ps shows */
void die(const char *what) __attribute__((noreturn));
/* Ends every process of the computer (bounded) and exits: asked by a server, or its owner is gone. */
void shutdown_and_exit(void) __attribute__((noreturn));

/* ---- SHA-256 and HMAC (sha256.c) ---- */
struct sha256 { uint32_t h[8]; uint64_t len; unsigned char buf[64]; size_t fill; };
void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, unsigned char out[32]);
void hmac_sha256(const unsigned char *key, size_t keylen, const struct iovec *parts, int nparts, unsigned char out[32]);
int equal_ct(const unsigned char *a, const unsigned char *b, size_t len);

/* ---- connections of attached servers (conn.c) ---- */
struct conn;
extern unsigned char agent_key[KEY_BYTES];
extern unsigned char boot_id[BOOT_BYTES];
extern int relay_port_open;
void conn_listen(int fd);
void conn_accept(void);
void conn_event(size_t slot, uint32_t events);
/* Drops connections that did not authenticate in time. */
void conn_timers(void);
uint64_t conn_next_deadline(void);
/* Queues a frame to one server (never blocks; a server that stops reading loses its connection). */
void conn_frame(struct conn *c, int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen);
void conn_text(struct conn *c, int type, uint32_t id, const char *text);
void conn_u32(struct conn *c, int type, uint32_t id, uint32_t v);
/* Whether the connection's output queue has room for more watched output. */
int conn_room(const struct conn *c);
/* The connection that serves relay streams now (the latest that asked to), or NULL. */
struct conn *conn_relay(void);
/* What every server is told once it is attached (a startup notice). */
void conn_notice(const char *text);
/* Diagnostics of the agent itself, to every attached server. */
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- retained output (store.c) ---- */
extern int store_dir;
extern uint64_t store_head, store_tail;
/* fd: -1 until the stream's first byte (opened: its file was asked for then). */
struct store { int fd, opened; uint64_t total, head_valid, floor; };
void store_init(struct store *s);
void store_close(struct store *s);
/* Returns -1 (errno set) when the stream's file could not be made at its first byte: what it writes
 * is then counted as fallen out, never kept. */
int store_append(struct store *s, const char *data, size_t len);
/* Reads up to `max` retained bytes from `from` (moved past a hole to `*start`); returns the count. */
size_t store_read(const struct store *s, uint64_t from, size_t max, char *buf, uint64_t *start);
/* The first retained offset at or after `from`. */
uint64_t store_first_after(const struct store *s, uint64_t from);

/* ---- processes (proc.c) ---- */
struct proc {
  uint32_t handle;
  int tty;
  uint16_t cols, rows;
  pid_t shepherd;     /* 0 once reaped */
  pid_t pid;          /* the guest process */
  int ctl;            /* socket to the shepherd */
  int out_fd, err_fd, in_fd; /* TTY: out_fd is the master, in_fd a duplicate of it */
  struct obuf in;
  int in_eof, in_armed, big_out, big_err;
  int exited, exit_kind, exit_value;
  int exit_final;     /* exited, and a teardown its exit started is done: EXIT may go out */
  uint64_t exit_total[2]; /* bytes of each stream when it exited */
  int closed;         /* its output reached EOF */
  int teardown;       /* a teardown runs: its count is awaited */
  uint64_t delivered; /* signals a server sent it (bit n-1 for signal n) */
  uint64_t deadline;
  uint32_t ended_at_exit, ended_after; /* processes its teardowns ended, before and after EXIT */
  uint64_t start_ms, end_ms;
  uint64_t finished;  /* order of finishing (eviction: oldest first) */
  struct store st[2];
  char *meta;
  uint16_t meta_len, note_len;
  char note[MAX_NOTE];
};
extern uint32_t max_finished;
void proc_init_handles(void);
void proc_spawn(struct conn *c, int type, uint32_t tag, char *pl, size_t len);
void proc_control(int type, uint32_t handle, char *pl, size_t len);
struct proc *proc_find(uint32_t handle);
/* Calls f for every process (in handle order). */
void proc_each(void (*f)(struct proc *, void *), void *arg);
void proc_event(size_t slot, int kind, uint32_t events);
void proc_reaped(pid_t pid, int status);
/* After a batch of reaps: kills strays if any were seen. */
void proc_after_reaps(void);
/* The earliest deadline (ms since boot) of a pending teardown, or 0. */
uint64_t proc_next_deadline(void);
void proc_timers(void);
/* Whether pid is the shepherd of a live process. */
int proc_is_shepherd(pid_t pid);
/* The record of a process as PROC and WATCHING carry it. */
size_t proc_record(const struct proc *p, char *out, size_t cap);

/* ---- watches: servers following processes (watch.c) ---- */
/* Starts following `p` from the given offsets for `c` (the output and EXIT/CLOSED frames). */
void watch_start(struct conn *c, struct proc *p, uint64_t out_from, uint64_t err_from);
void watch_request(struct conn *c, int type, uint32_t id, const char *pl, size_t len);
/* New output, an exit or the end of the output of `p`: its watchers are served. */
void watch_notify(struct proc *p);
/* The connection has room again: its watches are served. */
void watch_resume(struct conn *c);
void watch_drop_conn(struct conn *c);
int watch_watched(const struct proc *p);

/* ---- shepherds and process trees (shepherd.c) ---- */
/* Messages on the socket between the agent and a shepherd. */
enum { C_PID = 1, C_EXIT, C_ENDED, C_SIGNAL, C_TEARDOWN };
struct ctl_msg { int32_t type, value; };

struct shepherd_args {
  int ctl;             /* the shepherd's end of its socket with the agent */
  int ep;              /* write end of the exec-report pipe (CLOEXEC) */
  int stdio[3];        /* the guest's stdin, stdout, stderr (the same fd three times for a TTY) */
  int tty;             /* stdio is a terminal slave: make it the controlling terminal */
  char *cwd;
  char **argv;
  char **envp;
  char **direct;       /* SPAWN_DIRECT: exec'd first, without the shell (NULL: argv only) */
  char **direct_envp;  /* envp with PWD=cwd, for `direct` */
};
/* The reason of a failed fork: a full process limit says so. */
const char *fork_failure(int err, char *buf, size_t cap);
/* Runs in the forked shepherd: starts the guest and looks after its tree. Never returns. */
void shepherd_main(const struct shepherd_args *a) __attribute__((noreturn));

/*
 * SIGKILLs every live descendant of `root`, skipping the subtrees of the processes for which `skip`
 * says so. One pass; returns how many processes it newly killed (counted once each across passes
 * that share `seen`).
 */
struct killset { struct killed { pid_t pid; unsigned long long start; } *items; size_t len, cap; };
unsigned kill_tree_pass(pid_t root, int (*skip)(pid_t), struct killset *seen);
/* Signals the live descendants of `root` whose process group is `pgrp`. */
void signal_group_members(pid_t root, pid_t pgrp, int sig);
void killset_free(struct killset *k);
extern char *argv_area; extern size_t argv_area_len;

/* ---- hardening (harden.c) ---- */
extern int opt_drop_caps, opt_seccomp, opt_no_setid;
/*
 * In the agent at start, before any process: drops capabilities, sets no_new_privs, installs the
 * seccomp filter; children inherit all of it. Returns NULL or why it failed (the agent must not
 * run then); `notice` gets what to log once (e.g. a bounding set it could not clear).
 */
const char *harden_agent(char *notice, size_t cap);

/* ---- relay (relay.c) ---- */
/* Listens on 127.0.0.1:port; returns the port or 0 (logged) when it cannot. */
int relay_listen(int port);
void relay_accept(void);
void relay_event(size_t slot, uint32_t events);
void relay_frame(struct conn *c, int type, uint32_t id, const char *pl, size_t len);
/* The connection that carried these streams is gone: they are reset. */
void relay_drop_conn(struct conn *c);

/* ---- the connector (connector.c): `kt-agent --connect PATH` ---- */
int connector_main(const char *path) __attribute__((noreturn));

#endif
