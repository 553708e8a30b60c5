/*
 * kt-sandbox's parts: what kt-sandbox.c (the launcher of a host computer's sandbox) and stage.c
 * (the user's own directories as mount templates, see its header) share.
 */
#ifndef KT_SANDBOX_H
#define KT_SANDBOX_H

#define _GNU_SOURCE
#include <sys/stat.h>
#include <sys/syscall.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef MOUNT_ATTR_NOSUID
#define MOUNT_ATTR_NOSUID 0x00000002
#endif
#ifndef MOUNT_ATTR_NODEV
#define MOUNT_ATTR_NODEV 0x00000004
#endif
#ifndef MOUNT_ATTR_NOEXEC
#define MOUNT_ATTR_NOEXEC 0x00000008
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif

struct kt_mount_attr { unsigned long long attr_set, attr_clr, propagation, userns_fd; };

/* Where the templates are in their mount namespace (stage.c): TEMPLATE_DIR/N is template N. */
#define TEMPLATE_DIR "/tmp/.kt-t"
/* The most templates, sources and binds one invocation takes. */
#define MAX_SOURCES 64

/* One line on stderr, `kt-sandbox: ...` (with errno's text for `die`), and exit status 125. */
void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
unsigned long parse_number(const char *text, const char *what, unsigned long max);
/* Writes `text` to the existing file `path` (a /proc map, say), or dies. */
void write_file(const char *path, const char *text);

/* The user's directories (stage.c). */
struct templates {
  int userns, mntns;           /* the template namespace's descriptors (userns -1: the server is root) */
  int count;
  int source[MAX_SOURCES];     /* each template's source object, held by the server since it started */
  const char *label[MAX_SOURCES];
};
int make_templates(int argc, char **argv);
int engine_stage(int argc, char **argv);
int engine_unstage(int argc, char **argv);
/* Parses `--templates USERNS MNTNS` or `--source FD LABEL` at argv[*i]; 0 when it is neither. */
int template_option(struct templates *t, int argc, char **argv, int *i);
/* Enters the template namespace (its user namespace first when it has one). */
void join_templates(const struct templates *t);
/* The object held as `fd`, found in template `index` of the namespace this process is in. */
int template_object(const struct templates *t, const char *index, const char *fd, const char *label);
/* A detached copy of the mount tree at `fd` (open_tree OPEN_TREE_CLONE | AT_RECURSIVE). */
int clone_tree(int fd, const char *label);
/* Whether the object open as `fd` is a directory. */
int is_directory(int fd);

/* Mounts the detached `tree` at `to`, idmapped from the owner of its root (`owner`) to UID/GID (idmap.c). */
void stage_idmapped(int tree, const struct stat *owner, const char *to, const char *source, long uid, long gid);

#endif
