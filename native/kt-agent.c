/*
 * kt-agent: the process supervisor of one kilntainers computer.
 *
 * It runs once per computer (inside bubblewrap, or directly on the host in unsandboxed mode) and
 * starts every process of that computer on request, so that a spawn costs one fork+exec of this
 * small program instead of a new sandbox.
 *
 * Protocol on stdin (server -> agent) and stdout (agent -> server): frames of
 *   u32 payloadLength (LE) | u8 type | u32 processId (LE) | payload
 * Server -> agent:
 *   SPAWN      u32 argc | u32 envc | cwd\0 | argv\0 * argc | "K=V"\0 * envc
 *   SPAWN_TTY  nonce[32] | (same as SPAWN). The process starts when kt-exec connects to the
 *              agent socket with the same id and nonce and passes its terminal fd.
 *   STDIN      bytes             STDIN_EOF   -            SIGNAL  u32 signal number
 *   RELEASE    -  (forget the process: close its pipes, report nothing more about it; for a TTY
 *              process, tell kt-exec the exit status and close the host terminal)
 * Agent -> server:
 *   READY      - (sent once at start)
 *   STARTED    u32 pid           SPAWN_FAILED  reason text
 *   STDOUT     bytes             STDERR      bytes
 *   EXIT       u8 kind (0 exited, 1 killed by signal) | u32 value -- only after every byte the
 *              process had already written to its pipes was sent. TTY: followed by u64, the number
 *              of bytes relayed to the host terminal so far (the server reads that many first)
 *   CLOSED     - (no more output: both pipes / the terminal reached EOF). TTY: u64 total bytes
 *              relayed; the agent keeps the host terminal open until the server sends RELEASE
 *   LOG        text (diagnostics of the agent itself)
 *
 * TTY processes: the agent allocates a pseudo-terminal of its own (inside the sandbox, so that
 * `tty` resolves to a /dev/pts path there and other terminals of the host stay invisible) and
 * relays bytes between it and the host terminal that kt-exec passed in, which is put in raw mode.
 * kt-exec forwards window size changes over the socket and receives the exit status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/close_range.h>
#include <termios.h>
#include <unistd.h>

enum {
  T_SPAWN = 1, T_STDIN = 2, T_STDIN_EOF = 3, T_SIGNAL = 4, T_SPAWN_TTY = 5, T_RELEASE = 6,
  T_READY = 16, T_STARTED = 17, T_SPAWN_FAILED = 18, T_STDOUT = 19, T_STDERR = 20,
  T_EXIT = 21, T_CLOSED = 22, T_LOG = 23
};
enum { K_SERVER = 1, K_SIGNAL, K_LISTEN, K_OUT, K_ERR, K_IN, K_MASTER, K_HOST, K_CONN };

#define HDR 9
#define READ_CHUNK (256 * 1024)
#define NONCE_LEN 32
#define HELLO_MAGIC 0x6b746531u /* "kte1" */
#define MAX_OUT_PENDING (1 << 20)
/* Pipe capacity for heavy output (the default 64 KiB makes for small reads and many wakeups).
 * Raised only once a pipe fills up: big pipes count against the user's pipe-user-pages-soft. */
#define BIG_PIPE (1 << 20)
#define HEAVY (32 * 1024)

struct obuf { char *buf; size_t len, off, cap; };

struct proc {
  uint32_t id;
  pid_t pid;          /* 0 until started */
  int reaped, released, exit_kind, exit_value;
  int out_fd, err_fd, in_fd;
  struct obuf in;     /* pending stdin (pipes) or pending input to the terminal (tty) */
  int in_eof;         /* close stdin once `in` is flushed */
  int in_armed;       /* EPOLLOUT registered on the stdin / master fd */
  int big_out, big_err; /* stdout / stderr pipe raised to BIG_PIPE */
  /* tty */
  int tty, master_fd, host_fd, conn_fd, host_armed, master_paused, closed_sent;
  uint64_t relayed;   /* bytes read from the inner terminal, all bound for the host terminal */
  struct obuf host;   /* pending output to the host terminal */
  char nonce[NONCE_LEN];
  char *spawn_req; size_t spawn_len; /* a SPAWN_TTY waiting for kt-exec */
};

static struct proc **procs;
static size_t nprocs;

static int epfd, sigfd, listen_fd = -1;
static char rbuf[READ_CHUNK];

static void die(const char *what) {
  fprintf(stderr, "kt-agent: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void put32(char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static uint32_t get32(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return u[0] | (u[1] << 8) | (u[2] << 16) | ((uint32_t)u[3] << 24);
}

static void kill_all_and_exit(void) {
  for (size_t k = 0; k < nprocs; k++) if (procs[k] && procs[k]->pid > 0) kill(-procs[k]->pid, SIGKILL);
  _exit(0);
}

/* Frames to the server are written with blocking writes: the server always reads, and a slow
 * server slowing every child down is the backpressure we want. */
static void send_frame(int type, uint32_t id, const void *a, size_t alen, const void *b, size_t blen) {
  char h[HDR];
  put32(h, (uint32_t)(alen + blen));
  h[4] = (char)type;
  put32(h + 5, id);
  struct iovec iov[3] = { { h, HDR }, { (void *)a, alen }, { (void *)b, blen } };
  int n = 3, i = 0;
  while (i < n) {
    ssize_t w = writev(1, iov + i, n - i);
    if (w < 0) {
      if (errno == EINTR) continue;
      kill_all_and_exit(); /* the server is gone */
    }
    while (i < n && (size_t)w >= iov[i].iov_len) { w -= iov[i].iov_len; i++; }
    if (i < n) { iov[i].iov_base = (char *)iov[i].iov_base + w; iov[i].iov_len -= w; }
  }
}

static void send_text(int type, uint32_t id, const char *text) { send_frame(type, id, text, strlen(text), NULL, 0); }

static void ob_push(struct obuf *b, const char *data, size_t len) {
  if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
  if (b->len + len > b->cap) {
    if (b->off > 0) { memmove(b->buf, b->buf + b->off, b->len - b->off); b->len -= b->off; b->off = 0; }
    if (b->len + len > b->cap) {
      size_t cap = b->cap ? b->cap : 4096;
      while (cap < b->len + len) cap *= 2;
      char *nb = realloc(b->buf, cap);
      if (!nb) die("realloc");
      b->buf = nb; b->cap = cap;
    }
  }
  memcpy(b->buf + b->len, data, len);
  b->len += len;
}
static size_t ob_pending(const struct obuf *b) { return b->len - b->off; }
/* Returns -1 on a write error other than EAGAIN. */
static int ob_flush(struct obuf *b, int fd) {
  while (ob_pending(b) > 0) {
    ssize_t w = write(fd, b->buf + b->off, ob_pending(b));
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return 0;
      return -1;
    }
    b->off += w;
  }
  b->off = b->len = 0;
  return 0;
}
static void ob_free(struct obuf *b) { free(b->buf); b->buf = NULL; b->len = b->off = b->cap = 0; }

static uint64_t tag(size_t slot, int kind) { return ((uint64_t)slot << 8) | kind; }
static void ep_add(int fd, uint64_t t, uint32_t events) {
  struct epoll_event ev = { .events = events, .data.u64 = t };
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl add");
}
static void ep_mod(int fd, uint64_t t, uint32_t events) {
  struct epoll_event ev = { .events = events, .data.u64 = t };
  epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev);
}
static void close_fd(int *fd) {
  if (*fd >= 0) { epoll_ctl(epfd, EPOLL_CTL_DEL, *fd, NULL); close(*fd); *fd = -1; }
}
static void set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

static size_t slot_of(struct proc *p) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] == p) return i;
  return (size_t)-1;
}
static struct proc *find(uint32_t id) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->id == id) return procs[i];
  return NULL;
}
static struct proc *new_proc(uint32_t id) {
  struct proc *p = calloc(1, sizeof *p);
  if (!p) die("calloc");
  p->id = id;
  p->out_fd = p->err_fd = p->in_fd = p->master_fd = p->host_fd = p->conn_fd = -1;
  for (size_t i = 0; i < nprocs; i++) if (!procs[i]) { procs[i] = p; return p; }
  struct proc **np = realloc(procs, (nprocs + 1) * sizeof *procs);
  if (!np) die("realloc");
  procs = np;
  procs[nprocs++] = p;
  return p;
}

static int proc_open(const struct proc *p) {
  return p->out_fd >= 0 || p->err_fd >= 0 || p->master_fd >= 0 || p->host_fd >= 0;
}

static void free_proc(struct proc *p) {
  size_t s = slot_of(p);
  close_fd(&p->out_fd); close_fd(&p->err_fd); close_fd(&p->in_fd);
  close_fd(&p->master_fd); close_fd(&p->host_fd); close_fd(&p->conn_fd);
  ob_free(&p->in); ob_free(&p->host);
  free(p->spawn_req);
  if (s != (size_t)-1) procs[s] = NULL;
  free(p);
}

/* A process is forgotten once it was reaped and its output ended (or the server released it). */
static void maybe_done(struct proc *p) {
  if (p->pid == 0 && !p->released) return;
  if (p->tty && !p->released) return; /* a TTY process is freed by RELEASE (see on_frame) */
  if (proc_open(p) && !p->released) return;
  if (!p->reaped && p->pid > 0) return; /* wait for the reap so its pid cannot be signalled after reuse */
  if (!p->released) send_frame(T_CLOSED, p->id, NULL, 0, NULL, 0);
  free_proc(p);
}

/* ---------- spawning ---------- */

struct spawn_args { char *cwd; char **argv; char **envp; };

static int parse_spawn(char *pl, size_t len, struct spawn_args *a) {
  if (len < 8) return -1;
  uint32_t argc = get32(pl), envc = get32(pl + 4);
  if (argc == 0 || argc > 1u << 20 || envc > 1u << 20) return -1;
  a->argv = calloc(argc + 1, sizeof(char *));
  a->envp = calloc(envc + 1, sizeof(char *));
  if (!a->argv || !a->envp) die("calloc");
  char *cur = pl + 8, *end = pl + len;
  char **slots[3] = { &a->cwd, a->argv, a->envp };
  uint32_t counts[3] = { 1, argc, envc };
  for (int k = 0; k < 3; k++) {
    for (uint32_t i = 0; i < counts[k]; i++) {
      char *z = memchr(cur, 0, end - cur);
      if (!z) return -1;
      slots[k][i] = cur;
      cur = z + 1;
    }
  }
  return 0;
}

static void child_common(const struct spawn_args *a, int errw) {
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < 65; s++) signal(s, SIG_DFL);
  /* If the agent is SIGKILLed (no chance to kill its groups) its direct children still go. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (chdir(a->cwd) < 0) {
    int e = errno;
    char msg[512];
    snprintf(msg, sizeof msg, "cannot change directory to %s: %s", a->cwd, strerror(e));
    (void)!write(errw, msg, strlen(msg));
    _exit(127);
  }
  extern char **environ;
  environ = a->envp; /* execvp searches the PATH of the new environment */
  execvp(a->argv[0], a->argv);
  const char *m = strerror(errno);
  (void)!write(errw, m, strlen(m));
  _exit(127);
}

/* Waits for exec (the CLOEXEC pipe closes) or for the reason it failed. Returns 0 on success. */
static int await_exec(int errr, char *reason, size_t cap) {
  ssize_t n;
  do n = read(errr, reason, cap - 1); while (n < 0 && errno == EINTR);
  close(errr);
  if (n <= 0) return 0;
  reason[n] = 0;
  return -1;
}

static void spawn_failed(struct proc *p, const char *reason) {
  send_text(T_SPAWN_FAILED, p->id, reason);
  free_proc(p);
}

static void do_spawn(uint32_t id, char *pl, size_t len) {
  struct spawn_args a = { 0 };
  char reason[600];
  if (find(id)) { send_text(T_SPAWN_FAILED, id, "duplicate process id"); return; }
  struct proc *p = new_proc(id);
  if (parse_spawn(pl, len, &a) < 0) { spawn_failed(p, "malformed spawn request"); goto out; }
  int in[2], out[2], err[2], ep[2];
  if (pipe2(in, O_CLOEXEC) < 0) { spawn_failed(p, strerror(errno)); goto out; }
  if (pipe2(out, O_CLOEXEC) < 0) { int e = errno; close(in[0]); close(in[1]); spawn_failed(p, strerror(e)); goto out; }
  if (pipe2(err, O_CLOEXEC) < 0) { int e = errno; close(in[0]); close(in[1]); close(out[0]); close(out[1]); spawn_failed(p, strerror(e)); goto out; }
  if (pipe2(ep, O_CLOEXEC) < 0) { int e = errno; close(in[0]); close(in[1]); close(out[0]); close(out[1]); close(err[0]); close(err[1]); spawn_failed(p, strerror(e)); goto out; }
  pid_t pid = fork();
  if (pid == 0) {
    close(ep[0]);
    setsid();
    dup2(in[0], 0); dup2(out[1], 1); dup2(err[1], 2);
    child_common(&a, ep[1]);
  }
  close(ep[1]); close(in[0]); close(out[1]); close(err[1]);
  if (pid < 0) {
    int e = errno;
    close(ep[0]); close(in[1]); close(out[0]); close(err[0]);
    spawn_failed(p, strerror(e));
    goto out;
  }
  p->pid = pid;
  if (await_exec(ep[0], reason, sizeof reason) < 0) {
    close(in[1]); close(out[0]); close(err[0]);
    p->pid = 0;
    /* the child exits by itself; SIGCHLD reaps it as an unknown pid */
    spawn_failed(p, reason);
    goto out;
  }
  p->in_fd = in[1]; p->out_fd = out[0]; p->err_fd = err[0];
  set_nonblock(p->in_fd, 1); set_nonblock(p->out_fd, 1); set_nonblock(p->err_fd, 1);
  size_t s = slot_of(p);
  ep_add(p->out_fd, tag(s, K_OUT), EPOLLIN);
  ep_add(p->err_fd, tag(s, K_ERR), EPOLLIN);
  char pb[4];
  put32(pb, (uint32_t)pid);
  send_frame(T_STARTED, id, pb, 4, NULL, 0);
out:
  free(a.argv); free(a.envp);
}

/*
 * kt-exec may connect before the SPAWN_TTY frame it belongs to has been read from the server
 * (two descriptors, no order between them): such a connection waits here until the frame comes.
 */
#define EARLY_MAX 16
static struct early { int conn, fd; uint32_t id; char nonce[NONCE_LEN]; unsigned cols, rows; } early[EARLY_MAX];
static int early_count;
static void start_tty(struct proc *p, int host_fd, int conn, unsigned cols, unsigned rows);

static void do_spawn_tty_request(uint32_t id, char *pl, size_t len) {
  if (find(id)) { send_text(T_SPAWN_FAILED, id, "duplicate process id"); return; }
  if (len < NONCE_LEN + 8) { send_text(T_SPAWN_FAILED, id, "malformed spawn request"); return; }
  struct proc *p = new_proc(id);
  p->tty = 1;
  memcpy(p->nonce, pl, NONCE_LEN);
  p->spawn_len = len - NONCE_LEN;
  p->spawn_req = malloc(p->spawn_len);
  if (!p->spawn_req) die("malloc");
  memcpy(p->spawn_req, pl + NONCE_LEN, p->spawn_len);
  for (int i = 0; i < early_count; i++) {
    if (early[i].id != id || memcmp(early[i].nonce, p->nonce, NONCE_LEN) != 0) continue;
    struct early e = early[i];
    early[i] = early[--early_count];
    start_tty(p, e.fd, e.conn, e.cols, e.rows);
    return;
  }
}

static void start_tty(struct proc *p, int host_fd, int conn, unsigned cols, unsigned rows) {
  struct spawn_args a = { 0 };
  char reason[600];
  int master = -1, slave = -1, ep[2] = { -1, -1 };
  const char *fail = NULL;
  char fbuf[300];
  p->host_fd = host_fd;
  p->conn_fd = conn;
  if (parse_spawn(p->spawn_req, p->spawn_len, &a) < 0) { fail = "malformed spawn request"; goto failed; }
  struct termios host_tio;
  int have_tio = tcgetattr(host_fd, &host_tio) == 0;
  master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0) {
    snprintf(fbuf, sizeof fbuf, "cannot allocate a pseudo-terminal: %s", strerror(errno));
    fail = fbuf; goto failed;
  }
  char *name = ptsname(master);
  slave = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
  if (slave < 0) { snprintf(fbuf, sizeof fbuf, "cannot open the pseudo-terminal: %s", strerror(errno)); fail = fbuf; goto failed; }
  if (have_tio) {
    /* The inner terminal gets the line discipline settings; the host one becomes a raw pipe. */
    tcsetattr(slave, TCSANOW, &host_tio);
    struct termios raw = host_tio;
    cfmakeraw(&raw);
    tcsetattr(host_fd, TCSANOW, &raw);
  }
  struct winsize ws = { .ws_row = rows, .ws_col = cols };
  ioctl(master, TIOCSWINSZ, &ws);
  if (pipe2(ep, O_CLOEXEC) < 0) { fail = strerror(errno); goto failed; }
  pid_t pid = fork();
  if (pid == 0) {
    close(ep[0]);
    setsid();
    ioctl(slave, TIOCSCTTY, 0);
    dup2(slave, 0); dup2(slave, 1); dup2(slave, 2);
    child_common(&a, ep[1]);
  }
  close(ep[1]); ep[1] = -1;
  close(slave); slave = -1;
  if (pid < 0) { fail = strerror(errno); goto failed; }
  p->pid = pid;
  if (await_exec(ep[0], reason, sizeof reason) < 0) {
    ep[0] = -1;
    p->pid = 0;
    fail = reason;
    goto failed;
  }
  free(p->spawn_req); p->spawn_req = NULL;
  p->master_fd = master;
  set_nonblock(master, 1); set_nonblock(host_fd, 1); set_nonblock(conn, 1);
  size_t s = slot_of(p);
  ep_add(master, tag(s, K_MASTER), EPOLLIN);
  ep_add(host_fd, tag(s, K_HOST), EPOLLIN);
  ep_add(conn, tag(s, K_CONN), EPOLLIN);
  char pb[4];
  put32(pb, (uint32_t)pid);
  send_frame(T_STARTED, p->id, pb, 4, NULL, 0);
  free(a.argv); free(a.envp);
  return;
failed:
  if (ep[0] >= 0) close(ep[0]);
  if (ep[1] >= 0) close(ep[1]);
  if (slave >= 0) close(slave);
  if (master >= 0) close(master);
  /* kt-exec prints nothing itself; the server reports the failure. Exit status 127 like a shell. */
  {
    char st[8] = { 0 };
    put32(st + 4, 127);
    (void)!write(conn, st, sizeof st);
  }
  p->host_fd = -1; close(host_fd);
  p->conn_fd = -1; close(conn);
  free(a.argv); free(a.envp);
  spawn_failed(p, fail);
}

static void accept_conn(void) {
  int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) return;
  /* A client inside the sandbox could connect and stay silent; never wait long for it. */
  struct timeval tv = { .tv_sec = 2 };
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char hello[4 + 4 + NONCE_LEN + 4];
  char cbuf[CMSG_SPACE(sizeof(int) * 3)];
  struct iovec iov = { hello, sizeof hello };
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  ssize_t n;
  do n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL); while (n < 0 && errno == EINTR);
  int fd = -1;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int *fds = (int *)CMSG_DATA(cm);
      for (int i = 0; i < nfd; i++) { if (fd < 0) fd = fds[i]; else close(fds[i]); }
    }
  }
  struct proc *p = NULL;
  int valid = n == (ssize_t)sizeof hello && get32(hello) == HELLO_MAGIC && fd >= 0 && isatty(fd);
  uint32_t id = valid ? get32(hello + 4) : 0;
  unsigned cols = (unsigned char)hello[40] | ((unsigned char)hello[41] << 8);
  unsigned rows = (unsigned char)hello[42] | ((unsigned char)hello[43] << 8);
  if (valid) {
    p = find(id);
    if (p && (!p->tty || !p->spawn_req || memcmp(p->nonce, hello + 8, NONCE_LEN) != 0)) p = NULL;
  }
  if (valid && !p && !find(id) && early_count < EARLY_MAX) {
    /* Its SPAWN_TTY frame has not been read yet: keep the connection until it is. */
    struct early *e = &early[early_count++];
    e->conn = c; e->fd = fd; e->id = id; e->cols = cols ? cols : 80; e->rows = rows ? rows : 24;
    memcpy(e->nonce, hello + 8, NONCE_LEN);
    return;
  }
  if (!p) {
    if (fd >= 0) close(fd);
    close(c);
    return;
  }
  start_tty(p, fd, c, cols ? cols : 80, rows ? rows : 24);
}

/* ---------- output, exit, stdin ---------- */

static void put64(char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* Tells kt-exec how the process ended, so that it exits the same way. */
static void send_status(struct proc *p) {
  if (!p->tty || !p->reaped || p->conn_fd < 0) return;
  char st[8];
  put32(st, (uint32_t)p->exit_kind);
  put32(st + 4, (uint32_t)p->exit_value);
  (void)!write(p->conn_fd, st, sizeof st);
  close_fd(&p->conn_fd);
}

static void update_host_events(struct proc *p) {
  size_t s = slot_of(p);
  int want_out = ob_pending(&p->host) > 0;
  if (p->host_fd >= 0 && want_out != p->host_armed) {
    ep_mod(p->host_fd, tag(s, K_HOST), EPOLLIN | (want_out ? EPOLLOUT : 0));
    p->host_armed = want_out;
  }
  int pause = ob_pending(&p->host) > MAX_OUT_PENDING;
  uint32_t mev = (pause ? 0 : EPOLLIN) | (ob_pending(&p->in) > 0 ? EPOLLOUT : 0);
  if (p->master_fd >= 0) ep_mod(p->master_fd, tag(s, K_MASTER), mev);
  p->master_paused = pause;
}

/*
 * The inner terminal hung up (no process holds it any more) and everything was written to the host
 * terminal: report CLOSED with the byte count. The host terminal stays open until the server has
 * read that many bytes and sends RELEASE, because libuv reports EOF on a hung-up terminal as soon as
 * a read comes back short, dropping what is still buffered.
 */
static void finish_tty_output(struct proc *p) {
  if (p->closed_sent || !p->reaped || p->master_fd >= 0 || (p->host_fd >= 0 && ob_pending(&p->host) > 0)) return;
  p->closed_sent = 1;
  if (p->released) return;
  char n[8];
  put64(n, p->relayed);
  send_frame(T_CLOSED, p->id, n, 8, NULL, 0);
}

/* Reads one fd until EAGAIN (drain) or once (!drain). Returns 1 when it hit EOF. */
static int use_splice = 1;
static int big_channel;

static void write_all(const char *buf, size_t len) {
  while (len > 0) {
    ssize_t w = write(1, buf, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) kill_all_and_exit();
    buf += w;
    len -= w;
  }
}

/*
 * Forwards `len` bytes that are already waiting in a child's pipe as one frame, moving them with
 * splice (no copy through this process) where the kernel allows it, read+write otherwise.
 */
static void forward_waiting(struct proc *p, int fd, int type, size_t len) {
  char h[HDR];
  put32(h, (uint32_t)len);
  h[4] = (char)type;
  put32(h + 5, p->id);
  write_all(h, HDR);
  while (len > 0) {
    ssize_t n = -1;
    if (use_splice) {
      n = splice(fd, NULL, 1, NULL, len, SPLICE_F_MORE);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN) use_splice = 0;
    }
    if (n <= 0) {
      n = read(fd, rbuf, len < sizeof rbuf ? len : sizeof rbuf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) kill_all_and_exit(); /* cannot happen: the bytes were counted in the pipe */
      write_all(rbuf, n);
    }
    len -= n;
  }
}

static int pump(struct proc *p, int *fd, int type, int drain) {
  for (;;) {
    int waiting = 0;
    if (use_splice && !p->tty && !p->released && ioctl(*fd, FIONREAD, &waiting) == 0 && waiting >= HEAVY) {
      int *big = type == T_STDOUT ? &p->big_out : &p->big_err;
      if (!*big) { *big = 1; fcntl(*fd, F_SETPIPE_SZ, BIG_PIPE); }
      if (!big_channel) { big_channel = 1; fcntl(1, F_SETPIPE_SZ, BIG_PIPE); } /* fails harmlessly on a socket */
      forward_waiting(p, *fd, type, (size_t)waiting);
      if (!drain) return 0; /* level-triggered: come back after the other ready fds */
      continue;
    }
    ssize_t n = read(*fd, rbuf, sizeof rbuf);
    if (n > 0) {
      if (p->tty) {
        p->relayed += n;
        ob_push(&p->host, rbuf, n);
        if (p->host_fd >= 0 && ob_flush(&p->host, p->host_fd) < 0) p->host.off = p->host.len = 0;
        if (p->host_fd < 0) p->host.off = p->host.len = 0;
        if (ob_pending(&p->host) > MAX_OUT_PENDING) { update_host_events(p); return 0; }
      } else if (!p->released) {
        send_frame(type, p->id, rbuf, n, NULL, 0);
      }
      if (!drain) return 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 0;
    close_fd(fd); /* EOF, or EIO on a terminal without any remaining holder */
    return 1;
  }
}

static void on_output(struct proc *p, int *fd, int type) {
  if (pump(p, fd, type, 0)) {
    if (p->tty) finish_tty_output(p);
    else maybe_done(p);
  } else if (p->tty) {
    update_host_events(p);
  }
}

static void on_host(struct proc *p, uint32_t events) {
  if (events & EPOLLOUT) {
    if (ob_flush(&p->host, p->host_fd) < 0) p->host.off = p->host.len = 0;
    update_host_events(p);
    if (p->master_fd < 0) { finish_tty_output(p); return; }
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    for (;;) {
      ssize_t n = read(p->host_fd, rbuf, sizeof rbuf);
      if (n > 0) {
        if (p->master_fd >= 0) { ob_push(&p->in, rbuf, n); ob_flush(&p->in, p->master_fd); }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      /* The server closed the terminal: hang up the inner one too, like a closed terminal window. */
      close_fd(&p->host_fd);
      ob_free(&p->host);
      close_fd(&p->master_fd);
      close_fd(&p->conn_fd);
      finish_tty_output(p);
      return;
    }
    update_host_events(p);
  }
}

static void on_conn(struct proc *p) {
  char msg[8];
  for (;;) {
    ssize_t n = recv(p->conn_fd, msg, sizeof msg, MSG_DONTWAIT);
    if (n == (ssize_t)sizeof msg && get32(msg) == HELLO_MAGIC + 1) {
      struct winsize ws = { .ws_col = (unsigned char)msg[4] | ((unsigned char)msg[5] << 8),
                            .ws_row = (unsigned char)msg[6] | ((unsigned char)msg[7] << 8) };
      if (p->master_fd >= 0) ioctl(p->master_fd, TIOCSWINSZ, &ws);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n < 0 || n == 0 || n != (ssize_t)sizeof msg) { close_fd(&p->conn_fd); return; }
  }
}

static void update_stdin_events(struct proc *p) {
  int want = ob_pending(&p->in) > 0;
  if (p->tty) { update_host_events(p); return; }
  if (p->in_fd < 0 || want == p->in_armed) return;
  size_t s = slot_of(p);
  if (want) {
    struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = tag(s, K_IN) };
    epoll_ctl(epfd, EPOLL_CTL_ADD, p->in_fd, &ev);
  } else {
    epoll_ctl(epfd, EPOLL_CTL_DEL, p->in_fd, NULL);
  }
  p->in_armed = want;
}

static void flush_stdin(struct proc *p) {
  if (p->tty) {
    if (p->master_fd >= 0 && ob_flush(&p->in, p->master_fd) < 0) ob_free(&p->in);
    update_host_events(p);
    return;
  }
  if (p->in_fd < 0) return;
  if (ob_flush(&p->in, p->in_fd) < 0) { ob_free(&p->in); close_fd(&p->in_fd); p->in_armed = 0; return; }
  if (ob_pending(&p->in) == 0 && p->in_eof) { close_fd(&p->in_fd); p->in_armed = 0; return; }
  update_stdin_events(p);
}

static void on_reaped(pid_t pid, int status) {
  struct proc *p = NULL;
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i] && procs[i]->pid == pid && !procs[i]->reaped) { p = procs[i]; break; }
  if (!p) return; /* a reparented orphan, or a child whose exec failed */
  p->reaped = 1;
  p->exit_kind = WIFSIGNALED(status) ? 1 : 0;
  p->exit_value = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
  if (!p->released) {
    /* Everything the process wrote before exiting is in its pipes now: send it before EXIT. */
    if (p->out_fd >= 0 && pump(p, &p->out_fd, T_STDOUT, 1)) {}
    if (p->err_fd >= 0 && pump(p, &p->err_fd, T_STDERR, 1)) {}
    if (p->master_fd >= 0 && !p->master_paused && pump(p, &p->master_fd, T_STDOUT, 1)) {}
    /* For a TTY: how many bytes the server must read from its terminal before this exit. */
    char ex[13];
    ex[0] = (char)p->exit_kind;
    put32(ex + 1, (uint32_t)p->exit_value);
    put64(ex + 5, p->relayed);
    send_frame(T_EXIT, p->id, ex, p->tty ? 13 : 5, NULL, 0);
  }
  if (p->tty) {
    if (p->master_fd < 0) finish_tty_output(p);
    else update_host_events(p);
    if (p->released) maybe_done(p);
    return;
  }
  maybe_done(p);
}

static void kill_all(int sig) {
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i] && procs[i]->pid > 0) kill(-procs[i]->pid, sig);
}

/* ---------- server frames ---------- */

static void on_frame(int type, uint32_t id, char *pl, size_t len) {
  struct proc *p;
  switch (type) {
  case T_SPAWN: do_spawn(id, pl, len); break;
  case T_SPAWN_TTY: do_spawn_tty_request(id, pl, len); break;
  case T_STDIN:
    p = find(id);
    if (p && !p->in_eof) { ob_push(&p->in, pl, len); flush_stdin(p); }
    break;
  case T_STDIN_EOF:
    p = find(id);
    if (p && !p->tty) { p->in_eof = 1; flush_stdin(p); }
    break;
  case T_SIGNAL:
    p = find(id);
    if (p && p->pid > 0 && len >= 4) {
      /* Once the leader was reaped its pid may be reused: never signal another process's group. */
      int reused = 0;
      for (size_t i = 0; p->reaped && i < nprocs; i++)
        if (procs[i] && procs[i] != p && procs[i]->pid == p->pid) reused = 1;
      if (!reused) kill(-p->pid, (int)get32(pl));
    }
    break;
  case T_RELEASE:
    p = find(id);
    if (p) {
      p->released = 1;
      if (p->spawn_req) { free_proc(p); break; }
      send_status(p);
      close_fd(&p->out_fd); close_fd(&p->err_fd); close_fd(&p->in_fd);
      close_fd(&p->master_fd); close_fd(&p->host_fd); close_fd(&p->conn_fd);
      maybe_done(p);
    }
    break;
  default: send_text(T_LOG, id, "unknown frame type"); break;
  }
}

static char *ibuf;
static size_t ilen, icap;

static void on_server(void) {
  for (;;) {
    if (icap - ilen < READ_CHUNK) {
      icap = icap ? icap * 2 : 2 * READ_CHUNK;
      ibuf = realloc(ibuf, icap);
      if (!ibuf) die("realloc");
    }
    ssize_t n = read(0, ibuf + ilen, icap - ilen);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) { kill_all(SIGKILL); _exit(0); } /* the server is gone */
    ilen += n;
    size_t off = 0;
    while (ilen - off >= HDR) {
      uint32_t plen = get32(ibuf + off);
      if (ilen - off < HDR + (size_t)plen) break;
      on_frame((unsigned char)ibuf[off + 4], get32(ibuf + off + 5), ibuf + off + HDR, plen);
      off += HDR + plen;
    }
    memmove(ibuf, ibuf + off, ilen - off);
    ilen -= off;
    if (icap > 8 * READ_CHUNK && ilen < READ_CHUNK) { icap = 2 * READ_CHUNK; ibuf = realloc(ibuf, icap); }
    if ((size_t)n < READ_CHUNK) break;
  }
}

/* Binds long socket paths by changing into their directory first (sun_path holds 108 bytes). */
static int listen_at(const char *path) {
  char dir[4096];
  const char *base = strrchr(path, '/');
  if (base) {
    size_t dl = base - path;
    if (dl >= sizeof dir) return -1;
    memcpy(dir, path, dl);
    dir[dl] = 0;
    if (chdir(dl ? dir : "/") < 0) return -1;
    base++;
  } else {
    base = path;
  }
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (strlen(base) >= sizeof sa.sun_path) { errno = ENAMETOOLONG; return -1; }
  strcpy(sa.sun_path, base);
  unlink(base);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  mode_t old = umask(077);
  int r = bind(fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (r < 0 || listen(fd, 64) < 0) { close(fd); return -1; }
  return fd;
}

int main(int argc, char **argv) {
  const char *sock = NULL;
  int orphan_ok = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) sock = argv[++i];
    /* Started through a container engine's exec, whose launcher exits at once: the lifetime is the
       server's connection (stdin), not the parent process. */
    else if (strcmp(argv[i], "--no-parent") == 0) orphan_ok = 1;
    else { fprintf(stderr, "usage: kt-agent [--socket PATH] [--no-parent]\n"); return 2; }
  }
  /* Whatever the server (or bwrap) let us inherit must not reach the processes we start. */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    for (int fd = 3; fd < 4096; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  /* Die (and take our process groups with us) when the server dies, sandboxed or not. */
  if (!orphan_ok) prctl(PR_SET_PDEATHSIG, SIGTERM);
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
  fcntl(0, F_SETFD, FD_CLOEXEC);
  fcntl(1, F_SETFD, FD_CLOEXEC);
  set_nonblock(0, 1);
  set_nonblock(1, 0);
  int sndbuf = 4 << 20;
  setsockopt(1, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf); /* fails harmlessly on a pipe */
  ep_add(0, tag(0, K_SERVER), EPOLLIN);
  ep_add(sigfd, tag(0, K_SIGNAL), EPOLLIN);
  if (sock) {
    listen_fd = listen_at(sock);
    if (listen_fd < 0) die("cannot listen on the agent socket");
    ep_add(listen_fd, tag(0, K_LISTEN), EPOLLIN);
  }
  if (chdir("/") < 0) { /* keep no directory busy */ }
  send_frame(T_READY, 0, NULL, 0, NULL, 0);

  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(epfd, evs, 64, -1);
    if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
    for (int i = 0; i < n; i++) {
      uint64_t t = evs[i].data.u64;
      int kind = t & 0xff;
      size_t slot = t >> 8;
      struct proc *p = NULL;
      if (kind >= K_OUT) {
        if (slot >= nprocs || !(p = procs[slot])) continue;
      }
      switch (kind) {
      case K_SERVER: on_server(); break;
      case K_LISTEN: accept_conn(); break;
      case K_SIGNAL: {
        struct signalfd_siginfo si;
        while (read(sigfd, &si, sizeof si) == sizeof si) {
          if (si.ssi_signo != SIGCHLD) { kill_all(SIGKILL); _exit(0); }
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) on_reaped(pid, status);
        break;
      }
      case K_OUT: if (p->out_fd >= 0) on_output(p, &p->out_fd, T_STDOUT); break;
      case K_ERR: if (p->err_fd >= 0) on_output(p, &p->err_fd, T_STDERR); break;
      case K_IN: flush_stdin(p); break;
      case K_MASTER:
        if ((evs[i].events & EPOLLOUT) && p->master_fd >= 0) flush_stdin(p);
        if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && p->master_fd >= 0) on_output(p, &p->master_fd, T_STDOUT);
        break;
      case K_HOST: if (p->host_fd >= 0) on_host(p, evs[i].events); break;
      case K_CONN: if (p->conn_fd >= 0) on_conn(p); break;
      }
    }
  }
}
