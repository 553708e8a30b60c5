/*
 * kt-agent: shepherds and process trees.
 *
 * Every guest process is started by a shepherd: a small fork of the agent (no exec) that is a child
 * subreaper (PR_SET_CHILD_SUBREAPER), so that every descendant of the process that loses its parent
 * (`setsid cmd &`, double forks, daemons) is reparented to it instead of escaping. The shepherd
 *   - vforks the guest process (which sends its own pid, C_PID, right before exec), and reports
 *     its wait status (C_EXIT);
 *   - reaps everything that reparents to it;
 *   - delivers signals to the process group (C_SIGNAL), and on C_TEARDOWN kills the whole tree:
 *     SIGKILL to every live descendant found in /proc, repeated until it has no child left (bounded),
 *     then reports how many processes besides the guest it ended (C_ENDED);
 *   - exits once the process was reaped and nothing is left below it;
 *   - dies with the agent (PDEATHSIG), and its guest dies with it.
 * It holds nothing of the agent's: only its socket to the agent. It is non-dumpable like the agent
 * (the flag survives fork), so guests cannot ptrace it or open its descriptors.
 */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif

char *argv_area;
size_t argv_area_len;

/* ---------- /proc ---------- */

struct pinfo { pid_t pid, ppid, pgrp; unsigned long long start; char state; char mark; };

static int read_stat(pid_t pid, struct pinfo *out) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (!p || p[1] != ' ') return -1;
  p += 2;
  out->pid = pid;
  out->state = *p;
  /* fields 4 (ppid), 5 (pgrp), then 22 (starttime) */
  char *end;
  int field = 3;
  p++;
  while (*p && field < 22) {
    while (*p == ' ') p++;
    field++;
    if (field == 4) out->ppid = (pid_t)strtol(p, &end, 10);
    else if (field == 5) out->pgrp = (pid_t)strtol(p, &end, 10);
    else if (field == 22) { out->start = strtoull(p, &end, 10); return 0; }
    while (*p && *p != ' ') p++;
  }
  return -1;
}

static int by_pid(const void *a, const void *b) {
  pid_t x = ((const struct pinfo *)a)->pid, y = ((const struct pinfo *)b)->pid;
  return (x > y) - (x < y);
}

/* Every process in /proc, sorted by pid; returns the count (the array is malloc'd). */
static size_t scan_proc(struct pinfo **out) {
  size_t len = 0, cap = 256;
  struct pinfo *all = malloc(cap * sizeof *all);
  DIR *d = opendir("/proc");
  if (!all || !d) { if (d) closedir(d); free(all); *out = NULL; return 0; }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    if (len == cap) {
      struct pinfo *grown = realloc(all, 2 * cap * sizeof *all);
      if (!grown) break;
      all = grown;
      cap *= 2;
    }
    if (read_stat(pid, &all[len]) == 0) { all[len].mark = 0; len++; }
  }
  closedir(d);
  qsort(all, len, sizeof *all, by_pid);
  *out = all;
  return len;
}

static struct pinfo *find_pid(struct pinfo *all, size_t len, pid_t pid) {
  struct pinfo key = { .pid = pid };
  return bsearch(&key, all, len, sizeof *all, by_pid);
}

/* Marks (mark = 1) the descendants of root, not entering processes `skip` names (marked 2). */
static void mark_descendants(struct pinfo *all, size_t len, pid_t root, int (*skip)(pid_t)) {
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < len; i++) {
      if (all[i].mark) continue;
      int parent_in = all[i].ppid == root;
      if (!parent_in) {
        struct pinfo *parent = find_pid(all, len, all[i].ppid);
        parent_in = parent && parent->mark == 1;
      }
      if (!parent_in) continue;
      all[i].mark = skip && skip(all[i].pid) ? 2 : 1;
      changed = 1;
    }
  }
}

/*
 * Signals exactly the process that was scanned: a pidfd pins it, and its start time proves that the
 * pid was not reused in between (a process that was reaped meanwhile is simply gone).
 */
static int signal_exact(const struct pinfo *p, int sig) {
  int fd = (int)syscall(__NR_pidfd_open, p->pid, 0);
  if (fd < 0) return errno == ESRCH ? -1 : kill(p->pid, sig); /* no pidfds here: the plain way */
  struct pinfo now;
  int r = -1;
  if (read_stat(p->pid, &now) == 0 && now.start == p->start) {
    r = (int)syscall(__NR_pidfd_send_signal, fd, sig, NULL, 0);
    if (r < 0 && errno != ESRCH) r = kill(p->pid, sig);
  }
  close(fd);
  return r;
}

static int killset_add(struct killset *k, const struct pinfo *p) {
  for (size_t i = 0; i < k->len; i++)
    if (k->items[i].pid == p->pid && k->items[i].start == p->start) return 0;
  if (k->len == k->cap) {
    size_t cap = k->cap ? 2 * k->cap : 64;
    struct killed *grown = realloc(k->items, cap * sizeof *grown);
    if (!grown) return 1; /* still counted, just not remembered */
    k->items = grown;
    k->cap = cap;
  }
  k->items[k->len].pid = p->pid;
  k->items[k->len].start = p->start;
  k->len++;
  return 1;
}

void killset_free(struct killset *k) { free(k->items); k->items = NULL; k->len = k->cap = 0; }

unsigned kill_tree_pass(pid_t root, int (*skip)(pid_t), struct killset *seen) {
  struct pinfo *all;
  size_t len = scan_proc(&all);
  unsigned killed = 0;
  mark_descendants(all, len, root, skip);
  for (size_t i = 0; i < len; i++) {
    if (all[i].mark != 1 || all[i].state == 'Z' || all[i].state == 'X') continue;
    if (signal_exact(&all[i], SIGKILL) == 0 && killset_add(seen, &all[i])) killed++;
  }
  free(all);
  return killed;
}

void signal_group_members(pid_t root, pid_t pgrp, int sig) {
  struct pinfo *all;
  size_t len = scan_proc(&all);
  mark_descendants(all, len, root, NULL);
  for (size_t i = 0; i < len; i++)
    if (all[i].mark == 1 && all[i].pgrp == pgrp && all[i].state != 'Z') signal_exact(&all[i], sig);
  free(all);
}

/* ---------- the shepherd ---------- */

static int ctl = -1, sfd = -1;
static pid_t guest;
static int guest_reaped;

static void tell(int type, int32_t value) {
  struct ctl_msg m = { type, value };
  while (send(ctl, &m, sizeof m, MSG_NOSIGNAL) < 0 && errno == EINTR) {}
}

static void reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG | __WALL)) > 0) {
    if (pid == guest && !guest_reaped) {
      guest_reaped = 1;
      tell(C_EXIT, status);
    }
  }
}

static int has_children(void) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT | __WALL) == 0;
}

static void wait_sigchld(int ms) {
  struct pollfd pf = { sfd, POLLIN, 0 };
  if (poll(&pf, 1, ms) > 0) {
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == sizeof si) {}
  }
}

/*
 * Kills every descendant until none is left (bounded: 2 s, 1000 passes); returns how many it ended
 * besides the guest itself (whose end its exit status reports).
 */
static unsigned teardown(void) {
  struct killset seen = { 0 };
  unsigned killed = 0;
  int guest_running = !guest_reaped;
  uint64_t deadline = now_ms() + 2000;
  for (int pass = 0; pass < 1000; pass++) {
    reap();
    killed += kill_tree_pass(getpid(), NULL, &seen);
    reap();
    if (!has_children() || now_ms() > deadline) break;
    wait_sigchld(pass < 10 ? 1 : 10);
  }
  if (guest_running)
    for (size_t i = 0; i < seen.len; i++)
      if (seen.items[i].pid == guest) { killed--; break; }
  killset_free(&seen);
  return killed;
}

static void deliver(int sig) {
  if (!guest_reaped) kill(-guest, sig);
  else signal_group_members(getpid(), guest, sig); /* the leader is gone; its group may live on */
}

static void close_all_but(int a, int b) {
  int lo = a < b ? a : b, hi = a < b ? b : a;
  if (syscall(SYS_close_range, 0, lo - 1, 0) < 0) {
    for (int fd = 0; fd < 4096; fd++) if (fd != lo && fd != hi) close(fd);
    return;
  }
  if (hi > lo + 1) syscall(SYS_close_range, lo + 1, hi - 1, 0);
  syscall(SYS_close_range, hi + 1, ~0U, 0);
}

/*
 * SPAWN_DIRECT: execs the simple command itself, searching PATH as a shell does. Returns only if
 * there is nothing it can exec, for the shell to handle: not found, not executable, or a file the
 * kernel will not run (ENOEXEC: a script without #!, which a shell runs itself). Runs in the vfork
 * child: no allocation, the path is built on the stack.
 */
static void exec_direct(char **argv, char **envp) {
  const char *name = argv[0];
  if (strchr(name, '/')) { execve(name, argv, envp); return; }
  const char *path = NULL;
  for (char **e = envp; *e; e++) if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  if (!path) return; /* the shell's own default PATH then applies */
  size_t nlen = strlen(name);
  char buf[4096];
  for (const char *dir = path;; ) {
    const char *colon = strchrnul(dir, ':');
    size_t dlen = (size_t)(colon - dir);
    if (dlen == 0) { dir = "."; dlen = 1; }
    if (dlen + 1 + nlen < sizeof buf) {
      memcpy(buf, dir, dlen);
      buf[dlen] = '/';
      memcpy(buf + dlen + 1, name, nlen + 1);
      execve(buf, argv, envp);
      if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) return;
    }
    if (*colon == 0) return;
    dir = colon + 1;
  }
}

static void guest_exec(const struct shepherd_args *a) __attribute__((noreturn));
static void guest_exec(const struct shepherd_args *a) {
  sigset_t none;
  sigemptyset(&none);
  for (int s = 1; s < 65; s++) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  setsid();
  if (a->tty) ioctl(a->stdio[0], TIOCSCTTY, 0);
  /* The stdio fds are CLOEXEC in the agent; dup2 gives plain copies at 0-2. */
  for (int i = 0; i < 3; i++) {
    if (a->stdio[i] == i) fcntl(i, F_SETFD, 0);
    else dup2(a->stdio[i], i);
  }
  /* The shepherd dies only when the agent does (or a guest kills it): then so does the process. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char *failed = NULL;
  char msg[600];
  if (chdir(a->cwd) < 0) {
    snprintf(msg, sizeof msg, "cannot change directory to %s: %s", a->cwd, strerror(errno));
    failed = msg;
  }
  if (!failed) {
    /* Before exec: the agent learns the pid from the process itself, with no wait for the shepherd. */
    struct ctl_msg m = { C_PID, (int32_t)getpid() };
    (void)!send(a->ctl, &m, sizeof m, MSG_NOSIGNAL);
    extern char **environ;
    if (a->direct) exec_direct(a->direct, a->direct_envp);
    environ = a->envp; /* execvp searches the PATH of the new environment */
    execvp(a->argv[0], a->argv);
    failed = strerror(errno);
  }
  (void)!write(a->ep, failed, strlen(failed));
  _exit(127);
}

void shepherd_main(const struct shepherd_args *a) {
  pid_t agent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != agent) _exit(1);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  prctl(PR_SET_NAME, "kt-shepherd");
  if (argv_area) { memset(argv_area, 0, argv_area_len); snprintf(argv_area, argv_area_len, "kt-shepherd"); }
  ctl = a->ctl;
  sigset_t all, chld;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL); /* a guest signalling its shepherd changes nothing (but SIGKILL/STOP) */
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);

  /* vfork: the child only sets up its stdio and session and execs; no page tables to copy. */
  guest = vfork();
  if (guest == 0) guest_exec(a);
  if (guest < 0) {
    char buf[200];
    const char *reason = fork_failure(errno, buf, sizeof buf);
    (void)!write(a->ep, reason, strlen(reason));
    _exit(1);
  }
  /* The guest reported its pid itself; once it has exec'd and this copy is closed, the agent knows. */
  close(a->ep);
  close_all_but(ctl, sfd);

  for (;;) {
    struct pollfd pf[2] = { { ctl, POLLIN, 0 }, { sfd, POLLIN, 0 } };
    if (poll(pf, 2, -1) < 0 && errno != EINTR) _exit(1);
    if (pf[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {}
      reap();
    }
    if (pf[0].revents) {
      struct ctl_msg m;
      ssize_t n;
      while ((n = recv(ctl, &m, sizeof m, MSG_DONTWAIT)) == (ssize_t)sizeof m) {
        if (m.type == C_SIGNAL && m.value > 0 && m.value < 65) deliver(m.value);
        else if (m.type == C_TEARDOWN) tell(C_ENDED, (int32_t)teardown());
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        /* The agent let go of this process (or is gone): nothing of it may stay. */
        teardown();
        _exit(0);
      }
    }
    if (guest_reaped && !has_children()) _exit(0);
  }
}
