/*
 * kilntainers: declarations WASI (wasi-libc 2022) lacks, so POSIX tools build for wasm32-wasi.
 * Everything here is a stub: no users/groups, no processes, no signals, no terminals, no
 * sockets/mounts. compat.c implements the functions (failing with ENOSYS or answering "none").
 */
#ifndef KT_WASI_COMPAT_H
#define KT_WASI_COMPAT_H
#include <sys/types.h>
#include <stdint.h>
#include <time.h>

/* pwd.h / grp.h */
struct passwd { char *pw_name, *pw_passwd; uid_t pw_uid; gid_t pw_gid; char *pw_gecos, *pw_dir, *pw_shell; };
struct group { char *gr_name, *gr_passwd; gid_t gr_gid; char **gr_mem; };
struct passwd *getpwuid(uid_t); struct passwd *getpwnam(const char *);
struct group *getgrgid(gid_t); struct group *getgrnam(const char *);
int getgrouplist(const char *, gid_t, gid_t *, int *);
void endpwent(void); void endgrent(void);
uid_t getuid(void); uid_t geteuid(void); gid_t getgid(void); gid_t getegid(void);
int getgroups(int, gid_t *);
int setuid(uid_t); int setgid(gid_t); int setgroups(size_t, const gid_t *);
int chown(const char *, uid_t, gid_t); int lchown(const char *, uid_t, gid_t); int fchown(int, uid_t, gid_t);
int fchownat(int, const char *, uid_t, gid_t, int);
mode_t umask(mode_t);
int chmod(const char *, mode_t); int fchmod(int, mode_t); int fchmodat(int, const char *, mode_t, int);
int mknod(const char *, mode_t, dev_t); int mknodat(int, const char *, mode_t, dev_t);
int mkfifo(const char *, mode_t);

/* paths.h */
#define _PATH_DEFPATH "/usr/bin:/bin"
#define _PATH_STDPATH "/usr/bin:/bin:/usr/sbin:/sbin"
#define _PATH_DEVNULL "/dev/null"
#define _PATH_TTY "/dev/tty"
#define _PATH_UTMP "/var/run/utmp"

/* setjmp.h: no exceptions in this toolchain; setjmp returns 0, longjmp aborts */
typedef long jmp_buf[1];
typedef long sigjmp_buf[1];
#define setjmp(b) 0
#define sigsetjmp(b, s) 0
_Noreturn void longjmp(jmp_buf, int);
_Noreturn void siglongjmp(sigjmp_buf, int);

/* sys/wait.h */
#define WNOHANG 1
#define WUNTRACED 2
#define WEXITSTATUS(s) (((s) & 0xff00) >> 8)
#define WTERMSIG(s) ((s) & 0x7f)
#define WIFEXITED(s) (!WTERMSIG(s))
#define WIFSIGNALED(s) (((s) & 0xffff) - 1U < 0xffu)
#define WIFSTOPPED(s) 0
#define WCOREDUMP(s) 0
pid_t wait(int *); pid_t waitpid(pid_t, int *, int);
pid_t fork(void); pid_t vfork(void);
int execv(const char *, char *const[]); int execvp(const char *, char *const[]);
int execve(const char *, char *const[], char *const[]);
int execl(const char *, const char *, ...); int execlp(const char *, const char *, ...);
int pipe(int[2]); int dup(int); int dup2(int, int); int dup3(int, int, int);
pid_t getppid(void); pid_t setsid(void); pid_t getpgrp(void); int setpgid(pid_t, pid_t); pid_t getsid(pid_t);
pid_t tcgetpgrp(int); int tcsetpgrp(int, pid_t);
int kill(pid_t, int); int killpg(pid_t, int);
unsigned alarm(unsigned);
int chroot(const char *);
int nice(int);
int pause(void);
int mkstemp(char *);
char *mkdtemp(char *);
char *ttyname(int);
int sethostname(const char *, size_t);
int daemon(int, int);

/* syslog.h */
#define LOG_EMERG 0
#define LOG_ALERT 1
#define LOG_CRIT 2
#define LOG_ERR 3
#define LOG_WARNING 4
#define LOG_NOTICE 5
#define LOG_INFO 6
#define LOG_DEBUG 7
#define LOG_PID 1
#define LOG_CONS 2
#define LOG_NDELAY 8
#define LOG_USER (1<<3)
#define LOG_DAEMON (3<<3)
#define LOG_AUTH (4<<3)
#define LOG_AUTHPRIV (10<<3)
#define LOG_KERN 0
#define LOG_LOCAL0 (16<<3)
#define LOG_PRIMASK 7
#define LOG_FACMASK 0x3f8
void openlog(const char *, int, int); void syslog(int, const char *, ...); void closelog(void);

/* termios.h */
typedef unsigned char cc_t; typedef unsigned int speed_t; typedef unsigned int tcflag_t;
#define NCCS 32
struct termios { tcflag_t c_iflag, c_oflag, c_cflag, c_lflag; cc_t c_line; cc_t c_cc[NCCS]; speed_t c_ispeed, c_ospeed; };
struct winsize { unsigned short ws_row, ws_col, ws_xpixel, ws_ypixel; };
#define TCSANOW 0
#define TCSADRAIN 1
#define TCSAFLUSH 2
#define ICANON 2
#define ECHO 8
#define ISIG 1
#define IXON 02000
#define ICRNL 0400
#define OPOST 1
#define IUTF8 040000
#define VMIN 6
#define VTIME 5
#define TIOCGWINSZ 0x5413
#define TIOCSWINSZ 0x5414
#define TIOCSCTTY 0x540E
#define TIOCGPGRP 0x540F
#define B0 0
#define B38400 0000017
int tcgetattr(int, struct termios *); int tcsetattr(int, int, const struct termios *);
void cfmakeraw(struct termios *); speed_t cfgetispeed(const struct termios *); speed_t cfgetospeed(const struct termios *);
int cfsetspeed(struct termios *, speed_t); int cfsetispeed(struct termios *, speed_t); int cfsetospeed(struct termios *, speed_t);
int tcflush(int, int); int tcdrain(int);
#ifndef TCIFLUSH
#define TCIFLUSH 0
/* signal.h: WASI has no signals; the emulation gives signal()/raise() only */
#include <signal.h>
#ifndef SIG_BLOCK
#define SIG_BLOCK 0
#define SIG_UNBLOCK 1
#define SIG_SETMASK 2
#define __NEED_sigset_t
#include <bits/alltypes.h>
typedef struct { int si_signo, si_errno, si_code; pid_t si_pid; uid_t si_uid; int si_status; } siginfo_t;
struct sigaction {
  union { void (*sa_handler)(int); void (*sa_sigaction)(int, siginfo_t *, void *); } __sa_handler;
  sigset_t sa_mask; int sa_flags; void (*sa_restorer)(void);
};
#define sa_handler __sa_handler.sa_handler
#define sa_sigaction __sa_handler.sa_sigaction
#define SA_RESTART 0x10000000
#define SA_SIGINFO 4
#define SA_NOCLDSTOP 1
#define SA_RESETHAND 0x80000000
int sigemptyset(sigset_t *); int sigfillset(sigset_t *); int sigaddset(sigset_t *, int); int sigdelset(sigset_t *, int);
int sigismember(const sigset_t *, int); int sigprocmask(int, const sigset_t *, sigset_t *);
int sigaction(int, const struct sigaction *, struct sigaction *); int sigsuspend(const sigset_t *);
#endif

/* more termios/ioctl */
#define IXANY 04000
#define INLCR 0100
#define IGNCR 0200
#define IXOFF 010000
#define ISTRIP 040
#define BRKINT 2
#define IGNBRK 1
#define INPCK 020
#define PARMRK 010
#define ONLCR 4
#define OCRNL 010
#define ECHOE 020
#define ECHOK 040
#define ECHONL 0100
#define ECHOCTL 01000
#define ECHOKE 04000
#define IEXTEN 0100000
#define NOFLSH 0200
#define TOSTOP 0400
#define CSIZE 060
#define CS8 060
#define CREAD 0200
#define PARENB 0400
#define CLOCAL 04000
#define HUPCL 02000
#define CBAUD 0010017
#define VINTR 0
#define VQUIT 1
#define VERASE 2
#define VKILL 3
#define VEOF 4
#define VSTART 8
#define VSTOP 9
#define VSUSP 10
#define TIOCNOTTY 0x5422
#define TIOCSTI 0x5412
#define TIOCGSID 0x5429
#define TCOOFF 0
#define TCOON 1

/* mntent.h */
#include <stdio.h>
struct mntent { char *mnt_fsname, *mnt_dir, *mnt_type, *mnt_opts; int mnt_freq, mnt_passno; };
FILE *setmntent(const char *, const char *); struct mntent *getmntent(FILE *); int endmntent(FILE *);

#endif

/* netdb.h, net/if.h */
struct hostent { char *h_name; char **h_aliases; int h_addrtype, h_length; char **h_addr_list; };
struct servent { char *s_name; char **s_aliases; int s_port; char *s_proto; };
struct addrinfo;
#define IF_NAMESIZE 16
#define IFNAMSIZ 16
#define NI_MAXHOST 1025
#define NI_MAXSERV 32

/* sys/statvfs.h, sys/statfs.h, sys/mount.h */
struct statfs { unsigned long f_type, f_bsize, f_frsize, f_blocks, f_bfree, f_bavail, f_files, f_ffree, f_namelen, f_flags; struct { int __val[2]; } f_fsid; };
int statfs(const char *, struct statfs *); int fstatfs(int, struct statfs *);

struct statvfs { unsigned long f_bsize, f_frsize; fsblkcnt_t f_blocks, f_bfree, f_bavail; fsfilcnt_t f_files, f_ffree, f_favail; unsigned long f_fsid, f_flag, f_namemax; };
int statvfs(const char *, struct statvfs *); int fstatvfs(int, struct statvfs *);
#define MS_RDONLY 1
#define MS_NOSUID 2
#define MS_NODEV 4
#define MS_NOEXEC 8
#define MS_REMOUNT 32
#define MS_BIND 4096
#define MS_MOVE 8192
#define MS_REC 16384
#define MS_SILENT 32768
#define MS_SHARED (1<<20)
#define MS_PRIVATE (1<<18)
#define MS_SLAVE (1<<19)
#define MS_UNBINDABLE (1<<17)
#define MS_RELATIME (1<<21)
#define MNT_FORCE 1
#define MNT_DETACH 2
#define BLKGETSIZE64 0
int mount(const char *, const char *, const char *, unsigned long, const void *);
int umount(const char *); int umount2(const char *, int);

/* sys/inotify.h */
struct inotify_event { int wd; uint32_t mask, cookie, len; char name[]; };
#define IN_MODIFY 2
#define IN_ATTRIB 4
#define IN_MOVE_SELF 0x800
#define IN_DELETE_SELF 0x400
int inotify_init(void); int inotify_add_watch(int, const char *, uint32_t);

/* open()/openat() with no access mode: POSIX's O_RDONLY is 0, WASI's is a bit, so add it. */
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <dirent.h>
static inline int kt_openat(int dirfd, const char *path, int flags, mode_t mode) {
  if (!(flags & (O_RDONLY | O_WRONLY | O_RDWR | O_SEARCH | O_EXEC))) flags |= O_RDONLY;
  return openat(dirfd, path, flags, mode);
}
#define open(path, flags, ...) kt_openat(AT_FDCWD, path, flags, (0, ##__VA_ARGS__))
#define openat(dirfd, path, flags, ...) kt_openat(dirfd, path, flags, (0, ##__VA_ARGS__))

#endif
