/*
 * kt-agent: the process supervisor of one kilntainers computer, and the home of its processes.
 *
 * It runs once per computer (inside bubblewrap on the host backend, inside the container on Docker,
 * or directly on the host in unsandboxed mode) and starts every process of that computer on request,
 * so that a spawn costs a fork+exec of this small program instead of a new sandbox or engine exec. It
 * keeps the computer's process table (handles, records, exits) and each stream's output on the
 * computer's disk (store.c), so servers come and go: any number attach over its listening socket
 * (conn.c), each proving the computer's key, and what one started another can read, wait for, write
 * to, resize and signal.
 *
 *   kt-agent (--listen PATH | --listen-fd N) (--store DIR | --store-fd N) [--bound | --daemonize]
 *            [--no-parent] [--retain BYTES] [--max-finished N] [--caps drop|keep] [--no-seccomp]
 *            [--no-setid-files] [--relay-port N]
 *   kt-agent --connect PATH          (connector.c)
 *
 * The computer's key (32 bytes, 64 hex digits and a newline) is read from stdin first. With
 * --listen the agent binds PATH itself (PATH.lock, held for its life, makes it the only agent of the
 * computer: another exits with status 3) and prints "ready" on stdout once it accepts connections;
 * with --listen-fd it serves a socket its launcher bound (kt-sandbox --agent-dir). The agent outlives
 * every server unless --bound: then stdin stays open, and its end (the owning server is gone) ends the
 * computer, as does the parent's death unless --no-parent. --daemonize: once ready, the agent goes on
 * in a child of a session of its own (stdio on /dev/null) and the started process exits, so that a
 * provider that ends what it started (a cloud's exec, killed with its process group) leaves the agent
 * running. The store directory holds the retained
 * output (unnamed files) and the next handle; a second agent on it also exits with status 3, and the
 * agent ends (with every process) once that directory is removed: the computer is gone.
 * --retain is the output kept per stream (a quarter from its start, the rest from its end; default
 * 32 MiB), --max-finished the finished records kept (default 100).
 *
 * Frames, both ways: u32 payloadLength (LE) | u8 type | u32 id (LE) | payload. The handshake is in
 * conn.c; then, server -> agent (ids: a request tag the server chooses, or a process handle):
 *   SPAWN      1  (tag) u32 metaLen | meta | u32 argc | u32 envc | cwd\0 | argv\0 * argc | "K=V"\0 * envc
 *   SPAWN_TTY  5  (tag) u32 metaLen | meta | u16 cols | u16 rows | (as SPAWN)
 *   SPAWN_DIRECT 12 (tag) u32 metaLen | meta | u32 directc | (as SPAWN) | direct\0 * directc: a simple
 *                 command that needs no shell. The process execs `direct` itself (searched on the PATH
 *                 of its env, with PWD set as a shell would set it); only if that finds nothing it can
 *                 exec (not found, not executable, not a binary nor a #! script) does it exec `argv`,
 *                 the shell, which then reports or runs it exactly as it would have.
 *   STDIN      2  (handle) bytes (to the pipe, or typed into the terminal)
 *   STDIN_EOF  3  (handle) - (pipes only; on a terminal the server sends Ctrl-D as data)
 *   SIGNAL     4  (handle) u32 signal: to the process group; SIGKILL tears the whole tree down
 *   RESIZE     7  (handle) u16 cols | u16 rows (the kernel sends SIGWINCH to the terminal's foreground group)
 *   NOTE       32 (handle) why it ends, as ps should say it (<= 512 bytes)
 *   WATCH 14, UNWATCH 15, READ 30, LIST 31: see watch.c
 *   STEP       34 (tag) u8 take (1) or give back (0) | name: the lifecycle lease, one server at a time
 *   SHUTDOWN   33 - every process ends and the agent exits (restart, delete, a temporary computer's end)
 *   RELAY_DATA 8, RELAY_EOF 9, RELAY_CREDIT 10, RELAY_RESET 11: see relay.c
 *   RELAY_CONNECT 48 (a server-chosen id, top bit set) u16 port: the server opens a stream to
 *                 127.0.0.1:port inside the computer (a preview URL); see relay.c
 * Agent -> server:
 *   HELLO 16, WELCOME 35: see conn.c
 *   STARTED    17 (tag) u32 handle | u32 pid | u64 start time; the spawning server then watches it
 *   SPAWN_FAILED 18 (tag) reason text (<= 1024 bytes)
 *   STDOUT 19, STDERR 20, EXIT 21, CLOSED 22, UNWATCHED 24, WATCHING 36, READ_RESULT 37, PROC 38,
 *   LIST_END 39: see watch.c
 *   FAILED     40 (tag) why a request failed (no such process)
 *   STEP_RESULT 41 (tag) u8 granted | the holder's step name when not
 *   LOG        23 text (diagnostics of the agent itself, id 0)
 *   RELAY_OPEN 25, RELAY_DATA 26, RELAY_EOF 27, RELAY_CREDIT 28, RELAY_CLOSED 29: see relay.c
 * A process record (PROC, WATCHING): u32 handle | u32 pid | u8 state (0 running, 1 exited, 2 exited
 * and its output ended) | u8 tty | u8 exit kind (0 code, 1 signal) | u8 0 | u32 code or signal |
 * u32 processes its teardowns ended | u64 start | u64 end (ms since the epoch) | u64 stdout total |
 * u64 stderr total | u16 cols | u16 rows | u16 metaLen | u16 noteLen | meta | note.
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
#include <poll.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int sigfd = -1;
static int bound, daemonize;
/* How often the agent checks that its computer still exists (its store's directory was not removed). */
#define STORE_CHECK_MS 5000

/* A computer whose directory was removed (deleted from outside, its state directory wiped) is gone:
 * its agent ends rather than run on with nothing left to it. */
static void check_store(void) {
  struct stat st;
  if (fstat(store_dir, &st) == 0 && st.st_nlink == 0) shutdown_and_exit();
}

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

static void on_signals(void) {
  struct signalfd_siginfo si;
  while (read(sigfd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) shutdown_and_exit();
    /* SIGHUP: a session the agent was started from ended; the computer lives on unless bound. */
    if (si.ssi_signo == SIGHUP && bound) shutdown_and_exit();
  }
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG | __WALL)) > 0) proc_reaped(pid, status);
  proc_after_reaps();
}

/* The owning server of a --bound agent holds its stdin: its end (a crash included) ends the computer. */
static void on_boot_input(void) {
  char b[256];
  for (;;) {
    ssize_t n = read(0, b, sizeof b);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    shutdown_and_exit();
  }
}

static void usage(void) {
  fprintf(stderr, "usage: kt-agent (--listen PATH | --listen-fd N) (--store DIR | --store-fd N) [--bound] [--no-parent] "
          "[--retain BYTES] [--max-finished N] [--caps drop|keep] [--no-seccomp] [--no-setid-files] [--relay-port N]\n"
          "       kt-agent --connect PATH\n");
  exit(2);
}

static void fail(const char *what) {
  fprintf(stderr, "kt-agent: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The key: 64 hex digits and a newline on stdin, within 10 seconds. */
static void read_key(void) {
  char line[2 * KEY_BYTES + 1];
  size_t got = 0;
  uint64_t deadline = now_ms() + 10000;
  while (got < sizeof line) {
    uint64_t now = now_ms();
    struct pollfd pf = { 0, POLLIN, 0 };
    if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) == 0) { fprintf(stderr, "kt-agent: no key on stdin\n"); exit(2); }
    ssize_t n = read(0, line + got, sizeof line - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) { fprintf(stderr, "kt-agent: no key on stdin\n"); exit(2); }
    got += (size_t)n;
  }
  for (int i = 0; i < KEY_BYTES; i++) {
    int hi = hexval(line[2 * i]), lo = hexval(line[2 * i + 1]);
    if (hi < 0 || lo < 0 || line[2 * KEY_BYTES] != '\n') { fprintf(stderr, "kt-agent: the key is not 64 hex digits\n"); exit(2); }
    agent_key[i] = (unsigned char)(hi << 4 | lo);
  }
}

/* Exits with status 3 when the computer already has an agent. */
static void already_running(void) {
  fprintf(stderr, "kt-agent: the computer's agent is already running\n");
  exit(3);
}

/* Binds PATH, as the computer's only agent (PATH.lock is held for the agent's life). */
static int listen_at(const char *path) {
  char lock[4096];
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (strlen(path) >= sizeof sa.sun_path || snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock) {
    fprintf(stderr, "kt-agent: socket path too long\n");
    exit(2);
  }
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lfd < 0) fail("cannot open the agent's lock");
  if (flock(lfd, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) already_running();
    fail("cannot lock the agent's lock");
  }
  strcpy(sa.sun_path, path);
  unlink(path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  mode_t old = umask(0077);
  if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 64) < 0) fail("cannot listen for servers");
  umask(old);
  return fd; /* lfd stays open (and locked) for the agent's life */
}

static void open_store(const char *dir, int fd) {
  if (dir) {
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) fail("cannot create the store directory");
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) fail("cannot open the store directory");
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) already_running();
    fail("cannot lock the store directory");
  }
  store_dir = fd;
}

/* Points a descriptor at /dev/null. */
static void to_null(int fd) {
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0 && null != fd) { dup2(null, fd); close(null); }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

static long number(const char *text, long min, long max) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < min || v > max) usage();
  return v;
}

int main(int argc, char **argv) {
  /* First: from now on guests cannot open /proc/<agent>/fd, read its memory or ptrace it. */
  prctl(PR_SET_DUMPABLE, 0);
  if (argc == 3 && strcmp(argv[1], "--connect") == 0) connector_main(argv[2]);
  int orphan_ok = 0, relay_port = 0, listen_fd = -1, store_fd = -1;
  const char *listen_path = NULL, *store_path = NULL;
  uint64_t retain = 32u << 20;
  for (int i = 1; i < argc; i++) {
    const char *next = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--no-parent") == 0) orphan_ok = 1;
    else if (strcmp(argv[i], "--bound") == 0) bound = 1;
    else if (strcmp(argv[i], "--daemonize") == 0) daemonize = 1;
    else if (strcmp(argv[i], "--caps") == 0 && next) {
      i++;
      if (strcmp(next, "drop") == 0) opt_drop_caps = 1;
      else if (strcmp(next, "keep") == 0) opt_drop_caps = 0;
      else usage();
    } else if (strcmp(argv[i], "--no-seccomp") == 0) opt_seccomp = 0;
    else if (strcmp(argv[i], "--no-setid-files") == 0) opt_no_setid = 1;
    else if (strcmp(argv[i], "--relay-port") == 0 && next) { relay_port = (int)number(next, 1, 65535); i++; }
    else if (strcmp(argv[i], "--listen") == 0 && next) { listen_path = next; i++; }
    else if (strcmp(argv[i], "--listen-fd") == 0 && next) { listen_fd = (int)number(next, 0, 1 << 20); i++; }
    else if (strcmp(argv[i], "--store") == 0 && next) { store_path = next; i++; }
    else if (strcmp(argv[i], "--store-fd") == 0 && next) { store_fd = (int)number(next, 0, 1 << 20); i++; }
    else if (strcmp(argv[i], "--retain") == 0 && next) { retain = (uint64_t)number(next, 0, 1L << 40); i++; }
    else if (strcmp(argv[i], "--max-finished") == 0 && next) { max_finished = (uint32_t)number(next, 0, 1 << 20); i++; }
    else usage();
  }
  if ((listen_path == NULL) == (listen_fd < 0) || (store_path == NULL) == (store_fd < 0) || (bound && daemonize)) usage();
  store_head = retain / 4;
  store_tail = retain - store_head;
  if (argc > 0) { argv_area = argv[0]; argv_area_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]); }
  /* Whatever the server (or bwrap, or the engine) let us inherit must not reach the processes we start. */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    for (int fd = 3; fd < 4096; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  for (int fd = 0; fd < 3; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
  read_key();
  if (getrandom(boot_id, BOOT_BYTES, 0) != BOOT_BYTES) fail("getrandom");
  if (listen_path) listen_fd = listen_at(listen_path);
  else {
    int accepting = 0;
    socklen_t l = sizeof accepting;
    if (getsockopt(listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &l) < 0 || !accepting) {
      fprintf(stderr, "kt-agent: descriptor %d is not a listening socket\n", listen_fd);
      exit(2);
    }
    /* Out of the stdio slots, which become /dev/null. */
    int moved = fcntl(listen_fd, F_DUPFD_CLOEXEC, 3);
    if (moved < 0) fail("fcntl");
    if (listen_fd > 2) close(listen_fd);
    listen_fd = moved;
  }
  open_store(store_path, store_fd);
  proc_init_handles();
  /* Die (and take every process with us) when the owning server's launcher dies: bound only. */
  if (bound && !orphan_ok) prctl(PR_SET_PDEATHSIG, SIGTERM);
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
  ep_add(sigfd, tag(0, K_SIGNAL), EPOLLIN);
  conn_listen(listen_fd);
  if (bound) {
    set_nonblock(0, 1);
    ep_add(0, tag(0, K_BOOT), EPOLLIN);
  } else {
    to_null(0);
  }
  if (relay_port) relay_port_open = relay_listen(relay_port);
  if (chdir("/") < 0) { /* keep no directory busy */ }
  char notice[MAX_TEXT];
  const char *unhardened = harden_agent(notice, sizeof notice);
  if (unhardened) { fprintf(stderr, "kt-agent: %s\n", unhardened); return 1; } /* fail closed */
  if (daemonize) {
    /* The started process says "ready" and exits; the agent goes on in a session of its own, holding
     * nothing of the exec that started it (whose end, or kill, must not reach it). */
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child > 0) {
      static const char ready[] = "ready\n";
      if (write(1, ready, sizeof ready - 1) < 0) { /* the launcher went away: the computer lives on */ }
      _exit(0);
    }
    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* epoll reports a signalfd only for signals of the process that added it (signalfd(2)): the
     * parent's registration never woke the daemon for its own SIGCHLD, so an exit went unseen until
     * something else woke it. Registered again, by the daemon. */
    epoll_ctl(epfd, EPOLL_CTL_DEL, sigfd, NULL);
    ep_add(sigfd, tag(0, K_SIGNAL), EPOLLIN);
    to_null(2);
  } else if (listen_path) {
    /* The launcher waits for this line (the socket accepts from now on). */
    static const char ready[] = "ready\n";
    if (write(1, ready, sizeof ready - 1) < 0) { /* the launcher went away: the computer lives on */ }
  }
  to_null(1);
  if (notice[0]) conn_notice(notice);

  struct epoll_event evs[64];
  uint64_t next_check = now_ms() + STORE_CHECK_MS;
  for (;;) {
    uint64_t deadline = proc_next_deadline(), auth = conn_next_deadline();
    if (auth && (!deadline || auth < deadline)) deadline = auth;
    if (!deadline || next_check < deadline) deadline = next_check;
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
      case K_LISTEN: conn_accept(); break;
      case K_CONN: conn_event(slot, evs[i].events); break;
      case K_BOOT: on_boot_input(); break;
      case K_SIGNAL: on_signals(); break;
      case K_RELAY_LISTEN: relay_accept(); break;
      case K_STREAM: relay_event(slot, evs[i].events); break;
      default: proc_event(slot, kind, evs[i].events); break;
      }
    }
    proc_timers();
    conn_timers(); /* also closes the connections that ended in this round */
    if (now_ms() >= next_check) {
      check_store();
      next_check = now_ms() + STORE_CHECK_MS;
    }
  }
}
