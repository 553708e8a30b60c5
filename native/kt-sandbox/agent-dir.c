/*
 * kt-sandbox --agent-dir DIR: what a host computer's agent needs from the host side, opened here,
 * outside the sandbox, and handed in as descriptors, so that no path inside the sandbox leads to them:
 *
 *   DIR/agent.lock   flock'd (exclusive, non-blocking) and held by the agent for its life: a second
 *                    launch for the same computer exits with status 3 ("already running");
 *   DIR/agent.sock   the agent's listening socket (0600, bound here: the server's side reaches it,
 *                    the guests' view has no path to it);
 *   DIR/store        the agent's store (its retained output and next handle), owned by the
 *                    computer's uid when the server is root.
 * They become descriptors 4 (the socket, in the place of the channel's output: `--stdio 3 4` makes it
 * the agent's stdout, hence `kt-agent --listen-fd 1`), 900 (the store: `--store-fd 900`) and 901
 * (the lock), far out of the way of the launcher's own (3, 4, 7, 8, and what the server hands on from 9).
 * Needs --channel before it (stdin, the key, is then descriptor 3).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent-dir.h"

/* Far above the descriptors the server hands kt-sandbox (HandedDescriptors.ts: from 9 on). */
#define STORE_FD 900
#define LOCK_FD 901

static void die_errno(const char *what) {
  fprintf(stderr, "kt-sandbox: %s: %s\n", what, strerror(errno));
  exit(125);
}

/* Above the descriptors it fills, so that placing one never closes another. */
static int high(int fd) {
  if (fd < 0) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 910);
  if (moved < 0) die_errno("fcntl");
  close(fd);
  return moved;
}

static void place(int fd, int at) {
  if (fd == at) { fcntl(fd, F_SETFD, 0); return; }
  if (dup2(fd, at) < 0) die_errno("dup2");
  close(fd);
}

void agent_dir(const char *dir, long uid, long gid) {
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s/agent.sock", dir) >= (int)sizeof sa.sun_path) {
    fprintf(stderr, "kt-sandbox: the agent's socket path is too long: %s/agent.sock\n", dir);
    exit(125);
  }
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) die_errno("cannot open the computer's directory");
  int lock = high(openat(dfd, "agent.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (lock < 0) die_errno("cannot open the agent's lock");
  if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
    if (errno == EWOULDBLOCK) {
      fprintf(stderr, "kt-sandbox: the computer's agent is already running\n");
      exit(3);
    }
    die_errno("cannot lock the agent's lock");
  }
  if (unlinkat(dfd, "agent.sock", 0) < 0 && errno != ENOENT) die_errno("cannot remove the old socket");
  int sock = high(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  mode_t old = umask(0077);
  if (sock < 0 || bind(sock, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(sock, 64) < 0) die_errno("cannot listen for the agent");
  umask(old);
  if (mkdirat(dfd, "store", 0700) < 0 && errno != EEXIST) die_errno("cannot create the agent's store");
  int store = high(openat(dfd, "store", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (store < 0) die_errno("cannot open the agent's store");
  if (uid >= 0 && fchown(store, (uid_t)uid, (gid_t)gid) < 0) die_errno("cannot give the store to the computer's uid");
  close(dfd);
  place(sock, 4);
  place(store, STORE_FD);
  place(lock, LOCK_FD);
}
