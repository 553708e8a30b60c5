/*
 * kt-agent: the processes of the computer. The table lives here, not in any server: each process
 * has a handle (`p<N>` to the servers) allocated by the agent and never reused in the computer's
 * life (the next one is kept in the store's directory, so a restarted agent goes on counting), its
 * record (what the spawning server attached to it, a note of why it ended, its times and exit), and
 * its retained output (store.c). Servers attach and detach as they like (conn.c, watch.c): nothing
 * here waits for them.
 *
 * A process has a shepherd (see shepherd.c) and stdio pipes or a pseudo-terminal whose master the
 * agent holds. Its output is drained unconditionally into its store; it has *exited* once the
 * shepherd reported its status and everything it wrote before was stored, and is *closed* once its
 * output reached EOF (children that outlive it may write until then). A finished record (exited,
 * closed, shepherd gone) stays until more than `max_finished` are kept, oldest evicted first (never
 * one a server is still being sent). A teardown (SIGNAL SIGKILL) kills the whole tree; EXIT and the
 * record say how many processes besides the process itself it ended.
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
/* Stdin the agent holds for a process that does not read it. */
#define MAX_PENDING_STDIN (64u << 20)
/* Handles are reserved in the store's directory this many at a time. */
#define HANDLE_BLOCK 64

uint32_t max_finished = 100;
static struct proc **procs;
static size_t nprocs;
static int strays_pending;
static char rbuf[READ_CHUNK];
static uint32_t next_handle = 1, reserved_handle = 1;
static uint64_t finished_seq;
/* Processes whose teardown runs: while none, the event loop has no timer of theirs to look for. */
static size_t tearing;

/* ---------- handles ---------- */

static void reserve_handles(void) {
  char text[24];
  int n = snprintf(text, sizeof text, "%u\n", next_handle + HANDLE_BLOCK);
  int fd = openat(store_dir, ".next-handle.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    int ok = write(fd, text, (size_t)n) == n;
    close(fd);
    if (ok) renameat(store_dir, ".next-handle.tmp", store_dir, "next-handle");
  }
  reserved_handle = next_handle + HANDLE_BLOCK;
}

void proc_init_handles(void) {
  char text[24] = { 0 };
  int fd = openat(store_dir, "next-handle", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    if (read(fd, text, sizeof text - 1) < 0) text[0] = 0;
    close(fd);
  }
  unsigned long v = strtoul(text, NULL, 10);
  next_handle = v >= 1 && v < 0xf0000000ul ? (uint32_t)v : 1;
  reserve_handles();
}

static uint32_t new_handle(void) {
  if (next_handle >= reserved_handle) reserve_handles();
  return next_handle++;
}

/* ---------- the table ---------- */

static size_t slot_of(const struct proc *p) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] == p) return i;
  return (size_t)-1;
}

struct proc *proc_find(uint32_t handle) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->handle == handle) return procs[i];
  return NULL;
}

static int by_handle(const void *a, const void *b) {
  uint32_t x = (*(struct proc *const *)a)->handle, y = (*(struct proc *const *)b)->handle;
  return (x > y) - (x < y);
}

void proc_each(void (*f)(struct proc *, void *), void *arg) {
  struct proc **sorted = malloc((nprocs + 1) * sizeof *sorted);
  if (!sorted) die("malloc");
  size_t n = 0;
  for (size_t i = 0; i < nprocs; i++) if (procs[i]) sorted[n++] = procs[i];
  qsort(sorted, n, sizeof *sorted, by_handle);
  for (size_t i = 0; i < n; i++) f(sorted[i], arg);
  free(sorted);
}

int proc_is_shepherd(pid_t pid) {
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->shepherd == pid) return 1;
  return 0;
}

static struct proc *new_proc(void) {
  struct proc *p = calloc(1, sizeof *p);
  if (!p) die("calloc");
  p->ctl = p->out_fd = p->err_fd = p->in_fd = -1;
  store_init(&p->st[0]);
  store_init(&p->st[1]);
  return p;
}

static void add_proc(struct proc *p) {
  for (size_t i = 0; i < nprocs; i++) if (!procs[i]) { procs[i] = p; return; }
  struct proc **grown = realloc(procs, (nprocs + 1) * sizeof *procs);
  if (!grown) die("realloc");
  procs = grown;
  procs[nprocs++] = p;
}

static void close_io(struct proc *p) {
  close_fd(&p->out_fd);
  close_fd(&p->err_fd);
  close_fd(&p->in_fd);
  p->in_armed = 0;
  ob_free(&p->in);
}

static void free_proc(struct proc *p) {
  size_t s = slot_of(p);
  close_io(p);
  close_fd(&p->ctl);
  store_close(&p->st[0]);
  store_close(&p->st[1]);
  free(p->meta);
  if (s != (size_t)-1) procs[s] = NULL;
  free(p);
}

/* Evicts the oldest finished records beyond max_finished (none a server is still being sent). */
static void evict(void) {
  for (;;) {
    size_t finished = 0;
    struct proc *oldest = NULL;
    for (size_t i = 0; i < nprocs; i++) {
      struct proc *p = procs[i];
      if (!p || !p->finished) continue;
      finished++;
      if (!watch_watched(p) && (!oldest || p->finished < oldest->finished)) oldest = p;
    }
    if (finished <= max_finished || !oldest) return;
    free_proc(oldest);
  }
}

/* Tells the watchers; a record that has nothing more to happen is marked finished. */
static void changed(struct proc *p) {
  /* EXIT waits for a teardown the exit started, so that it counts what the teardown ended. */
  if (p->exited && !p->teardown) p->exit_final = 1;
  if (p->out_fd < 0 && p->err_fd < 0 && p->exit_final) p->closed = 1;
  watch_notify(p);
  if (!p->finished && p->exit_final && p->closed && p->shepherd == 0) {
    p->finished = ++finished_seq;
    evict();
  }
}

size_t proc_record(const struct proc *p, char *out, size_t cap) {
  size_t need = 60 + p->meta_len + p->note_len;
  if (need > cap) return 0;
  put32(out, p->handle);
  put32(out + 4, (uint32_t)p->pid);
  out[8] = (char)(p->exit_final ? (p->closed ? 2 : 1) : 0);
  out[9] = (char)p->tty;
  out[10] = (char)p->exit_kind;
  out[11] = 0;
  put32(out + 12, (uint32_t)p->exit_value);
  put32(out + 16, p->ended_at_exit + p->ended_after);
  put64(out + 20, p->start_ms);
  put64(out + 28, p->end_ms);
  put64(out + 36, p->st[0].total);
  put64(out + 44, p->st[1].total);
  put16(out + 52, p->cols);
  put16(out + 54, p->rows);
  put16(out + 56, p->meta_len);
  put16(out + 58, p->note_len);
  if (p->meta_len) memcpy(out + 60, p->meta, p->meta_len);
  if (p->note_len) memcpy(out + 60 + p->meta_len, p->note, p->note_len);
  return need;
}

static void tell(struct proc *p, int type, int32_t value) {
  if (p->ctl < 0 || p->shepherd == 0) return;
  kill(p->shepherd, SIGCONT); /* a guest may have stopped its shepherd */
  struct ctl_msg m = { type, value };
  while (send(p->ctl, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EINTR) {}
}

static void end_teardown(struct proc *p) {
  if (!p->teardown) return;
  p->teardown = 0;
  tearing--;
}

static void start_teardown(struct proc *p) {
  if (p->teardown || p->shepherd == 0) return;
  p->teardown = 1;
  tearing++;
  p->deadline = now_ms() + TEARDOWN_GRACE_MS;
  tell(p, C_TEARDOWN, 0);
}

/* ---------- output ---------- */

/* Moves up to `budget` bytes (at least one read) from fd into the store. Returns 1 at EOF. */
static int pump(struct proc *p, int *fd, int s, size_t budget) {
  size_t moved = 0;
  do {
    int waiting = 0;
    if (!p->tty && ioctl(*fd, FIONREAD, &waiting) == 0 && waiting >= HEAVY) {
      int *big = s == 0 ? &p->big_out : &p->big_err;
      if (!*big) { *big = 1; fcntl(*fd, F_SETPIPE_SZ, BIG_PIPE); }
    }
    /* A terminal gives at most a line-discipline buffer (4 KiB) per read: gather several per append. */
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
    if (got > 0 && store_append(&p->st[s], rbuf, got) < 0) {
      agent_log("p%u: cannot keep its %s on the computer's disk (%s): what it writes is counted, not kept",
                p->handle, s == 0 ? "stdout" : "stderr", strerror(errno));
    }
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

static void on_output(struct proc *p, int *fd, int s) {
  pump(p, fd, s, 4 * READ_CHUNK);
  changed(p);
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


static void spawn_failed(struct conn *c, uint32_t tag_id, struct proc *p, const char *reason) {
  conn_text(c, T_SPAWN_FAILED, tag_id, reason);
  close_io(p);
  close_fd(&p->ctl); /* a shepherd still starting sees EOF and ends */
  store_close(&p->st[0]);
  store_close(&p->st[1]);
  free(p->meta);
  free(p);
}

void proc_spawn(struct conn *c, int type, uint32_t tag_id, char *pl, size_t len) {
  struct spawn_args a = { 0 };
  char reason[600];
  int tty = type == T_SPAWN_TTY, direct = type == T_SPAWN_DIRECT;
  struct proc *p = new_proc();
  p->tty = tty;
  p->cols = 80;
  p->rows = 24;
  int child[3] = { -1, -1, -1 }, ctl[2] = { -1, -1 }, ep[2] = { -1, -1 };
  const char *fail = NULL;
  char fbuf[300];
  uint32_t meta_len = len >= 4 ? get32(pl) : 0xffffffffu;
  if (meta_len > MAX_META || meta_len > len - 4) { fail = "malformed spawn request"; goto failed; }
  if (meta_len) {
    p->meta = malloc(meta_len);
    if (!p->meta) die("malloc");
    memcpy(p->meta, pl + 4, meta_len);
    p->meta_len = (uint16_t)meta_len;
  }
  pl += 4 + meta_len;
  len -= 4 + meta_len;
  if (tty) {
    if (len < 4) { fail = "malformed spawn request"; goto failed; }
    p->cols = get16(pl);
    p->rows = get16(pl + 2);
    pl += 4;
    len -= 4;
  }
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
    struct winsize ws = { .ws_row = p->rows, .ws_col = p->cols };
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
  if (exec_failed) {
    /* The shepherd ends once its socket closes; it is reaped as a stray. */
    spawn_failed(c, tag_id, p, reason);
    goto out;
  }
  p->pid = m.value;
  p->handle = new_handle();
  p->start_ms = wall_ms();
  add_proc(p);
  size_t s = slot_of(p);
  set_nonblock(p->out_fd, 1);
  set_nonblock(p->in_fd, 1);
  ep_add(p->out_fd, tag(s, K_OUT), EPOLLIN);
  if (p->err_fd >= 0) { set_nonblock(p->err_fd, 1); ep_add(p->err_fd, tag(s, K_ERR), EPOLLIN); }
  ep_add(p->ctl, tag(s, K_CTL), EPOLLIN);
  char started[16];
  put32(started, p->handle);
  put32(started + 4, (uint32_t)p->pid);
  put64(started + 8, p->start_ms);
  conn_frame(c, T_STARTED, tag_id, started, sizeof started, NULL, 0);
  /* The server that started it follows it from its first byte. */
  watch_start(c, p, 0, 0);
  goto out;
failed:
  for (int i = 0; i < 3; i++) if (child[i] >= 0 && (i == 0 || !tty)) close(child[i]);
  if (ctl[0] >= 0) close(ctl[0]);
  if (ctl[1] >= 0) close(ctl[1]);
  if (ep[0] >= 0) close(ep[0]);
  if (ep[1] >= 0) close(ep[1]);
  spawn_failed(c, tag_id, p, fail);
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
  /* Killed by a signal a server sent (kill, a timeout): what it left behind goes with it. A process
   * that survives its signal (a REPL's SIGINT) or exits by itself keeps its background jobs. */
  if (WIFSIGNALED(status) && WTERMSIG(status) < 65 && (p->delivered >> (WTERMSIG(status) - 1)) & 1) start_teardown(p);
  p->exit_kind = WIFSIGNALED(status) ? 1 : 0;
  p->exit_value = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
  /* Everything the process wrote before it exited is in its pipe or terminal now: store it first.
   * (A terminal's read flushes the kernel's pending input before it says EAGAIN.) */
  if (p->out_fd >= 0) pump(p, &p->out_fd, 0, DRAIN_BUDGET);
  if (p->err_fd >= 0) pump(p, &p->err_fd, 1, DRAIN_BUDGET);
  p->exited = 1;
  p->end_ms = wall_ms();
  p->exit_total[0] = p->st[0].total;
  p->exit_total[1] = p->st[1].total;
}

static void on_ctl(struct proc *p) {
  struct ctl_msg m;
  while (p->ctl >= 0 && recv_msg(p->ctl, &m, MSG_DONTWAIT) == 0) {
    if (m.type == C_EXIT) on_exit_status(p, m.value);
    else if (m.type == C_ENDED) {
      end_teardown(p);
      if (p->exit_final) p->ended_after += (uint32_t)m.value;
      else p->ended_at_exit += (uint32_t)m.value;
    }
  }
  changed(p);
}

void proc_reaped(pid_t pid, int status) {
  struct proc *p = NULL;
  for (size_t i = 0; i < nprocs; i++) if (procs[i] && procs[i]->shepherd == pid) { p = procs[i]; break; }
  if (!p) { strays_pending = 1; return; } /* a stray (its shepherd was killed), now gone: its children came to us */
  on_ctl(p); /* what it said before it ended */
  p->shepherd = 0;
  close_fd(&p->ctl);
  if (!p->exited || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    /* Killed (by a guest, or by us after a teardown that did not finish): its tree is ours now. */
    strays_pending = 1;
    if (!p->exited) on_exit_status(p, SIGKILL); /* as a wait status: killed by SIGKILL */
  }
  end_teardown(p);
  changed(p);
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
  if (tearing == 0) return 0;
  for (size_t i = 0; i < nprocs; i++)
    if (procs[i] && procs[i]->teardown && (next == 0 || procs[i]->deadline < next)) next = procs[i]->deadline;
  return next;
}

void proc_timers(void) {
  if (tearing == 0) return;
  uint64_t now = now_ms();
  for (size_t i = 0; i < nprocs; i++) {
    struct proc *p = procs[i];
    /* A shepherd that does not finish its teardown (stopped, stuck) is killed: its tree comes to us. */
    if (p && p->teardown && p->shepherd && now >= p->deadline) kill(p->shepherd, SIGKILL);
  }
}

/* ---------- what servers ask of a process ---------- */

void proc_control(int type, uint32_t handle, char *pl, size_t len) {
  struct proc *p = proc_find(handle);
  if (!p || (p->shepherd == 0 && type != T_NOTE)) return; /* gone: the server learns it from the record */
  switch (type) {
  case T_STDIN:
    if (p->in_eof || p->in_fd < 0) break;
    if (ob_pending(&p->in) + len > MAX_PENDING_STDIN) { agent_log("p%u does not read its input: %zu bytes dropped", handle, len); break; }
    ob_push(&p->in, pl, len);
    flush_stdin(p);
    break;
  case T_STDIN_EOF:
    if (!p->tty) { p->in_eof = 1; flush_stdin(p); }
    break;
  case T_SIGNAL:
    if (len >= 4) {
      uint32_t sig = get32(pl);
      if (sig == SIGKILL) start_teardown(p);
      else if (sig > 0 && sig < 65) {
        p->delivered |= 1ull << (sig - 1);
        tell(p, C_SIGNAL, (int32_t)sig);
      }
    }
    break;
  case T_RESIZE:
    if (p->tty && p->out_fd >= 0 && len >= 4) {
      struct winsize ws = { .ws_col = get16(pl), .ws_row = get16(pl + 2) };
      p->cols = ws.ws_col;
      p->rows = ws.ws_row;
      ioctl(p->out_fd, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH to the foreground group */
    }
    break;
  case T_NOTE:
    p->note_len = (uint16_t)(len > MAX_NOTE ? MAX_NOTE : len);
    memcpy(p->note, pl, p->note_len);
    break;
  }
}

void proc_event(size_t slot, int kind, uint32_t events) {
  if (slot >= nprocs || !procs[slot]) return;
  struct proc *p = procs[slot];
  switch (kind) {
  case K_OUT: if (p->out_fd >= 0) on_output(p, &p->out_fd, 0); break;
  case K_ERR: if (p->err_fd >= 0) on_output(p, &p->err_fd, 1); break;
  case K_IN: flush_stdin(p); break;
  case K_CTL: on_ctl(p); break;
  }
  (void)events;
}
