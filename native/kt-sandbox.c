/*
 * kt-sandbox: starts a host computer's bubblewrap sandbox without host privilege, and limits the
 * number of processes inside it.
 *
 * Outer mode (run by the server, outside the sandbox):
 *
 *   kt-sandbox [--uid UID --gid GID] [--cgroup DIR]... [--channel] [--templates USERNS MNTNS --source FD LABEL...]
 *              -- BWRAP [OPTION...] -- COMMAND [ARG...]
 *
 *   0. marks every inherited descriptor but stdin, stdout and stderr close-on-exec, so nothing the
 *      server happened to inherit reaches the sandbox; with --channel, moves stdin, stdout (the
 *      agent's channel) and stderr to descriptors 3, 4 and 7, puts /dev/null in place of stdin and
 *      stdout, and makes descriptor 8 one end of the setup handshake (see 6): bubblewrap's init,
 *      pid 1 in the sandbox and open to its processes (same uid, dumpable: /proc/1/fd,
 *      pidfd_getfd, ptrace), closes every descriptor above 2, so only the command (see --stdio
 *      below) holds the channel and the server's stderr;
 *   1. joins every cgroup DIR (writes its own pid to DIR/cgroup.procs);
 *   2. with --templates (the user's directories, see kt-sandbox/stage.c): joins the templates' mount
 *      namespace (its user namespace first, unless USERNS is `-`: the server is root), and copies each
 *      --kt-user-bind out of its template; then, with --uid or --templates, enters a private mount
 *      namespace (a copy), lets the templates' tmpfs go, opens the host paths of
 *      `--kt-bind`/`--kt-ro-bind`, mounts a small tmpfs on /tmp there and mounts each of them and
 *      each copy at /tmp/.kt/N, so that bubblewrap, running as the unprivileged UID, can reach them
 *      wherever they are (a state directory under /root, say). The host never sees these mounts;
 *   3. with --uid: drops every group and becomes UID/GID (real, effective and saved ids);
 *   4. joins a new, empty session keyring, so the sandbox does not possess the server's one;
 *   5. execs BWRAP with its options in a memfd (`bwrap --args FD -- COMMAND...`): the sandbox's pid 1
 *      shows `bwrap --args N -- COMMAND...` as its command line, with no host path in it;
 *   6. with --channel, bubblewrap's stderr (which its init, pid 1, keeps) is a pipe to a relay, a
 *      child of ours: it passes the first RELAY_BUDGET bytes of what bubblewrap says while it sets
 *      the sandbox up ("bwrap: Can't bind mount ...") on to the server's stderr, and exits when the
 *      command tells it, over the handshake, that the setup is over (see --sync). No guest process
 *      exists before that, and after it nothing reads that pipe: a guest that takes pid 1's stderr
 *      writes into a pipe without a reader (EPIPE), not to the server.
 *
 *   Options of ours inside the bubblewrap options, rewritten on the way:
 *     --kt-bind SRC DEST     a read-write bind of a host path (staged as in 2, else --bind SRC DEST)
 *     --kt-ro-bind SRC DEST  the same, read-only
 *     --kt-user-bind T FD DEST, --kt-user-ro-bind T FD DEST
 *                            the user's own files (--mount): the object the server holds as FD (since
 *                            it started), copied out of template T with the deny rules mounted on it,
 *                            never found by a path a computer can change; with --uid the copy is
 *                            idmapped (mount_setattr MOUNT_ATTR_IDMAP) so that the owner of the
 *                            directory on disk is UID/GID through it: the sandbox can work on the
 *                            user's files, and what it creates there belongs, on disk, to its owner
 *     --kt-data DEST TEXT    a read-only file holding TEXT (a memfd given to --ro-bind-data)
 *     --kt-exec SRC DEST     a read-only executable copy of the host file SRC (--ro-bind-data), so
 *                            that the sandbox's mount table does not show where SRC lives
 *
 * Inner mode (inside the sandbox, in front of the agent):
 *
 *   kt-sandbox [--nproc N] [--sync FD] [--stdio IN OUT ERR] -- COMMAND [ARG...]
 *
 *   sets RLIMIT_NPROC (soft and hard) to N; with --sync tells the relay (outer step 6) over FD that
 *   bubblewrap is done and waits until the relay has let go of bubblewrap's stderr; with --stdio
 *   makes descriptors IN, OUT and ERR its stdin, stdout and stderr again; and execs COMMAND. Set
 *   inside the sandbox's user namespace, the process limit counts only that namespace's processes
 *   (Linux counts them per user namespace since 5.14), so it is a per-computer limit even when the
 *   server is not root.
 *
 * Template and engine modes (--make-templates, --engine-stage, --engine-unstage): see kt-sandbox/stage.c.
 *
 * Errors go to stderr as one line, `kt-sandbox: ...`, and the exit status is 125.
 */
#include "kt-sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/close_range.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define STAGE "/tmp"
#define STAGE_DIR "/tmp/.kt"
#define KEYCTL_JOIN_SESSION_KEYRING 1

/* What --channel hands through bubblewrap to the command (see --stdio and --sync). */
#define CHANNEL_IN 3
#define CHANNEL_OUT 4
#define AGENT_ERR 7
#define SYNC_FD 8
/* How much of bubblewrap's setup messages the relay passes on (outer step 6). */
#define RELAY_BUDGET 8192

extern char **environ;

void die(const char *fmt, ...) {
  va_list ap;
  int saved = errno;
  fputs("kt-sandbox: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (saved != 0) fprintf(stderr, ": %s", strerror(saved));
  fputc('\n', stderr);
  exit(125);
}

void fail(const char *fmt, ...) {
  va_list ap;
  fputs("kt-sandbox: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(125);
}

unsigned long parse_number(const char *text, const char *what, unsigned long max) {
  char *end;
  errno = 0;
  unsigned long value = strtoul(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value > max) fail("invalid %s '%s'", what, text);
  return value;
}

/* A growing NUL-separated argument list, written to the memfd that bwrap reads with --args. */
struct args { char *buf; size_t len, cap; };

static void add(struct args *a, const char *s) {
  size_t n = strlen(s) + 1;
  if (a->len + n > a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 4096;
    while (cap < a->len + n) cap *= 2;
    a->buf = realloc(a->buf, cap);
    if (a->buf == NULL) fail("out of memory");
    a->cap = cap;
  }
  memcpy(a->buf + a->len, s, n);
  a->len += n;
}

static void add_fd(struct args *a, int fd) {
  char text[16];
  snprintf(text, sizeof text, "%d", fd);
  add(a, text);
}

/* A memfd holding `len` bytes of `data`, left open across exec (bwrap closes it once read). */
static int memfd_with(const char *name, const char *data, size_t len) {
  int fd = memfd_create(name, 0);
  if (fd < 0) die("memfd_create");
  size_t done = 0;
  while (done < len) {
    ssize_t n = write(fd, data + done, len - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("writing a memfd");
    }
    done += (size_t)n;
  }
  if (lseek(fd, 0, SEEK_SET) < 0) die("lseek");
  return fd;
}

static void join_cgroup(const char *dir) {
  char path[PATH_MAX], pid[16];
  if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path) fail("cgroup path too long");
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open %s", path);
  int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
  if (write(fd, pid, (size_t)n) != n) die("cannot join the cgroup %s", dir);
  close(fd);
}

/* A private mount namespace: the host never sees the staging mounts (root only). */
static void private_mounts(void) {
  if (unshare(CLONE_NEWNS) < 0) die("cannot create a mount namespace");
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("cannot make the mounts private");
}

/* A tmpfs on /tmp (in the private namespace): the staging area for host paths. */
static void mount_stage(void) {
  if (mount("kt-stage", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") < 0) die("cannot mount the staging tmpfs");
  if (mkdir(STAGE_DIR, 0755) < 0) die("mkdir " STAGE_DIR);
}


/* An empty mountpoint at STAGE_DIR/N for a directory or a file; returns its path. */
static char *stage_point(int directory, int n) {
  char *to;
  if (asprintf(&to, STAGE_DIR "/%d", n) < 0) fail("out of memory");
  if (directory) {
    if (mkdir(to, 0755) < 0) die("mkdir %s", to);
  } else {
    int file = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (file < 0) die("creating %s", to);
    close(file);
  }
  return to;
}

/* Bind-mounts the host path open as `fd` at STAGE_DIR/N and returns that path. */
static char *stage(int fd, int n, const char *source) {
  char from[64], *to = stage_point(is_directory(fd), n);
  snprintf(from, sizeof from, "/proc/self/fd/%d", fd);
  if (mount(from, to, NULL, MS_BIND | MS_REC, NULL) < 0) die("cannot stage %s", source);
  close(fd);
  return to;
}

/* A user's directory: its copy out of the template (stage.c), with the deny rules on it. */
struct user_mount { int tree; struct stat st; };

/* Attaches the copy at STAGE_DIR/N, idmapped to UID/GID when the server is root; returns that path. */
static char *stage_user(struct user_mount *user, int n, const char *label, int idmap, long uid, long gid) {
  char *to = stage_point(S_ISDIR(user->st.st_mode), n);
  if (idmap) stage_idmapped(user->tree, &user->st, to, label, uid, gid);
  else if (syscall(SYS_move_mount, user->tree, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("cannot stage %s", label);
  close(user->tree);
  return to;
}

/* Every descriptor above 2 becomes close-on-exec (those the launcher hands on are made later). */
static void cloexec_inherited(void) {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) die("cannot list /proc/self/fd");
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    int fd = atoi(entry->d_name);
    if (fd > 2 && fd != dirfd(dir)) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  closedir(dir);
}

/* The relay's end of the setup handshake (outer step 6); -1 without --channel. */
static int relay_sync = -1;

/* Stdin, stdout and stderr move to CHANNEL_IN, CHANNEL_OUT and AGENT_ERR (inherited across exec);
 * /dev/null takes the place of stdin and stdout, while stderr stays ours for our own errors until
 * the relay takes it over; SYNC_FD becomes the command's end of the handshake. */
static void move_channel(void) {
  if (dup2(0, CHANNEL_IN) < 0 || dup2(1, CHANNEL_OUT) < 0 || dup2(2, AGENT_ERR) < 0) die("dup2");
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) die("open /dev/null");
  if (dup2(null, 0) < 0 || dup2(null, 1) < 0) die("dup2");
  close(null);
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) < 0) die("socketpair");
  /* The relay's end first goes above SYNC_FD, which it may hold now. */
  relay_sync = fcntl(ends[0], F_DUPFD_CLOEXEC, SYNC_FD + 1);
  if (relay_sync < 0) die("fcntl");
  close(ends[0]);
  if (ends[1] == SYNC_FD) {
    if (fcntl(SYNC_FD, F_SETFD, 0) < 0) die("fcntl");
  } else {
    if (dup2(ends[1], SYNC_FD) < 0) die("dup2");
    close(ends[1]);
  }
}

static void write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* the server is gone: nobody to tell */
    data += n;
    len -= (size_t)n;
  }
}

/*
 * The relay (outer step 6), in a child of ours: what bubblewrap says on `from` goes to our stderr
 * (the server's), at most RELAY_BUDGET bytes, until the handshake on `sync` says the setup is over.
 * Then it closes `from` before it answers, so that no guest, which can only exist after the answer,
 * ever has a reader at the other end of bubblewrap's stderr. Without a handshake (the command never
 * started: bubblewrap failed) it passes what bubblewrap says until every writer is gone.
 */
static void relay(int from, int sync) {
  char buf[4096];
  size_t passed = 0, dropped = 0;
  int waiting = 1;
  for (;;) {
    struct pollfd p[2] = { { .fd = from, .events = POLLIN }, { .fd = sync, .events = POLLIN } };
    if (poll(p, waiting ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[0].revents) {
      /* Everything bubblewrap said before the handshake is read before it. */
      ssize_t n = read(from, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      size_t take = passed < RELAY_BUDGET ? RELAY_BUDGET - passed : 0;
      if (take > (size_t)n) take = (size_t)n;
      write_all(2, buf, take);
      passed += take;
      dropped += (size_t)n - take;
      continue;
    }
    if (waiting && p[1].revents) {
      char byte;
      ssize_t n = recv(sync, &byte, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 1) {
        close(from);
        send(sync, &byte, 1, MSG_NOSIGNAL);
        break;
      }
      waiting = 0;
    }
  }
  if (dropped > 0) {
    char note[96];
    int len = snprintf(note, sizeof note, "kt-sandbox: %zu more bytes from bubblewrap not shown\n", dropped);
    write_all(2, note, (size_t)len);
  }
  _exit(0);
}

/* Starts the relay and makes bubblewrap's stderr the pipe it reads (outer step 6). */
static void start_relay(void) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) < 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    /* Only the pipe, the handshake and the server's stderr: the channel and bubblewrap's options
     * stay with bubblewrap. No parent-death signal: what bubblewrap said before it died must still
     * be passed on; the relay ends when the last writer of the pipe (bubblewrap, its init) is gone. */
    if (dup2(pipe_fds[0], 3) < 0 || dup2(relay_sync, 4) < 0) _exit(125);
    if (syscall(SYS_close_range, 5U, ~0U, 0) < 0) {
      for (int fd = 5; fd < 4096; fd++) close(fd);
    }
    relay(3, 4);
  }
  close(pipe_fds[0]);
  close(relay_sync);
  if (dup2(pipe_fds[1], 2) < 0) die("dup2");
  close(pipe_fds[1]);
}

/* Tells the relay (outer step 6) that bubblewrap's setup is over and waits until it has let go of
 * bubblewrap's stderr: only then may the command start guest processes. A relay that is gone
 * (EPIPE, end of file) has let go as well. */
static void setup_done(int fd) {
  char byte = 1;
  while (send(fd, &byte, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {}
  while (recv(fd, &byte, 1, 0) < 0 && errno == EINTR) {}
  close(fd);
}

static int is_bind(const char *arg) {
  return strcmp(arg, "--kt-bind") == 0 || strcmp(arg, "--kt-ro-bind") == 0;
}

static int is_user_bind(const char *arg) {
  return strcmp(arg, "--kt-user-bind") == 0 || strcmp(arg, "--kt-user-ro-bind") == 0;
}

static int inner(int argc, char **argv) {
  /* kt-sandbox [--nproc N] [--sync FD] [--stdio IN OUT ERR] -- COMMAND... */
  long limit = -1, sync = -1, stdio[3] = { -1, -1, -1 };
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--nproc") == 0 && i + 1 < argc) limit = (long)parse_number(argv[++i], "process limit", 1UL << 30);
    else if (strcmp(argv[i], "--sync") == 0 && i + 1 < argc) sync = (long)parse_number(argv[++i], "descriptor", 1 << 20);
    else if (strcmp(argv[i], "--stdio") == 0 && i + 3 < argc) {
      for (int k = 0; k < 3; k++) stdio[k] = (long)parse_number(argv[++i], "descriptor", 1 << 20);
    } else fail("unknown option '%s'", argv[i]);
  }
  if (i + 1 >= argc) fail("usage: kt-sandbox [--nproc N] [--sync FD] [--stdio IN OUT ERR] -- COMMAND [ARG...]");
  if (limit >= 0) {
    struct rlimit rl = { (rlim_t)limit, (rlim_t)limit };
    if (setrlimit(RLIMIT_NPROC, &rl) < 0) die("cannot set the process limit");
  }
  if (sync >= 0) setup_done((int)sync);
  if (stdio[0] >= 0) {
    for (int k = 0; k < 3; k++) {
      if (dup2((int)stdio[k], k) < 0) die("cannot take the channel");
    }
    for (int k = 0; k < 3; k++) {
      if (stdio[k] > 2) close((int)stdio[k]);
    }
  }
  execv(argv[i + 1], argv + i + 1);
  die("cannot run %s", argv[i + 1]);
  return 125;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--sync") == 0) return inner(argc, argv);
  if (argc >= 2 && (strcmp(argv[1], "--nproc") == 0 || strcmp(argv[1], "--stdio") == 0)) return inner(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--make-templates") == 0) return make_templates(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--engine-stage") == 0) return engine_stage(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "--engine-unstage") == 0) return engine_unstage(argc, argv);

  long uid = -1, gid = -1;
  struct templates templates = { .userns = -1, .mntns = -1 };
  int i = 1;
  pid_t parent = getppid();
  cloexec_inherited();
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--channel") == 0) move_channel();
    else if (strcmp(argv[i], "--uid") == 0 && i + 1 < argc) uid = (long)parse_number(argv[++i], "uid", 0xfffffffeUL);
    else if (strcmp(argv[i], "--gid") == 0 && i + 1 < argc) gid = (long)parse_number(argv[++i], "gid", 0xfffffffeUL);
    else if (strcmp(argv[i], "--cgroup") == 0 && i + 1 < argc) join_cgroup(argv[++i]);
    else if (!template_option(&templates, argc, argv, &i)) fail("unknown option '%s'", argv[i]);
  }
  if ((uid < 0) != (gid < 0)) fail("--uid and --gid go together");
  if (uid == 0 || gid == 0) fail("refusing to run the sandbox as root");
  if (++i >= argc) fail("usage: kt-sandbox [--uid UID --gid GID] [--cgroup DIR]... -- BWRAP [OPTION...] -- COMMAND...");
  const char *bwrap = argv[i++];
  int drop = uid > 0;
  if (drop && geteuid() != 0) fail("--uid needs root");

  /* Open the host paths in the private namespace (a bind needs a mount of this namespace), before
   * the staging tmpfs hides what the host has under /tmp; then stage them. The user's directories
   * come from the templates (stage.c): the private namespace is then a copy of theirs. */
  int staging = drop || templates.mntns >= 0;
  if (templates.mntns >= 0) join_templates(&templates);
  if (staging) private_mounts();
  int first = i, end = i;
  while (end < argc && strcmp(argv[end], "--") != 0) end++;
  if (end >= argc - 1) fail("no command after the bubblewrap options");
  int *fds = calloc((size_t)argc, sizeof(int));
  struct user_mount *users = calloc((size_t)argc, sizeof(struct user_mount));
  if (fds == NULL || users == NULL) fail("out of memory");
  /* The user's directories first, copied out of their templates; then the templates' tmpfs goes,
   * and /tmp shows the host's again for the host paths below. */
  for (int j = first; j < end; j++) {
    if (!is_user_bind(argv[j])) continue;
    if (templates.mntns < 0) fail("%s needs --templates", argv[j]);
    if (j + 3 >= end) fail("%s takes TEMPLATE, FD and DEST", argv[j]);
    char label[PATH_MAX + 32];
    snprintf(label, sizeof label, "the mount at %s", argv[j + 3]);
    int obj = template_object(&templates, argv[j + 1], argv[j + 2], label);
    if (fstat(obj, &users[j].st) < 0) die("fstat");
    users[j].tree = clone_tree(obj, label);
    close(obj);
    j += 3;
  }
  if (templates.mntns >= 0 && umount2("/tmp", MNT_DETACH) < 0) die("cannot set the templates aside");
  for (int j = first; j < end; j++) {
    fds[j] = -1;
    if (is_user_bind(argv[j])) {
      j += 3;
    } else if (is_bind(argv[j]) && j + 2 < end) {
      if (staging) {
        fds[j] = open(argv[j + 1], O_PATH | O_CLOEXEC);
        if (fds[j] < 0) die("cannot open %s", argv[j + 1]);
      }
      j += 2;
    } else if (strcmp(argv[j], "--kt-exec") == 0 && j + 2 < end) {
      fds[j] = open(argv[j + 1], O_RDONLY | O_CLOEXEC);
      if (fds[j] < 0) die("cannot open %s", argv[j + 1]);
      j += 2;
    } else if (strcmp(argv[j], "--kt-data") == 0) {
      j += 2;
    }
  }
  if (staging) mount_stage();

  struct args options = { 0 };
  int staged = 0;
  for (int j = first; j < end; j++) {
    const char *arg = argv[j];
    int ro = strcmp(arg, "--kt-ro-bind") == 0 || strcmp(arg, "--kt-user-ro-bind") == 0;
    if (is_user_bind(arg)) {
      if (j + 3 >= end) fail("%s takes TEMPLATE, FD and DEST", arg);
      add(&options, ro ? "--ro-bind" : "--bind");
      char *path = stage_user(&users[j], staged++, argv[j + 3], drop, uid, gid);
      add(&options, path);
      free(path);
      add(&options, argv[j + 3]);
      j += 3;
    } else if (is_bind(arg)) {
      if (j + 2 >= end) fail("%s takes SRC and DEST", arg);
      add(&options, ro ? "--ro-bind" : "--bind");
      if (staging) {
        char *path = stage(fds[j], staged++, argv[j + 1]);
        add(&options, path);
        free(path);
      } else {
        add(&options, argv[j + 1]);
      }
      add(&options, argv[j + 2]);
      j += 2;
    } else if (strcmp(arg, "--kt-exec") == 0) {
      if (j + 2 >= end) fail("--kt-exec takes SRC and DEST");
      if (fcntl(fds[j], F_SETFD, 0) < 0) die("fcntl");
      add(&options, "--perms");
      add(&options, "0555");
      add(&options, "--ro-bind-data");
      add_fd(&options, fds[j]);
      add(&options, argv[j + 2]);
      j += 2;
    } else if (strcmp(arg, "--kt-data") == 0) {
      if (j + 2 >= end) fail("--kt-data takes DEST and TEXT");
      int fd = memfd_with("kt-data", argv[j + 2], strlen(argv[j + 2]));
      add(&options, "--ro-bind-data");
      add_fd(&options, fd);
      add(&options, argv[j + 1]);
      j += 2;
    } else {
      add(&options, arg);
    }
  }
  free(fds);
  free(users);
  int options_fd = memfd_with("bwrap-args", options.buf, options.len);
  free(options.buf);

  if (drop) {
    if (setgroups(0, NULL) < 0) die("setgroups");
    if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0) die("setresgid %ld", gid);
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0) die("setresuid %ld", uid);
    uid_t r, e, s;
    if (getresuid(&r, &e, &s) < 0 || r != (uid_t)uid || e != (uid_t)uid || s != (uid_t)uid) fail("could not become uid %ld", uid);
    /* The server's working directory may be out of the unprivileged user's reach. */
    if (chdir("/") < 0) die("chdir /");
  }
  /* A new anonymous session keyring owned by the sandbox's user. ENOSYS/EPERM: keyrings are not
   * available to this process (a seccomp filter, say), and so not to the sandbox either. */
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS && errno != EPERM) {
    die("cannot join a new session keyring");
  }
  /* Changing ids cleared the parent-death signal: set it again, then make sure the server is still there. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("prctl");
  if (getppid() != parent) fail("the server went away");

  if (relay_sync >= 0) start_relay();

  char **exec_argv = calloc((size_t)(argc - end + 4), sizeof(char *));
  if (exec_argv == NULL) fail("out of memory");
  char fd_text[16];
  snprintf(fd_text, sizeof fd_text, "%d", options_fd);
  int k = 0;
  exec_argv[k++] = "bwrap";
  exec_argv[k++] = "--args";
  exec_argv[k++] = fd_text;
  for (int j = end; j < argc; j++) exec_argv[k++] = argv[j];
  exec_argv[k] = NULL;
  execve(bwrap, exec_argv, environ);
  die("cannot run %s", bwrap);
  return 125;
}
