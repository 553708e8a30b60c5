/*
 * kt-agent --connect PATH: the connector. Where the server cannot reach the agent's socket itself (a
 * container: the server reaches it through an Engine exec), it runs this, which connects to the
 * socket and copies bytes both ways between it and its own stdin/stdout until either side ends. It
 * holds no secret and understands nothing: the server proves the computer's key to the agent through
 * it (conn.c), so a guest that starts, kills or impersonates a connector gains nothing. Non-dumpable
 * like the agent, so a guest cannot ptrace it to inject frames into an attached server's stream.
 */
#include "agent.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define BUF (256 * 1024)

static char up[BUF], down[BUF];

/* Writes everything, blocking; -1 when the other side is gone. */
static int put_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int connector_main(const char *path) {
  prctl(PR_SET_DUMPABLE, 0);
  signal(SIGPIPE, SIG_IGN);
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (strlen(path) >= sizeof sa.sun_path) { fprintf(stderr, "kt-agent: socket path too long\n"); _exit(2); }
  strcpy(sa.sun_path, path);
  int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof sa) < 0) {
    fprintf(stderr, "kt-agent: cannot reach the computer's agent at %s: %s\n", path, strerror(errno));
    _exit(2);
  }
  int in_open = 1;
  for (;;) {
    struct pollfd pf[2] = { { in_open ? 0 : -1, POLLIN, 0 }, { sock, POLLIN, 0 } };
    if (poll(pf, 2, -1) < 0) { if (errno == EINTR) continue; _exit(1); }
    if (pf[0].revents) {
      ssize_t n = read(0, up, sizeof up);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) { in_open = 0; shutdown(sock, SHUT_WR); }
      else if (put_all(sock, up, (size_t)n) < 0) _exit(0);
    }
    if (pf[1].revents) {
      ssize_t n = read(sock, down, sizeof down);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) _exit(0);
      if (put_all(1, down, (size_t)n) < 0) _exit(0);
    }
  }
}
