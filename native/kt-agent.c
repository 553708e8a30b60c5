/*
 * kt-agent: the process supervisor of one kilntainers computer.
 *
 * It runs once per computer (inside bubblewrap on the host backend, inside the container on Docker,
 * or directly on the host in unsandboxed mode) and starts every process of that computer on request,
 * so that a spawn costs a fork+exec of this small program instead of a new sandbox or engine exec.
 *
 *   kt-agent [--no-parent] [--caps drop|keep] [--no-seccomp] [--no-setid-files] [--relay-port N]
 *
 * Protocol on stdin (server -> agent) and stdout (agent -> server): frames of
 *   u32 payloadLength (LE) | u8 type | u32 id (LE) | payload
 * Server -> agent (ids are the server's, never reused):
 *   SPAWN      1  u32 argc | u32 envc | cwd\0 | argv\0 * argc | "K=V"\0 * envc
 *   STDIN      2  bytes (to the pipe, or typed into the terminal)
 *   STDIN_EOF  3  - (pipes only; on a terminal the server sends Ctrl-D as data)
 *   SIGNAL     4  u32 signal: to the process group; SIGKILL tears the whole tree down
 *   SPAWN_TTY  5  u16 cols | u16 rows | (as SPAWN): on a pseudo-terminal of the agent's
 *   RELEASE    6  - forget the process (a tree still open is torn down); answered with RELEASED
 *   RESIZE     7  u16 cols | u16 rows (the kernel sends SIGWINCH to the terminal's foreground group)
 *   RELAY_DATA 8, RELAY_EOF 9, RELAY_CREDIT 10, RELAY_RESET 11: see relay.c
 *   SPAWN_DIRECT 12 u32 directc | (as SPAWN) | direct\0 * directc: a simple command that needs no
 *                 shell. The process execs `direct` itself (searched on the PATH of its env, with
 *                 PWD set as a shell would set it); only if that finds nothing it can exec (not
 *                 found, not executable, not a binary nor a #! script) does it exec `argv`, the
 *                 shell, which then reports or runs it exactly as it would have.
 *   RELAY_CONNECT 48 u16 port: the server opens a stream to 127.0.0.1:port inside the computer (a
 *                 preview URL); see relay.c
 * Agent -> server:
 *   READY      16 u32 protocol version | u32 relay port (0: no relay); sent once, first
 *   STARTED    17 u32 pid
 *   SPAWN_FAILED 18 reason text (<= 1024 bytes)
 *   STDOUT 19, STDERR 20: 1 .. 1 MiB of output (a terminal's output is STDOUT)
 *   EXIT       21 u8 kind (0 exited, 1 killed by signal) | u32 code or signal | u32 processes ended
 *                 by a teardown so far; sent after every byte the process wrote before it exited
 *   CLOSED     22 u32 processes ended by a teardown since EXIT; last: its output reached EOF
 *   LOG        23 text (diagnostics of the agent itself, id 0)
 *   RELEASED   24 - the answer to RELEASE: nothing more comes for that id
 *   RELAY_OPEN 25, RELAY_DATA 26, RELAY_EOF 27, RELAY_CREDIT 28, RELAY_CLOSED 29: see relay.c
 *
 * The channel is private: the agent is non-dumpable (its /proc/<pid>/fd, mem and environ need
 * CAP_SYS_PTRACE, which no guest holds, and it cannot be ptraced), every descriptor it holds is
 * CLOEXEC, and each guest process gets only its own pipes or terminal. Guest processes are started
 * by shepherds (shepherd.c) that keep their trees together, and hardened before exec (harden.c).
 */
#include "kt-agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int sigfd = -1;
static char *ibuf;
static size_t ilen, icap;

void shutdown_and_exit(void) {
  /* Everything below the agent goes: shepherds, guests and whatever they left behind (bounded). */
  struct killset seen = { 0 };
  uint64_t deadline = now_ms() + 2000;
  for (int pass = 0; pass < 1000; pass++) {
    kill_tree_pass(getpid(), NULL, &seen);
    while (waitpid(-1, NULL, WNOHANG | __WALL) > 0) {}
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) < 0 || now_ms() > deadline) break;
    usleep(pass < 10 ? 1000 : 10000);
  }
  _exit(0);
}

static void on_frame(int type, uint32_t id, char *pl, size_t len) {
  if ((type >= T_RELAY_DATA_IN && type <= T_RELAY_RESET) || type == T_RELAY_CONNECT) relay_frame(type, id, pl, len);
  else proc_frame(type, id, pl, len);
}

static void on_server(void) {
  for (;;) {
    if (icap - ilen < 256 * 1024) {
      size_t cap = icap ? icap * 2 : 512 * 1024;
      char *grown = realloc(ibuf, cap);
      if (!grown) die("realloc");
      ibuf = grown;
      icap = cap;
    }
    size_t asked = icap - ilen;
    ssize_t n = read(0, ibuf + ilen, asked);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) shutdown_and_exit(); /* the server is gone, or closed the computer */
    ilen += (size_t)n;
    size_t off = 0;
    while (ilen - off >= HDR) {
      uint32_t plen = get32(ibuf + off);
      if (plen > MAX_SERVER_FRAME) { fprintf(stderr, "kt-agent: a frame of %u bytes from the server\n", plen); shutdown_and_exit(); }
      if (ilen - off < HDR + (size_t)plen) break;
      on_frame((unsigned char)ibuf[off + 4], get32(ibuf + off + 5), ibuf + off + HDR, plen);
      off += HDR + plen;
    }
    memmove(ibuf, ibuf + off, ilen - off);
    ilen -= off;
    if (icap > (8u << 20) && ilen < (256u << 10)) {
      char *shrunk = realloc(ibuf, 512 * 1024);
      if (shrunk) { ibuf = shrunk; icap = 512 * 1024; }
    }
    if ((size_t)n < asked) break; /* a short read: nothing more waits */
  }
}

static void on_signals(void) {
  struct signalfd_siginfo si;
  while (read(sigfd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo != SIGCHLD) shutdown_and_exit();
  }
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG | __WALL)) > 0) proc_reaped(pid, status);
  proc_after_reaps();
}

static void usage(void) {
  fprintf(stderr, "usage: kt-agent [--no-parent] [--caps drop|keep] [--no-seccomp] [--no-setid-files] [--relay-port N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  /* First: from now on guests cannot open /proc/<agent>/fd, read its memory or ptrace it. */
  prctl(PR_SET_DUMPABLE, 0);
  int orphan_ok = 0, relay_port = 0;
  for (int i = 1; i < argc; i++) {
    /* Started through a container engine's exec, whose launcher exits at once: the lifetime is the
       server's connection (stdin), not the parent process. */
    if (strcmp(argv[i], "--no-parent") == 0) orphan_ok = 1;
    else if (strcmp(argv[i], "--caps") == 0 && i + 1 < argc) {
      const char *v = argv[++i];
      if (strcmp(v, "drop") == 0) opt_drop_caps = 1;
      else if (strcmp(v, "keep") == 0) opt_drop_caps = 0;
      else usage();
    } else if (strcmp(argv[i], "--no-seccomp") == 0) opt_seccomp = 0;
    else if (strcmp(argv[i], "--no-setid-files") == 0) opt_no_setid = 1;
    else if (strcmp(argv[i], "--relay-port") == 0 && i + 1 < argc) {
      relay_port = atoi(argv[++i]);
      if (relay_port <= 0 || relay_port > 65535) usage();
    } else usage();
  }
  if (argc > 0) { argv_area = argv[0]; argv_area_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]); }
  /* Whatever the server (or bwrap, or the engine) let us inherit must not reach the processes we start. */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    for (int fd = 3; fd < 4096; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (int fd = 0; fd < 3; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
  /* Die (and take every process with us) when the server dies, sandboxed or not. */
  if (!orphan_ok) prctl(PR_SET_PDEATHSIG, SIGTERM);
  /* Strays (a guest killed its shepherd) come to us, and are killed. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD); sigaddset(&set, SIGTERM); sigaddset(&set, SIGINT); sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) die("signalfd");
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) die("epoll_create1");
  set_nonblock(0, 1);
  set_nonblock(1, 0);
  int sndbuf = 4 << 20;
  setsockopt(1, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf); /* fails harmlessly on a pipe */
  ep_add(0, tag(0, K_SERVER), EPOLLIN);
  ep_add(sigfd, tag(0, K_SIGNAL), EPOLLIN);
  if (relay_port) relay_port = relay_listen(relay_port);
  if (chdir("/") < 0) { /* keep no directory busy */ }
  char notice[MAX_TEXT];
  const char *unhardened = harden_agent(notice, sizeof notice);
  if (unhardened) { fprintf(stderr, "kt-agent: %s\n", unhardened); return 1; } /* fail closed */
  char ready[8];
  put32(ready, PROTOCOL_VERSION);
  put32(ready + 4, (uint32_t)relay_port);
  send_frame(T_READY, 0, ready, sizeof ready, NULL, 0);
  if (notice[0]) send_text(T_LOG, 0, notice);

  struct epoll_event evs[64];
  for (;;) {
    uint64_t deadline = proc_next_deadline();
    int timeout = -1;
    if (deadline) {
      uint64_t now = now_ms();
      timeout = deadline <= now ? 0 : (int)(deadline - now);
    }
    int n = epoll_wait(epfd, evs, 64, timeout);
    if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
    for (int i = 0; i < n; i++) {
      uint64_t t = evs[i].data.u64;
      int kind = (int)(t & 0xff);
      size_t slot = (size_t)(t >> 8);
      switch (kind) {
      case K_SERVER: on_server(); break;
      case K_SIGNAL: on_signals(); break;
      case K_RELAY_LISTEN: relay_accept(); break;
      case K_STREAM: relay_event(slot, evs[i].events); break;
      default: proc_event(slot, kind, evs[i].events); break;
      }
    }
    if (deadline) proc_timers();
  }
}
