/*
 * kilntainers: the functions wasi-libc (2022) lacks, for tools built for wasm32-wasi. WASI has no
 * users, groups, permissions, signals, mounts or file watching: these answer "nothing" or fail with
 * ENOSYS/ENOTSUP. chmod succeeds without effect (WASI has no permission bits) when the file exists.
 *
 * The working directory: WASI has none, wasi-libc starts in "/". The kilntainers shell passes the
 * process's working directory in PWD, so a constructor changes to it before main.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <mntent.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/inotify.h>
#include <unistd.h>

__attribute__((constructor)) static void kt_start_in_pwd(void) {
  const char *pwd = getenv("PWD");
  if (pwd != NULL && pwd[0] == '/') chdir(pwd);
}

static int exists_at(int dirfd, const char *path) {
  struct stat st;
  return fstatat(dirfd, path, &st, 0) == 0 ? 0 : -1;
}

int fchmodat(int dirfd, const char *path, mode_t mode, int flags) { (void)mode; (void)flags; return exists_at(dirfd, path); }
int chmod(const char *path, mode_t mode) { return fchmodat(AT_FDCWD, path, mode, 0); }
int fchmod(int fd, mode_t mode) { struct stat st; (void)mode; return fstat(fd, &st); }
int fchown(int fd, uid_t uid, gid_t gid) { (void)fd; (void)uid; (void)gid; errno = EPERM; return -1; }
int fchownat(int dirfd, const char *path, uid_t uid, gid_t gid, int flags) { (void)dirfd; (void)path; (void)uid; (void)gid; (void)flags; errno = EPERM; return -1; }
int lchown(const char *path, uid_t uid, gid_t gid) { return fchownat(AT_FDCWD, path, uid, gid, 0); }
int chown(const char *path, uid_t uid, gid_t gid) { return fchownat(AT_FDCWD, path, uid, gid, 0); }
mode_t umask(mode_t mask) { (void)mask; return 022; }

int getpwuid_r(uid_t uid, struct passwd *pw, char *buf, size_t len, struct passwd **result) { (void)uid; (void)pw; (void)buf; (void)len; *result = NULL; return 0; }
int getpwnam_r(const char *name, struct passwd *pw, char *buf, size_t len, struct passwd **result) { (void)name; (void)pw; (void)buf; (void)len; *result = NULL; return 0; }
int getgrgid_r(gid_t gid, struct group *gr, char *buf, size_t len, struct group **result) { (void)gid; (void)gr; (void)buf; (void)len; *result = NULL; return 0; }
int getgrnam_r(const char *name, struct group *gr, char *buf, size_t len, struct group **result) { (void)name; (void)gr; (void)buf; (void)len; *result = NULL; return 0; }
struct passwd *getpwuid(uid_t uid) { (void)uid; return NULL; }
struct passwd *getpwnam(const char *name) { (void)name; return NULL; }
struct group *getgrgid(gid_t gid) { (void)gid; return NULL; }
struct group *getgrnam(const char *name) { (void)name; return NULL; }
uid_t getuid(void) { return 0; }
uid_t geteuid(void) { return 0; }
gid_t getgid(void) { return 0; }
gid_t getegid(void) { return 0; }
int getgroups(int size, gid_t *list) { (void)size; (void)list; return 0; }

int sigfillset(sigset_t *set) { memset(set, 0xff, sizeof *set); return 0; }
int sigemptyset(sigset_t *set) { memset(set, 0, sizeof *set); return 0; }
int sigaddset(sigset_t *set, int sig) { (void)set; (void)sig; return 0; }
int sigdelset(sigset_t *set, int sig) { (void)set; (void)sig; return 0; }
int sigismember(const sigset_t *set, int sig) { (void)set; (void)sig; return 0; }
int sigprocmask(int how, const sigset_t *set, sigset_t *old) { (void)how; (void)set; if (old) memset(old, 0, sizeof *old); return 0; }
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) { (void)sig; (void)act; if (old) memset(old, 0, sizeof *old); return 0; }

int statvfs(const char *path, struct statvfs *st) { (void)path; (void)st; errno = ENOSYS; return -1; }
int fstatvfs(int fd, struct statvfs *st) { (void)fd; (void)st; errno = ENOSYS; return -1; }
FILE *setmntent(const char *path, const char *mode) { (void)path; (void)mode; errno = ENOENT; return NULL; }
struct mntent *getmntent(FILE *fp) { (void)fp; return NULL; }
int endmntent(FILE *fp) { (void)fp; return 1; }
int inotify_init(void) { errno = ENOSYS; return -1; }
int inotify_add_watch(int fd, const char *path, uint32_t mask) { (void)fd; (void)path; (void)mask; errno = ENOSYS; return -1; }
ssize_t fgetxattr(int fd, const char *name, void *value, size_t size) { (void)fd; (void)name; (void)value; (void)size; errno = ENOTSUP; return -1; }
ssize_t flistxattr(int fd, char *list, size_t size) { (void)fd; (void)list; (void)size; errno = ENOTSUP; return -1; }

pid_t fork(void) { errno = ENOSYS; return -1; }
pid_t vfork(void) { errno = ENOSYS; return -1; }
int execve(const char *path, char *const argv[], char *const envp[]) { (void)path; (void)argv; (void)envp; errno = ENOSYS; return -1; }
int execv(const char *path, char *const argv[]) { (void)path; (void)argv; errno = ENOSYS; return -1; }
int execvp(const char *file, char *const argv[]) { (void)file; (void)argv; errno = ENOSYS; return -1; }
pid_t waitpid(pid_t pid, int *status, int options) { (void)pid; (void)status; (void)options; errno = ECHILD; return -1; }
pid_t wait(int *status) { (void)status; errno = ECHILD; return -1; }
int pipe(int fds[2]) { (void)fds; errno = ENOSYS; return -1; }
/* WASI cannot duplicate a descriptor; a directory (ls dup()s one) is opened again instead. */
int dup(int fd) {
  int again = openat(fd, ".", O_RDONLY | O_DIRECTORY);
  if (again < 0) errno = ENOSYS;
  return again;
}
int dup2(int fd, int to) { (void)fd; (void)to; errno = ENOSYS; return -1; }
int kill(pid_t pid, int sig) { (void)pid; (void)sig; errno = EPERM; return -1; }
pid_t getppid(void) { return 0; }
pid_t setsid(void) { return -1; }
unsigned alarm(unsigned s) { (void)s; return 0; }
_Noreturn void longjmp(jmp_buf env, int val) { (void)env; (void)val; abort(); }
_Noreturn void siglongjmp(sigjmp_buf env, int val) { (void)env; (void)val; abort(); }
int tcgetattr(int fd, struct termios *t) { (void)fd; (void)t; errno = ENOTTY; return -1; }
int tcsetattr(int fd, int how, const struct termios *t) { (void)fd; (void)how; (void)t; errno = ENOTTY; return -1; }
char *ttyname(int fd) { (void)fd; errno = ENOTTY; return NULL; }
void openlog(const char *ident, int option, int facility) { (void)ident; (void)option; (void)facility; }
void syslog(int priority, const char *format, ...) { (void)priority; (void)format; }
void closelog(void) {}
int fsetxattr(int fd, const char *name, const void *value, size_t size, int flags) { (void)fd; (void)name; (void)value; (void)size; (void)flags; errno = ENOTSUP; return -1; }
int statfs(const char *path, struct statfs *st) { (void)path; (void)st; errno = ENOSYS; return -1; }
int fstatfs(int fd, struct statfs *st) { (void)fd; (void)st; errno = ENOSYS; return -1; }
int mknodat(int dirfd, const char *path, mode_t mode, dev_t dev) { (void)dirfd; (void)path; (void)mode; (void)dev; errno = ENOSYS; return -1; }
int mknod(const char *path, mode_t mode, dev_t dev) { return mknodat(AT_FDCWD, path, mode, dev); }
int mkfifo(const char *path, mode_t mode) { (void)path; (void)mode; errno = ENOSYS; return -1; }
int fchdir(int fd) { (void)fd; errno = ENOSYS; return -1; }

/* A unique file from a template ending in XXXXXX (sed -i, sort -o use it). */
int mkstemp(char *template) {
  static unsigned counter;
  static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  size_t len = strlen(template);
  if (len < 6 || strcmp(template + len - 6, "XXXXXX") != 0) { errno = EINVAL; return -1; }
  for (int attempt = 0; attempt < 1000; attempt++) {
    unsigned value;
    arc4random_buf(&value, sizeof value);
    value ^= ++counter;
    for (int i = 0; i < 6; i++) { template[len - 6 + i] = chars[value % 62]; value /= 62; }
    int fd = open(template, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  errno = EEXIST;
  return -1;
}
/* No processes: awk's system(), "cmd" | getline and print | "cmd" fail. */
FILE *popen(const char *command, const char *mode) { (void)command; (void)mode; errno = ENOSYS; return NULL; }
int pclose(FILE *fp) { (void)fp; errno = ECHILD; return -1; }
int system(const char *command) { (void)command; errno = ENOSYS; return -1; }
