/*
 * kt-agent: shared declarations. See kt-agent.c for the protocol and the overall design.
 */
#ifndef KT_AGENT_H
#define KT_AGENT_H

#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- frame types (u32 payloadLength LE | u8 type | u32 id LE | payload) ---- */
enum {
  /* server -> agent */
  T_SPAWN = 1, T_STDIN = 2, T_STDIN_EOF = 3, T_SIGNAL = 4, T_SPAWN_TTY = 5, T_RELEASE = 6, T_RESIZE = 7,
  T_RELAY_DATA_IN = 8, T_RELAY_EOF_IN = 9, T_RELAY_CREDIT_IN = 10, T_RELAY_RESET = 11,
  T_SPAWN_DIRECT = 12,
  T_RELAY_CONNECT = 48, /* numbered apart: the other server -> agent types may grow */
  /* agent -> server */
  T_READY = 16, T_STARTED = 17, T_SPAWN_FAILED = 18, T_STDOUT = 19, T_STDERR = 20, T_EXIT = 21,
  T_CLOSED = 22, T_LOG = 23, T_RELEASED = 24,
  T_RELAY_OPEN = 25, T_RELAY_DATA = 26, T_RELAY_EOF = 27, T_RELAY_CREDIT = 28, T_RELAY_CLOSED = 29
};

#define PROTOCOL_VERSION 2
#define HDR 9
/* Largest output payload the agent sends (the server rejects bigger ones). */
#define MAX_OUTPUT (1u << 20)
/* Largest text payload (SPAWN_FAILED, LOG). */
#define MAX_TEXT 1024
/* Largest frame the agent accepts from the server. */
#define MAX_SERVER_FRAME (64u << 20)
/* Relay: bytes in flight per stream and direction, and the largest DATA payload. */
#define RELAY_WINDOW (256u * 1024)
#define RELAY_CHUNK (64u * 1024)
#define RELAY_MAX_STREAMS 256

/* ---- epoll tags: slot << 8 | kind ---- */
enum { K_SERVER = 1, K_SIGNAL, K_RELAY_LISTEN, K_OUT, K_ERR, K_IN, K_CTL, K_STREAM };
uint64_t tag(size_t slot, int kind);
void ep_add(int fd, uint64_t t, uint32_t events);
void ep_mod(int fd, uint64_t t, uint32_t events);
void close_fd(int *fd);
void set_nonblock(int fd, int on);
extern int epfd;

/* ---- frames to the server (blocking writes: a slow server slows the computer down) ---- */
void put16(char *p, uint16_t v);
void put32(char *p, uint32_t v);
uint16_t get16(const char *p);
uint32_t get32(const char *p);
void send_frame(int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen);
void send_text(int type, uint32_t id, const char *text);
void send_u32(int type, uint32_t id, uint32_t v);
void write_all(const void *buf, size_t len);
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- growable byte buffers ---- */
struct obuf { char *buf; size_t len, off, cap; };
void ob_push(struct obuf *b, const char *data, size_t len);
size_t ob_pending(const struct obuf *b);
/* Writes what it can; returns the bytes written, or -1 on an error other than EAGAIN. */
ssize_t ob_flush(struct obuf *b, int fd);
void ob_free(struct obuf *b);

uint64_t now_ms(void);
void die(const char *what) __attribute__((noreturn));
/* Ends every process of the computer (bounded) and exits: the server is gone or asked for it. */
void shutdown_and_exit(void) __attribute__((noreturn));

/* ---- processes (proc.c) ---- */
void proc_frame(int type, uint32_t id, char *pl, size_t len);
void proc_event(size_t slot, int kind, uint32_t events);
void proc_reaped(pid_t pid, int status);
/* After a batch of reaps: kills strays if any were seen. */
void proc_after_reaps(void);
/* The earliest deadline (ms since boot) of a pending teardown, or 0. */
uint64_t proc_next_deadline(void);
void proc_timers(void);
/* Whether pid is the shepherd of a live process. */
int proc_is_shepherd(pid_t pid);

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
void relay_frame(int type, uint32_t id, const char *pl, size_t len);

#endif
