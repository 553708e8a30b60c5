/*
 * kt-agent: hardening of guest processes (defence in depth on top of the sandbox or container). It
 * is applied to the agent itself when it starts, before any process exists, and every shepherd and
 * guest inherits it through fork and exec — nothing to do per spawn:
 *   - no_new_privs: setuid/setgid bits and file capabilities grant nothing;
 *   - capabilities (with --caps drop, the host sandbox): the bounding set is cleared (where the agent
 *     holds CAP_SETPCAP; otherwise said once in a LOG frame), and the effective, permitted,
 *     inheritable and ambient sets are emptied. With no_new_privs an exec then cannot regain any,
 *     even as uid 0. Docker passes --caps keep: the container's reduced set stays, so that root
 *     inside can still run apt and dpkg;
 *   - a seccomp filter, raw classic BPF (no libseccomp), see `build_filter`. The agent's own needs
 *     (fork through clone, pidfds, terminals, sockets) are all allowed by it.
 * Unsandboxed (--caps keep --no-seccomp) nothing is applied: processes run as the user's own would.
 */
#include "agent.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

int opt_drop_caps = 1, opt_seccomp = 1, opt_no_setid = 0;

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__) && defined(__AARCH64EL__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "kt-agent's seccomp filter supports x86_64 and little-endian aarch64"
#endif

/* Syscalls numbered alike on every architecture since 5.x (the unified table); absent from old headers. */
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_fsconfig
#define __NR_fsconfig 431
#endif
#ifndef __NR_fsmount
#define __NR_fsmount 432
#endif
#ifndef __NR_fspick
#define __NR_fspick 433
#endif
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
/* /dev/userfaultfd's ioctl that makes a userfaultfd: _IO(0xAA, 0x00). */
#define KT_USERFAULTFD_IOC_NEW 0xAA00

/* Denied with EPERM whatever their arguments. */
static const int denied[] = {
  __NR_keyctl, __NR_add_key, __NR_request_key,
  __NR_mount, __NR_umount2, __NR_pivot_root, __NR_move_mount, __NR_open_tree, __NR_open_tree_attr,
  __NR_fsopen, __NR_fsconfig, __NR_fsmount, __NR_fspick, __NR_mount_setattr,
  __NR_kexec_load, __NR_kexec_file_load, __NR_bpf, __NR_perf_event_open, __NR_setns,
  __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_reboot, __NR_swapon, __NR_swapoff,
  __NR_acct,
#if defined(__x86_64__)
  __NR_iopl, __NR_ioperm,
#endif
};

static struct sock_filter filter[256];
static unsigned short filter_len;

static void emit(struct sock_filter insn) {
  if (filter_len >= sizeof filter / sizeof filter[0]) die("the seccomp filter outgrew its buffer");
  filter[filter_len++] = insn;
}
#define STMT(code, k) emit((struct sock_filter)BPF_STMT(code, k))
#define JUMP(code, k, jt, jf) emit((struct sock_filter)BPF_JUMP(code, k, jt, jf))
#define RET_ERRNO(e) STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((e) & SECCOMP_RET_DATA))
/* The low 32 bits of an argument (little-endian): flags and ioctl requests live there. */
#define ARG_LO(n) (offsetof(struct seccomp_data, args) + 8 * (n))

/* Expects the syscall number in A and leaves it there: see the filter's description. */
static void kernel_interfaces(void) {
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 4);
  STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_VSOCK, 0, 1);
  RET_ERRNO(EAFNOSUPPORT);
  STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  const int rings[] = { __NR_io_uring_setup, __NR_io_uring_enter, __NR_io_uring_register };
  for (int i = 0; i < 3; i++) {
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)rings[i], 0, 1);
    RET_ERRNO(ENOSYS);
  }
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1);
  RET_ERRNO(EPERM);
  /* ioctl: A becomes its request while it is compared, then the syscall number again. */
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 4);
  STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, KT_USERFAULTFD_IOC_NEW, 0, 1);
  RET_ERRNO(EPERM);
  STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
}

/*
 * The filter:
 *   - a foreign architecture (i386 or arm32 compat entry points) or an x32 syscall: process killed;
 *   - the syscalls in `denied`: EPERM (mounts, keyrings, module loading, kexec, bpf, perf, setns,
 *     reboot, swap, acct, raw port I/O);
 *   - unshare and clone with CLONE_NEWUSER: EPERM (no new user namespace, hence no capabilities in
 *     one); clone3: ENOSYS, whose flags live in memory BPF cannot read, so libc falls back to clone;
 *   - kernel interfaces Docker's default profile refuses too (`kernel_interfaces`): AF_VSOCK sockets
 *     (EAFNOSUPPORT: vsock is not network-namespaced, it reaches the hypervisor and its other
 *     guests), io_uring (ENOSYS, as on a kernel without it: programs fall back to plain syscalls,
 *     and its rings do work no seccomp filter sees), userfaultfd and /dev/userfaultfd's
 *     USERFAULTFD_IOC_NEW (EPERM: a page-fault handler in user space holds kernel threads for as
 *     long as it likes, a building block of kernel exploits);
 *   - ioctl TIOCSTI and TIOCLINUX: EPERM (no typing into a terminal's input).
 *   - with --no-setid-files (a host computer with the user's own directories mounted, idmapped so
 *     that its files belong on disk to their owner, possibly root): a mode with the setuid or setgid
 *     bit is refused (EPERM) in chmod, fchmod, fchmodat(2), open, openat, creat, mknod(at), and
 *     openat2 and io_uring (whose modes BPF cannot read) are ENOSYS: no setuid binary of the
 *     directory's owner can be made for someone on the host to run. Where capabilities are kept
 *     (Docker), CAP_FSETID is dropped too (`harden_agent`), so a write to a setuid file the
 *     directory already holds clears its bits.
 * ptrace stays allowed: gdb and strace of the guest's own children work. Processes outside the guest
 * cannot be traced: the agent and the shepherds are non-dumpable (tracing them needs CAP_SYS_PTRACE,
 * which no guest holds), and everything else is outside the pid namespace.
 */
static void build_filter(void) {
  filter_len = 0;
  STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
  STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
  STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
  JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u /* __X32_SYSCALL_BIT */, 0, 1);
  STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
#endif
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1);
    RET_ERRNO(EPERM);
  }
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1);
  RET_ERRNO(ENOSYS);
  kernel_interfaces();
  /* clone and unshare both take their flags first (x86_64 and aarch64). */
  const int flagged[] = { __NR_clone, __NR_unshare };
  for (int i = 0; i < 2; i++) {
    JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)flagged[i], 0, 4);
    STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
    JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1);
    RET_ERRNO(EPERM);
    STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  }
  if (opt_no_setid) {
    /* { syscall, index of its mode argument } */
    static const int moded[][2] = {
#if defined(__x86_64__)
      { __NR_chmod, 1 }, { __NR_open, 2 }, { __NR_creat, 1 }, { __NR_mknod, 1 },
#endif
      { __NR_fchmod, 1 }, { __NR_fchmodat, 2 }, { __NR_fchmodat2, 2 }, { __NR_openat, 3 }, { __NR_mknodat, 2 },
    };
    for (size_t i = 0; i < sizeof moded / sizeof moded[0]; i++) {
      JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)moded[i][0], 0, 4);
      STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(moded[i][1]));
      JUMP(BPF_JMP | BPF_JSET | BPF_K, 06000, 0, 1);
      RET_ERRNO(EPERM);
      STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    const int unreadable[] = { __NR_openat2, __NR_io_uring_setup };
    for (int i = 0; i < 2; i++) {
      JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)unreadable[i], 0, 1);
      RET_ERRNO(ENOSYS);
    }
  }
  /* ioctl's request is an unsigned int: the kernel ignores the upper half, so only the lower counts. */
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 5);
  STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0);
  JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0);
  STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  RET_ERRNO(EPERM);
  STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

const char *harden_agent(char *notice, size_t cap) {
  static char reason[200];
  notice[0] = 0;
  build_filter();
  if (opt_drop_caps) {
    int kept = 0, err = 0;
    for (int c = 0; c <= 63; c++) {
      int r = prctl(PR_CAPBSET_READ, c, 0, 0, 0);
      if (r < 0) break; /* past the last capability this kernel knows */
      if (r == 0) continue;
      if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) { kept++; err = errno; }
    }
    if (kept > 0) {
      snprintf(notice, cap, "cannot clear the capability bounding set (%s; %d capabilities remain in it); guest "
               "processes still hold none: no_new_privs and empty permitted sets keep exec from granting any",
               strerror(err), kept);
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capset, &h, d) < 0) {
      snprintf(reason, sizeof reason, "cannot drop capabilities: %s", strerror(errno));
      return reason;
    }
  } else if (opt_no_setid) {
    /* Kept capabilities (Docker, where root may write host files) lose CAP_FSETID: with it a write to
     * a setuid or setgid file the mount already holds keeps its bits, as a guest's file. Without it
     * the kernel clears them, as for anyone; no_new_privs keeps an exec from regaining it. */
    struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) < 0) {
      snprintf(reason, sizeof reason, "cannot read capabilities: %s", strerror(errno));
      return reason;
    }
    const unsigned at = CAP_TO_INDEX(CAP_FSETID), bit = CAP_TO_MASK(CAP_FSETID);
    d[at].effective &= ~bit;
    d[at].permitted &= ~bit;
    d[at].inheritable &= ~bit;
    if (syscall(SYS_capset, &h, d) < 0) {
      snprintf(reason, sizeof reason, "cannot drop CAP_FSETID: %s", strerror(errno));
      return reason;
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_LOWER, CAP_FSETID, 0, 0);
    prctl(PR_CAPBSET_DROP, CAP_FSETID, 0, 0, 0); /* only where the agent holds CAP_SETPCAP; permitted is what counts */
  }
  if (!opt_seccomp && !opt_drop_caps) return NULL; /* unsandboxed: processes run as the user's own would */
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
    snprintf(reason, sizeof reason, "cannot set no_new_privs: %s", strerror(errno));
    return reason;
  }
  if (opt_seccomp) {
    struct sock_fprog prog = { .len = filter_len, .filter = filter };
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
      snprintf(reason, sizeof reason, "cannot install the seccomp filter: %s", strerror(errno));
      return reason;
    }
  }
  return NULL;
}
