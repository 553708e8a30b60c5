/*
 * kt-exec: the host-side end of a kilntainers TTY process.
 *
 * The server starts it on a real pseudo-terminal (node-pty) as
 *   kt-exec <agent-socket-path> <processId> <nonce>
 * It passes its terminal (fd 0) to the computer's kt-agent over the agent's unix socket; the
 * agent starts the process inside the sandbox on a terminal of its own and relays the bytes.
 * kt-exec stays the session leader of the host terminal, so window size changes (SIGWINCH after
 * node-pty's resize) reach it and are forwarded; when the agent reports the exit status, kt-exec
 * exits with the same code or dies of the same signal.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#define NONCE_LEN 32
#define HELLO_MAGIC 0x6b746531u

static void put32(char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static void put16(char *p, unsigned v) { p[0] = v; p[1] = v >> 8; }
static uint32_t get32(const char *p) {
  const unsigned char *u = (const unsigned char *)p;
  return u[0] | (u[1] << 8) | (u[2] << 16) | ((uint32_t)u[3] << 24);
}

static void fail(const char *what) {
  fprintf(stderr, "kt-exec: %s: %s\r\n", what, strerror(errno));
  exit(126);
}

static void window(unsigned *cols, unsigned *rows) {
  struct winsize ws = { 0 };
  ioctl(0, TIOCGWINSZ, &ws);
  *cols = ws.ws_col;
  *rows = ws.ws_row;
}

int main(int argc, char **argv) {
  if (argc != 4 || strlen(argv[3]) != NONCE_LEN) {
    fprintf(stderr, "usage: kt-exec <agent-socket> <process-id> <nonce>\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGWINCH);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC);
  if (sfd < 0) fail("signalfd");

  /* sun_path holds 108 bytes: connect relative to the socket's directory. */
  char *path = argv[1];
  char *slash = strrchr(path, '/');
  const char *base = path;
  if (slash) {
    *slash = 0;
    if (chdir(slash == path ? "/" : path) < 0) fail("cannot enter the agent directory");
    base = slash + 1;
  }
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  if (strlen(base) >= sizeof sa.sun_path) { errno = ENAMETOOLONG; fail("agent socket"); }
  strcpy(sa.sun_path, base);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) fail("socket");
  if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) fail("cannot reach the computer's agent");
  if (chdir("/") < 0) { /* nothing kept busy */ }

  char hello[4 + 4 + NONCE_LEN + 4];
  unsigned cols, rows;
  window(&cols, &rows);
  put32(hello, HELLO_MAGIC);
  put32(hello + 4, (uint32_t)strtoul(argv[2], NULL, 10));
  memcpy(hello + 8, argv[3], NONCE_LEN);
  put16(hello + 40, cols);
  put16(hello + 42, rows);
  struct iovec iov = { hello, sizeof hello };
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  int fd0 = 0;
  memcpy(CMSG_DATA(cm), &fd0, sizeof fd0);
  if (sendmsg(s, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof hello) fail("cannot pass the terminal to the agent");

  char st[8];
  size_t got = 0;
  struct pollfd pf[2] = { { s, POLLIN, 0 }, { sfd, POLLIN, 0 } };
  for (;;) {
    if (poll(pf, 2, -1) < 0) { if (errno == EINTR) continue; fail("poll"); }
    if (pf[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) < 0 && errno == EINTR) {}
      char msg[8];
      window(&cols, &rows);
      put32(msg, HELLO_MAGIC + 1);
      put16(msg + 4, cols);
      put16(msg + 6, rows);
      (void)!send(s, msg, sizeof msg, MSG_NOSIGNAL);
    }
    if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(s, st + got, sizeof st - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 255; /* the agent went away without a status */
      got += n;
      if (got == sizeof st) break;
    }
  }
  uint32_t kind = get32(st), value = get32(st + 4);
  if (kind == 1) {
    signal((int)value, SIG_DFL);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
    raise((int)value);
    return 128 + (int)value;
  }
  return (int)value;
}
