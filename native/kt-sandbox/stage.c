/*
 * kt-sandbox: the user's own directories (--mount) as mount templates, so that a computer gets the
 * very objects the server resolved when it started, with the deny rules attached to the objects
 * themselves, and no host path inside a directory a computer can write is ever walked again.
 *
 * The server opens each mount source and each deny target once, at startup (O_PATH, without
 * following any symlink a computer could have made), and holds the descriptors. From them:
 *
 *   kt-sandbox --make-templates [--userns] [--source FD LABEL]... [--deny-write T FD LABEL]...
 *              [--deny-read T FD LABEL]...
 *
 *   makes a mount namespace of its own (in a user namespace of its own with --userns: the server is
 *   not root), slave to the host's, with a tmpfs on /tmp holding template N at TEMPLATE_DIR/N: a
 *   recursive bind of source N. Each deny target, found below its template by the path its
 *   descriptor has now, without following symlinks, and checked to be the held object (device and
 *   inode), gets there, in the template: --deny-write a read-only bind of itself, --deny-read an
 *   empty read-only tmpfs (a directory) or an empty read-only file. Mounts stay on their dentries
 *   whatever is renamed around them, so the rules follow their objects for as long as the
 *   namespace lives. It says `ready` on stdout and waits for its stdin to close: meanwhile the
 *   server opens /proc/PID/ns/{user,mnt}, which keeps the namespace alive after it exits.
 *
 * A computer's sandbox (kt-sandbox.c: --templates USERNS MNTNS --source FD LABEL... and, among
 * bubblewrap's options, --kt-user-bind T FD DEST) joins that namespace, makes a private copy of it
 * and clones, for each mount, the subtree of template T at the held object FD: a source nested in
 * another one is found inside its template (it may have been moved there), so the deny rules of the
 * enclosing template come with it.
 *
 * For container engines (Docker, Podman), which bind a host path themselves at every start:
 *
 *   kt-sandbox --engine-stage --templates - MNTNS [--source FD LABEL]... -- [PATH T FD LABEL]...
 *   kt-sandbox --engine-unstage PATH...
 *
 *   the first attaches each clone at PATH in the host's mount namespace (root only) for the engine
 *   to bind; the second unmounts PATHs and removes them when they are empty.
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

/* A rename racing a lookup is retried this many times (a guest renaming in a loop cannot win them all). */
#define ATTEMPTS 400

int is_directory(int fd) {
  struct stat st;
  if (fstat(fd, &st) < 0) die("fstat");
  return S_ISDIR(st.st_mode);
}

/* The path the kernel gives the object open as `fd` now; -1 with errno when it has none that fits. */
static int path_of(int fd, char *buf, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, buf, size - 1);
  if (n < 0) return -1;
  if ((size_t)n >= size - 1) {
    errno = ENAMETOOLONG;
    return -1;
  }
  buf[n] = '\0';
  return 0;
}

/* `path` relative to `base` ("" when equal), or NULL when it is not below it. */
static const char *below(const char *base, const char *path) {
  size_t n = strlen(base);
  if (strcmp(base, path) == 0) return "";
  if (strcmp(base, "/") == 0) return path[0] == '/' ? path + 1 : NULL;
  if (strncmp(base, path, n) == 0 && path[n] == '/') return path + n + 1;
  return NULL;
}

/* `rel` below the directory `dir`, never leaving it and following no symlink at all. */
static int open_beneath(int dir, const char *rel) {
  if (rel[0] == '\0') return fcntl(dir, F_DUPFD_CLOEXEC, 3);
  struct open_how how = {
    .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
  };
  long fd = syscall(SYS_openat2, dir, rel, &how, sizeof how);
  if (fd < 0 && errno == ENOSYS) fail("this kernel has no openat2 (Linux 5.6+ is needed for --mount)");
  return (int)fd;
}

/*
 * The object held as `obj` (opened by the server, maybe in another mount namespace), found below
 * `base` (a directory of this namespace that shows the held object `base_of`) by the path the kernel
 * gives `obj` now, and checked to be that very object. A rename racing the lookup is retried; an
 * object that is gone or has left `base_of` refuses the start, naming `label`.
 */
static int locate(int base, int base_of, int obj, const char *label) {
  struct stat want, got;
  if (fstat(obj, &want) < 0) die("%s: fstat", label);
  if (want.st_nlink == 0) fail("%s: the host object was removed", label);
  char root[PATH_MAX], path[PATH_MAX];
  for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
    if (attempt > 50) usleep(1000);
    if (path_of(base_of, root, sizeof root) < 0 || path_of(obj, path, sizeof path) < 0) {
      if (errno == ENAMETOOLONG) fail("%s: its host path is now longer than %d bytes; it cannot be found", label, PATH_MAX);
      die("%s: readlink", label);
    }
    const char *rel = below(root, path);
    if (rel == NULL) continue;
    int fd = open_beneath(base, rel);
    if (fd < 0) continue;
    if (fstat(fd, &got) == 0 && got.st_dev == want.st_dev && got.st_ino == want.st_ino) return fd;
    close(fd);
  }
  if (fstat(obj, &want) == 0 && want.st_nlink == 0) fail("%s: the host object was removed", label);
  fail("%s: the host object is no longer below %s, or keeps being moved", label, root);
}

int clone_tree(int fd, const char *label) {
  int tree = (int)syscall(SYS_open_tree, fd, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | AT_RECURSIVE | O_CLOEXEC);
  if (tree < 0 && errno == ENOSYS) fail("this kernel has no open_tree (Linux 5.12+ is needed for --mount)");
  if (tree < 0) die("%s: cannot copy its mount", label);
  return tree;
}

static void set_attributes(int tree, unsigned long long attributes, const char *label) {
  struct kt_mount_attr attr = { .attr_set = attributes };
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) {
    if (errno == ENOSYS) fail("this kernel has no mount_setattr (Linux 5.12+ is needed for --mount)");
    die("%s: cannot make it read-only", label);
  }
}

static void attach(int tree, int dfd, const char *path, const char *label) {
  unsigned flags = MOVE_MOUNT_F_EMPTY_PATH | (path[0] == '\0' ? MOVE_MOUNT_T_EMPTY_PATH : 0);
  if (syscall(SYS_move_mount, tree, "", dfd, path, flags) < 0) die("%s: cannot attach its mount", label);
  close(tree);
}

/* An empty mountpoint of the object's kind at `path` (one already there is kept). */
static void mountpoint(const char *path, int directory, mode_t mode) {
  if (directory) {
    if (mkdir(path, mode) < 0 && errno != EEXIST) die("mkdir %s", path);
    return;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) die("creating %s", path);
  close(fd);
}

int template_option(struct templates *t, int argc, char **argv, int *i) {
  if (strcmp(argv[*i], "--templates") == 0 && *i + 2 < argc) {
    t->userns = strcmp(argv[*i + 1], "-") == 0 ? -1 : (int)parse_number(argv[*i + 1], "descriptor", 1 << 20);
    t->mntns = (int)parse_number(argv[*i + 2], "descriptor", 1 << 20);
    *i += 2;
    return 1;
  }
  if (strcmp(argv[*i], "--source") == 0 && *i + 2 < argc) {
    if (t->count >= MAX_SOURCES) fail("too many --source options");
    t->source[t->count] = (int)parse_number(argv[*i + 1], "descriptor", 1 << 20);
    t->label[t->count++] = argv[*i + 2];
    *i += 2;
    return 1;
  }
  return 0;
}

void join_templates(const struct templates *t) {
  if (t->userns >= 0 && setns(t->userns, CLONE_NEWUSER) < 0) die("cannot join the templates' user namespace");
  if (setns(t->mntns, CLONE_NEWNS) < 0) die("cannot join the templates' mount namespace");
}

int template_object(const struct templates *t, const char *index, const char *fd, const char *label) {
  int n = (int)parse_number(index, "template", MAX_SOURCES - 1);
  if (n >= t->count) fail("%s: no template %d", label, n);
  char path[64];
  snprintf(path, sizeof path, TEMPLATE_DIR "/%d", n);
  int base = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (base < 0) die("%s: cannot open its template", label);
  int obj = locate(base, t->source[n], (int)parse_number(fd, "descriptor", 1 << 20), label);
  close(base);
  return obj;
}

/* --deny-write: a read-only bind of the object onto itself (what is below it stays as it is). */
static void deny_write(int obj, const char *label) {
  int tree = clone_tree(obj, label);
  set_attributes(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, label);
  attach(tree, obj, "", label);
}

/* --deny-read: an empty read-only tmpfs over a directory, an empty read-only file over a file. */
static void deny_read(int obj, const char *label) {
  if (is_directory(obj)) {
    char target[64];
    snprintf(target, sizeof target, "/proc/self/fd/%d", obj);
    if (mount("kt-deny", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k") < 0) {
      die("%s: cannot hide it", label);
    }
    return;
  }
  int tree = (int)syscall(SYS_open_tree, AT_FDCWD, TEMPLATE_DIR "/empty", OPEN_TREE_CLONE | O_CLOEXEC);
  if (tree < 0) die("%s: cannot hide it", label);
  set_attributes(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, label);
  attach(tree, obj, "", label);
}

int make_templates(int argc, char **argv) {
  struct templates t = { .userns = -1, .mntns = -1 };
  struct { int write, template, fd; const char *label; } deny[MAX_SOURCES * 4];
  int denies = 0, userns = 0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--userns") == 0) userns = 1;
    else if (template_option(&t, argc, argv, &i)) continue;
    else if ((strcmp(argv[i], "--deny-write") == 0 || strcmp(argv[i], "--deny-read") == 0) && i + 3 < argc) {
      if (denies >= (int)(sizeof deny / sizeof deny[0])) fail("too many deny rules");
      deny[denies].write = argv[i][7] == 'w';
      deny[denies].template = (int)parse_number(argv[i + 1], "template", MAX_SOURCES - 1);
      deny[denies].fd = (int)parse_number(argv[i + 2], "descriptor", 1 << 20);
      deny[denies++].label = argv[i + 3];
      i += 3;
    } else fail("unknown option '%s'", argv[i]);
  }
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (userns) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) die("cannot create a user and mount namespace for the templates");
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
    write_file("/proc/self/gid_map", map);
  } else {
    if (geteuid() != 0) fail("--make-templates without --userns needs root");
    if (unshare(CLONE_NEWNS) < 0) die("cannot create a mount namespace for the templates");
  }
  /* Mounts the host makes later still reach this namespace; nothing made here reaches the host. */
  if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0) die("cannot make the templates' mounts private");
  int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) die("open /");
  /* The sources as objects of this namespace, found before the tmpfs hides what the host has in /tmp. */
  int objects[MAX_SOURCES];
  for (int n = 0; n < t.count; n++) objects[n] = locate(root, root, t.source[n], t.label[n]);
  if (mount("kt-templates", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64k") < 0) {
    die("cannot mount the templates' tmpfs");
  }
  if (mkdir(TEMPLATE_DIR, 0700) < 0) die("mkdir " TEMPLATE_DIR);
  mountpoint(TEMPLATE_DIR "/empty", 0, 0444);
  for (int n = 0; n < t.count; n++) {
    char path[64];
    snprintf(path, sizeof path, TEMPLATE_DIR "/%d", n);
    mountpoint(path, is_directory(objects[n]), 0700);
    attach(clone_tree(objects[n], t.label[n]), AT_FDCWD, path, t.label[n]);
    close(objects[n]);
  }
  for (int d = 0; d < denies; d++) {
    char index[16], fd[16];
    snprintf(index, sizeof index, "%d", deny[d].template);
    snprintf(fd, sizeof fd, "%d", deny[d].fd);
    int obj = template_object(&t, index, fd, deny[d].label);
    if (deny[d].write) deny_write(obj, deny[d].label);
    else deny_read(obj, deny[d].label);
    close(obj);
  }
  if (write(1, "ready\n", 6) != 6) die("write");
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) {}
  return 0;
}

int engine_stage(int argc, char **argv) {
  struct templates t = { .userns = -1, .mntns = -1 };
  int i = 2;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (!template_option(&t, argc, argv, &i)) fail("unknown option '%s'", argv[i]);
  }
  if (t.mntns < 0 || t.userns >= 0) fail("--engine-stage takes --templates - MNTNS");
  if (geteuid() != 0) fail("--engine-stage needs root");
  int count = (argc - i - 1) / 4;
  if (i >= argc || (argc - i - 1) % 4 != 0 || count > MAX_SOURCES) fail("usage: --engine-stage ... -- [PATH T FD LABEL]...");
  int host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (host < 0) die("open /proc/self/ns/mnt");
  join_templates(&t);
  int trees[MAX_SOURCES], directory[MAX_SOURCES];
  for (int k = 0; k < count; k++) {
    char **spec = argv + i + 1 + 4 * k;
    int obj = template_object(&t, spec[1], spec[2], spec[3]);
    directory[k] = is_directory(obj);
    trees[k] = clone_tree(obj, spec[3]);
    close(obj);
  }
  if (setns(host, CLONE_NEWNS) < 0) die("cannot return to the host's mount namespace");
  for (int k = 0; k < count; k++) {
    char **spec = argv + i + 1 + 4 * k;
    if (spec[0][0] != '/') fail("%s: the staging path must be absolute", spec[3]);
    mountpoint(spec[0], directory[k], 0700);
    attach(trees[k], AT_FDCWD, spec[0], spec[3]);
  }
  return 0;
}

int engine_unstage(int argc, char **argv) {
  for (int i = 2; i < argc; i++) {
    const char *path = argv[i];
    if (path[0] != '/') fail("the staging path '%s' must be absolute", path);
    /* Staged more than once (a crash between two starts): every layer goes. */
    for (int layer = 0; layer < 16 && umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; layer++) {}
    if (errno != EINVAL && errno != ENOENT) die("cannot unmount %s", path);
    struct stat st;
    if (lstat(path, &st) < 0) continue;
    /* Only what staging made: an empty directory or an empty file (a mount still there refuses both). */
    if (S_ISDIR(st.st_mode)) rmdir(path);
    else if (S_ISREG(st.st_mode) && st.st_size == 0) unlink(path);
  }
  return 0;
}
