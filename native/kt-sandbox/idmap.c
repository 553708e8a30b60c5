/*
 * kt-sandbox: idmapped mounts, so that a computer of a root server (a dedicated unprivileged uid)
 * works on the user's files as their owner (see kt-sandbox.c, --kt-user-bind).
 */
#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open %s", path);
  ssize_t n = write(fd, text, strlen(text));
  if (n != (ssize_t)strlen(text)) die("cannot write %s", path);
  close(fd);
}

/* A user namespace whose only mapping is `from` (the files' owner on disk) → `to` (the sandbox's
 * uid/gid): given to MOUNT_ATTR_IDMAP, files of `from` show as `to` through the mount, and files
 * `to` creates are written as `from`. Made by a child that waits in it while its maps are written. */
static int idmap_userns(uid_t from_uid, gid_t from_gid, long to_uid, long to_gid) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    char byte;
    if (unshare(CLONE_NEWUSER) < 0) _exit(1);
    close(ready[1]);
    /* Told to go (or orphaned) when the parent has what it needs. */
    while (read(ready[0], &byte, 1) < 0 && errno == EINTR) {}
    _exit(0);
  }
  close(ready[0]);
  char path[64], map[96];
  /* Wait until the child is in its own user namespace. */
  char mine[64], theirs[64];
  ssize_t a = readlink("/proc/self/ns/user", mine, sizeof mine - 1);
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
  for (int tries = 0; tries < 2000; tries++) {
    ssize_t b = readlink(path, theirs, sizeof theirs - 1);
    if (a > 0 && b > 0 && (a != b || memcmp(mine, theirs, (size_t)a) != 0)) break;
    usleep(500);
  }
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
  snprintf(map, sizeof map, "%u %ld 1\n", (unsigned)from_uid, to_uid);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
  snprintf(map, sizeof map, "%u %ld 1\n", (unsigned)from_gid, to_gid);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open %s", path);
  close(ready[1]);
  int status;
  waitpid(child, &status, 0);
  return fd;
}

/* Mounts the detached `tree` at `to`, idmapped from the owner of its root to UID/GID (see idmap_userns). */
void stage_idmapped(int tree, const struct stat *owner, const char *to, const char *source, long uid, long gid) {
  struct stat st = *owner;
  int userns = idmap_userns(st.st_uid, st.st_gid, uid, gid);
  struct kt_mount_attr attr = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (unsigned long long)userns };
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) {
    die("cannot map the owner of %s (uid %u) to the computer's uid: a filesystem in it has no idmapped mounts "
        "(--deny-read inside a mount hides with tmpfs, which has them since Linux 6.3)", source, (unsigned)st.st_uid);
  }
  close(userns);
  if (syscall(SYS_move_mount, tree, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH) < 0) die("cannot stage %s", source);
}

