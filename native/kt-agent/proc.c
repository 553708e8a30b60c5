/*
 * kt-agent: the processes of the computer, as the server sees them.
 *
 * A process (the server's id) has a shepherd (see shepherd.c), stdio pipes or a pseudo-terminal
 * whose master the agent holds, and a server-facing lifecycle:
 *   STARTED, then output, then EXIT (once the process was reaped and everything it had written was
 *   sent), then CLOSED (its output reached EOF: no holder left) — or RELEASED when the server let go
 *   of it first. A process stays known to the agent until its shepherd is gone, which can be after
 *   CLOSED (daemons that closed their output keep their shepherd, and end with the computer).
 * A teardown (SIGNAL SIGKILL, or RELEASE of a process that is still open) kills the whole tree; the
 * EXIT or CLOSED frame that follows says how many processes besides the process itself it ended.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* Pipe capacity for heavy output (the default 64 KiB makes for small reads and many wakeups).
 * Raised only once a pipe fills up: big pipes count against the user's pipe-user-pages-soft. */
#define BIG_PIPE (1 << 20)
#define HEAVY (32 * 1024)
#define READ_CHUNK (256 * 1024)
/* Output moved at most when draining at exit: more than any pipe or terminal buffer holds, so all
 * the process wrote; a bound, because other holders of the output may keep writing. */
#define DRAIN_BUDGET (4u << 20)
#define TEARDOWN_GRACE_MS 3000

struct proc {
  uint32_t id;
  int tty;
  pid_t shepherd;     /* 0 once reaped */
  pid_t pid;          /* the guest process */
  int ctl;            /* socket to the shepherd */
  int out_fd, err_fd, in_fd; /* TTY: out_fd is the master, in_fd a duplicate of it */
  struct obuf in;
  int in_eof, in_armed, big_out, big_err;
  int exited, exit_kind, exit_value;
  int exit_sent, closed_sent, released;
  int server_done;    /* nothing more goes to the server about it */
  int teardown;       /* a teardown runs: its count is awaited */
  uint64_t delivered; /* signals the server sent it (bit n-1 for signal n) */
  uint64_t deadline;
  uint32_t ended;     /* processes ended by teardowns, not reported yet */
};

static struct proc **procs;
static size_t nprocs;
static int strays_pending;
static char rbuf[READ_CHUNK];
static int use_splice = 1, big_channel;

static size_t slot_of(const struct proc *p) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] == p) return i;
  return (size_t)-1;
}

/* The process the server may still talk about. */
static struct proc *find_live(uint32_t id) {
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i] && procs[i]->id == id && !procs[i]->server_done) return procs[i];
  return NULL;
}

int proc_is_shepherd(pid_t pid) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->shepherd == pid) return 1;
  return 0;
}

static struct proc *new_proc(uint32_t id) {
  struct proc *p = calloc(1, sizeof *p);
  if (!p) die("calloc");
  p->id = id;
  p->ctl = p->out_fd = p->err_fd = p->in_fd = -1;
  for (size_t i = 0; i < nprocs; i++) if (!procs[i]) { procs[i] = p; return p; }
  struct proc **grown = realloc(procs, (nprocs + 1) * sizeof *procs);
  if (!grown) die("realloc");
  procs = grown;
  procs[nprocs++] = p;
  return p;
}

static void close_io(struct proc *p) {
  close_fd(&p->out_fd);
  close_fd(&p->err_fd);
  close_fd(&p->in_fd);
  p->in_armed = 0;
  ob_free(&p->in);
}

static void maybe_free(struct proc *p) {
  if (!p->server_done || p->shepherd != 0) return;
  size_t s = slot_of(p);
  close_io(p);
  close_fd(&p->ctl);
  if (s != (size_t)-1) procs[s] = NULL;
  free(p);
}

static void tell(struct proc *p, int type, int32_t value) {
  if (p->ctl < 0 || p->shepherd == 0) return;
  kill(p->shepherd, SIGCONT); /* a guest may have stopped its shepherd */
  struct ctl_msg m = { type, value };
  while (send(p->ctl, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {}
}

static void start_teardown(struct proc *p) {
  if (p->teardown || p->shepherd == 0) return;
  p->teardown = 1;
  p->deadline = now_ms() + TEARDOWN_GRACE_MS;
  tell(p, C_TEARDOWN, 0);
}

/* Sends EXIT and CLOSED once they are due. */
static void report(struct proc *p) {
  if (!p->server_done && !p->teardown) {
    if (p->exited && !p->exit_sent) {
      char ex[9];
      ex[0] = (char)p->exit_kind;
      put32(ex + 1, (uint32_t)p->exit_value);
      put32(ex + 5, p->ended);
      p->ended = 0;
      p->exit_sent = 1;
      send_frame(T_EXIT, p->id, ex, sizeof ex, NULL, 0);
    }
    if (p->exit_sent && p->out_fd < 0 && p->err_fd < 0) {
      p->closed_sent = 1;
      p->server_done = 1;
      close_io(p);
      send_u32(T_CLOSED, p->id, p->ended);
      p->ended = 0;
    }
  }
  maybe_free(p);
}

/* ---------- output ---------- */

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
      if (n <= 0) shutdown_and_exit(); /* cannot happen: the bytes were counted in the pipe */
      write_all(rbuf, (size_t)n);
    }
    len -= (size_t)n;
  }
}

/* Moves up to `budget` bytes (at least one read) from fd to the server. Returns 1 at EOF. */
static int pump(struct proc *p, int *fd, int type, size_t budget) {
  size_t moved = 0;
  do {
    int waiting = 0;
    if (!p->tty && use_splice && ioctl(*fd, FIONREAD, &waiting) == 0 && waiting >= HEAVY) {
      int *big = type == T_STDOUT ? &p->big_out : &p->big_err;
      if (!*big) { *big = 1; fcntl(*fd, F_SETPIPE_SZ, BIG_PIPE); }
      if (!big_channel) { big_channel = 1; fcntl(1, F_SETPIPE_SZ, BIG_PIPE); } /* fails harmlessly on a socket */
      size_t len = (size_t)waiting < MAX_OUTPUT ? (size_t)waiting : MAX_OUTPUT;
      forward_waiting(p, *fd, type, len);
      moved += len;
      continue;
    }
    /* A terminal gives at most a line-discipline buffer (4 KiB) per read: gather several per frame. */
    size_t got = 0;
    int eof = 0;
    size_t want = p->tty ? 64 * 1024 : sizeof rbuf;
    while (got < want) {
      ssize_t n = read(*fd, rbuf + got, want - got);
      if (n > 0) { got += (size_t)n; if (!p->tty) break; continue; }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      eof = 1; /* EOF, or EIO on a terminal that no process holds any more (after its last byte) */
      break;
    }
    if (got > 0) send_frame(type, p->id, rbuf, got, NULL, 0);
    moved += got;
    if (eof) {
      close_fd(fd);
      if (p->tty) close_fd(&p->in_fd);
      return 1;
    }
    if (got == 0) return 0;
  } while (moved < budget);
  return 0;
}

static void on_output(struct proc *p, int *fd, int type) {
  if (pump(p, fd, type, 1)) report(p);
}

/* ---------- stdin ---------- */

static void update_stdin_events(struct proc *p) {
  int want = ob_pending(&p->in) > 0;
  if (p->in_fd < 0 || want == p->in_armed) return;
  if (want) {
    struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = tag(slot_of(p), K_IN) };
    epoll_ctl(epfd, EPOLL_CTL_ADD, p->in_fd, &ev);
  } else {
    epoll_ctl(epfd, EPOLL_CTL_DEL, p->in_fd, NULL);
  }
  p->in_armed = want;
}

static void flush_stdin(struct proc *p) {
  if (p->in_fd < 0) { ob_free(&p->in); return; }
  if (ob_flush(&p->in, p->in_fd) < 0) { ob_free(&p->in); update_stdin_events(p); if (!p->tty) close_fd(&p->in_fd); return; }
  if (ob_pending(&p->in) == 0 && p->in_eof && !p->tty) {
    if (p->in_armed) epoll_ctl(epfd, EPOLL_CTL_DEL, p->in_fd, NULL);
    p->in_armed = 0;
    close_fd(&p->in_fd);
    return;
  }
  update_stdin_events(p);
}

/* ---------- spawning ---------- */

struct spawn_args { char *cwd; char **argv; char **envp; char **direct; char **direct_envp; char *pwd; };

/* SPAWN's payload; with `direct` (SPAWN_DIRECT), a u32 directc first and the direct argv last. */
static int parse_spawn(char *pl, size_t len, struct spawn_args *a, int direct) {
  uint32_t directc = 0;
  if (direct) {
    if (len < 4) return -1;
    directc = get32(pl);
    pl += 4;
    len -= 4;
    if (directc == 0 || directc > len) return -1;
  }
  if (len < 8) return -1;
  uint32_t argc = get32(pl), envc = get32(pl + 4);
  if (argc == 0 || argc > len || envc > len) return -1;
  a->argv = calloc((size_t)argc + 1, sizeof(char *));
  a->envp = calloc((size_t)envc + 1, sizeof(char *));
  if (!a->argv || !a->envp) die("calloc");
  if (direct) {
    a->direct = calloc((size_t)directc + 1, sizeof(char *));
    a->direct_envp = calloc((size_t)envc + 2, sizeof(char *));
    if (!a->direct || !a->direct_envp) die("calloc");
  }
  char *cur = pl + 8, *end = pl + len;
  char **slots[4] = { &a->cwd, a->argv, a->envp, a->direct };
  uint32_t counts[4] = { 1, argc, envc, directc };
  for (int k = 0; k < 4; k++) {
    for (uint32_t i = 0; i < counts[k]; i++) {
      char *z = memchr(cur, 0, (size_t)(end - cur));
      if (!z) return -1;
      slots[k][i] = cur;
      cur = z + 1;
    }
  }
  if (direct) {
    /* What the shell would have exported: PWD, the directory the process starts in. */
    size_t n = 0;
    for (uint32_t i = 0; i < envc; i++) if (strncmp(a->envp[i], "PWD=", 4) != 0) a->direct_envp[n++] = a->envp[i];
    if (asprintf(&a->pwd, "PWD=%s", a->cwd) < 0) die("asprintf");
    a->direct_envp[n] = a->pwd;
  }
  return 0;
}

/* Waits for exec (the CLOEXEC pipe closes) or for the reason it failed. Returns 0 on success. */
static int await_exec(int fd, char *reason, size_t cap) {
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, reason + got, cap - 1 - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
    if (got == cap - 1) break;
  }
  close(fd);
  reason[got] = 0;
  return got == 0 ? 0 : -1;
}

static int recv_msg(int fd, struct ctl_msg *m, int flags) {
  for (;;) {
    ssize_t n = recv(fd, m, sizeof *m, flags);
    if (n == (ssize_t)sizeof *m) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
}

const char *fork_failure(int err, char *buf, size_t cap) {
  if (err == EAGAIN) snprintf(buf, cap, "the computer has no room for another process: its process limit is reached (%s)", strerror(err));
  else snprintf(buf, cap, "cannot start the process: %s", strerror(err));
  return buf;
}

static void spawn_failed(struct proc *p, const char *reason) {
  send_text(T_SPAWN_FAILED, p->id, reason);
  p->server_done = 1;
  close_io(p);
  close_fd(&p->ctl); /* a shepherd still starting sees EOF and ends */
  maybe_free(p);
}

static void do_spawn(uint32_t id, char *pl, size_t len, int tty, int direct) {
  struct spawn_args a = { 0 };
  char reason[600];
  if (find_live(id)) { send_text(T_SPAWN_FAILED, id, "duplicate process id"); return; }
  struct proc *p = new_proc(id);
  p->tty = tty;
  unsigned cols = 80, rows = 24;
  if (tty) {
    if (len < 4) { spawn_failed(p, "malformed spawn request"); return; }
    cols = get16(pl);
    rows = get16(pl + 2);
    pl += 4;
    len -= 4;
  }
  int child[3] = { -1, -1, -1 }, ctl[2] = { -1, -1 }, ep[2] = { -1, -1 };
  const char *fail = NULL;
  char fbuf[300];
  if (parse_spawn(pl, len, &a, direct) < 0) { fail = "malformed spawn request"; goto failed; }
  if (tty) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) { snprintf(fbuf, sizeof fbuf, "cannot allocate a pseudo-terminal: %s", strerror(errno)); fail = fbuf; goto failed; }
    p->out_fd = master;
    char *name = (grantpt(master) == 0 && unlockpt(master) == 0) ? ptsname(master) : NULL;
    int slave = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (slave < 0) { snprintf(fbuf, sizeof fbuf, "cannot open the pseudo-terminal: %s", strerror(errno)); fail = fbuf; goto failed; }
    child[0] = child[1] = child[2] = slave;
    struct termios tio;
    if (tcgetattr(slave, &tio) == 0) { tio.c_iflag |= IUTF8; tcsetattr(slave, TCSANOW, &tio); }
    struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
    ioctl(master, TIOCSWINSZ, &ws);
    p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
  } else {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) < 0) { fail = strerror(errno); goto failed; }
    p->in_fd = in[1]; child[0] = in[0];
    if (pipe2(out, O_CLOEXEC) < 0) { fail = strerror(errno); goto failed; }
    p->out_fd = out[0]; child[1] = out[1];
    if (pipe2(err, O_CLOEXEC) < 0) { fail = strerror(errno); goto failed; }
    p->err_fd = err[0]; child[2] = err[1];
  }
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) < 0) { fail = strerror(errno); goto failed; }
  if (pipe2(ep, O_CLOEXEC) < 0) { fail = strerror(errno); goto failed; }
  pid_t shepherd = fork();
  if (shepherd == 0) {
    struct shepherd_args sa = {
      .ctl = ctl[1], .ep = ep[1], .stdio = { child[0], child[1], child[2] }, .tty = tty,
      .cwd = a.cwd, .argv = a.argv, .envp = a.envp, .direct = a.direct, .direct_envp = a.direct_envp
    };
    shepherd_main(&sa);
  }
  if (shepherd < 0) { fail = fork_failure(errno, fbuf, sizeof fbuf); goto failed; }
  p->shepherd = shepherd;
  p->ctl = ctl[0];
  close(ctl[1]); ctl[1] = -1;
  close(ep[1]); ep[1] = -1;
  close(child[0]);
  if (!tty) { close(child[1]); close(child[2]); }
  child[0] = child[1] = child[2] = -1;
  /* The guest sent C_PID right before its exec; the pipe closes at the exec (CLOEXEC) and once the
   * shepherd closed its copy. */
  int exec_failed = await_exec(ep[0], reason, sizeof reason) < 0;
  ep[0] = -1;
  struct ctl_msg m;
  if (!exec_failed && (recv_msg(p->ctl, &m, MSG_DONTWAIT) < 0 || m.type != C_PID)) {
    exec_failed = 1;
    snprintf(reason, sizeof reason, "the process's shepherd ended before it started");
  }
  if (exec_failed) { spawn_failed(p, reason); goto out; }
  p->pid = m.value;
  size_t s = slot_of(p);
  set_nonblock(p->out_fd, 1);
  set_nonblock(p->in_fd, 1);
  ep_add(p->out_fd, tag(s, K_OUT), EPOLLIN);
  if (p->err_fd >= 0) { set_nonblock(p->err_fd, 1); ep_add(p->err_fd, tag(s, K_ERR), EPOLLIN); }
  ep_add(p->ctl, tag(s, K_CTL), EPOLLIN);
  send_u32(T_STARTED, id, (uint32_t)p->pid);
  goto out;
failed:
  for (int i = 0; i < 3; i++) if (child[i] >= 0 && (i == 0 || !tty)) close(child[i]);
  if (ctl[0] >= 0) close(ctl[0]);
  if (ctl[1] >= 0) close(ctl[1]);
  if (ep[0] >= 0) close(ep[0]);
  if (ep[1] >= 0) close(ep[1]);
  spawn_failed(p, fail);
out:
  free(a.argv);
  free(a.envp);
  free(a.direct);
  free(a.direct_envp);
  free(a.pwd);
}

/* ---------- the shepherd's reports ---------- */

static void on_exit_status(struct proc *p, int status) {
  if (p->exited) return;
  p->exited = 1;
  /* Killed by a signal the server sent (kill, a timeout): what it left behind goes with it. A process
   * that survives its signal (a REPL's SIGINT) or exits by itself keeps its background jobs. */
  if (WIFSIGNALED(status) && WTERMSIG(status) < 65 && (p->delivered >> (WTERMSIG(status) - 1)) & 1) start_teardown(p);
  p->exit_kind = WIFSIGNALED(status) ? 1 : 0;
  p->exit_value = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
  if (!p->server_done) {
    /* Everything the process wrote before it exited is in its pipe or terminal now: send it first.
     * (A terminal's read flushes the kernel's pending input before it says EAGAIN.) */
    if (p->out_fd >= 0) pump(p, &p->out_fd, T_STDOUT, DRAIN_BUDGET);
    if (p->err_fd >= 0) pump(p, &p->err_fd, T_STDERR, DRAIN_BUDGET);
  }
}

static void on_ctl(struct proc *p) {
  struct ctl_msg m;
  while (p->ctl >= 0 && recv_msg(p->ctl, &m, MSG_DONTWAIT) == 0) {
    if (m.type == C_EXIT) on_exit_status(p, m.value);
    else if (m.type == C_ENDED) { p->teardown = 0; p->ended += (uint32_t)m.value; }
  }
  report(p);
}

void proc_reaped(pid_t pid, int status) {
  struct proc *p = NULL;
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->shepherd == pid) { p = procs[i]; break; }
  if (!p) { strays_pending = 1; return; } /* a stray (its shepherd was killed), now gone: its children came to us */
  on_ctl(p); /* what it said before it ended (p stays: its shepherd is still set) */
  p->shepherd = 0;
  close_fd(&p->ctl);
  if (!p->exited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    /* Killed (by a guest, or by us after a teardown that did not finish): its tree is ours now. */
    strays_pending = 1;
    if (!p->exited) on_exit_status(p, SIGKILL); /* as a wait status: killed by SIGKILL */
  }
  p->teardown = 0;
  report(p);
}

void proc_after_reaps(void) {
  if (!strays_pending) return;
  strays_pending = 0;
  struct killset seen = { 0 };
  kill_tree_pass(getpid(), proc_is_shepherd, &seen);
  killset_free(&seen);
}

uint64_t proc_next_deadline(void) {
  uint64_t next = 0;
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i] && procs[i]->teardown && (next == 0 || procs[i]->deadline < next)) next = procs[i]->deadline;
  return next;
}

void proc_timers(void) {
  uint64_t now = now_ms();
  for (size_t i = 0; i < nprocs; i++) {
    struct proc *p = procs[i];
    /* A shepherd that does not finish its teardown (stopped, stuck) is killed: its tree comes to us. */
    if (p && p->teardown && p->shepherd && now >= p->deadline) kill(p->shepherd, SIGKILL);
  }
}

/* ---------- server frames and events ---------- */

void proc_frame(int type, uint32_t id, char *pl, size_t len) {
  struct proc *p;
  switch (type) {
  case T_SPAWN: do_spawn(id, pl, len, 0, 0); break;
  case T_SPAWN_TTY: do_spawn(id, pl, len, 1, 0); break;
  case T_SPAWN_DIRECT: do_spawn(id, pl, len, 0, 1); break;
  case T_STDIN:
    p = find_live(id);
    if (p && !p->in_eof && p->in_fd >= 0) { ob_push(&p->in, pl, len); flush_stdin(p); }
    break;
  case T_STDIN_EOF:
    p = find_live(id);
    if (p && !p->tty) { p->in_eof = 1; flush_stdin(p); }
    break;
  case T_SIGNAL:
    p = find_live(id);
    if (p && len >= 4) {
      uint32_t sig = get32(pl);
      if (sig == SIGKILL) start_teardown(p);
      else if (sig > 0 && sig < 65) {
        p->delivered |= 1ull << (sig - 1);
        tell(p, C_SIGNAL, (int32_t)sig);
      }
    }
    break;
  case T_RESIZE:
    p = find_live(id);
    if (p && p->tty && p->out_fd >= 0 && len >= 4) {
      struct winsize ws = { .ws_col = get16(pl), .ws_row = get16(pl + 2) };
      ioctl(p->out_fd, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH to the foreground group */
    }
    break;
  case T_RELEASE:
    p = find_live(id);
    if (p) {
      p->released = 1;
      p->server_done = 1;
      close_io(p);
      start_teardown(p);
    }
    send_frame(T_RELEASED, id, NULL, 0, NULL, 0);
    if (p) maybe_free(p);
    break;
  default:
    agent_log("unknown frame type %d", type);
    break;
  }
}

void proc_event(size_t slot, int kind, uint32_t events) {
  if (slot >= nprocs || !procs[slot]) return;
  struct proc *p = procs[slot];
  switch (kind) {
  case K_OUT: if (p->out_fd >= 0) on_output(p, &p->out_fd, T_STDOUT); break;
  case K_ERR: if (p->err_fd >= 0) on_output(p, &p->err_fd, T_STDERR); break;
  case K_IN: flush_stdin(p); break;
  case K_CTL: on_ctl(p); break;
  }
  (void)events;
}
