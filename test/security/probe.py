# An attacker's survey from inside a host computer: what could reach the host, its secrets or its
# kernel settings. It changes nothing outside the computer: writability is checked with access()
# and open() without writing, never by writing a setting. Prints one JSON object.
import ctypes
import errno
import json
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250},
      "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219}}[os.uname().machine]
KEYCTL_GET_KEYRING_ID, KEYCTL_READ = 0, 11
SESSION, USER = -3, -4
CLONE_NEWUSER = 0x10000000


def err_name(number):
    return errno.errorcode.get(number, str(number))


def open_for_write(path):
    """open(O_WRONLY) and close without writing a byte: "ok" or the errno's name."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        return err_name(e.errno)
    os.close(fd)
    return "ok"


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return "error:" + err_name(e.errno)


def keyctl(*args):
    r = libc.syscall(NR["keyctl"], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return r if r >= 0 else "error:" + err_name(ctypes.get_errno())


def keyring_keys(ring):
    buf = ctypes.create_string_buffer(4096)
    n = keyctl(KEYCTL_READ, ring, buf, 4096)
    return n if isinstance(n, str) else n // 4


facts = {}
facts["uid"], facts["gid"] = os.getuid(), os.getgid()
facts["groups"] = os.getgroups()
facts["uid_map"] = read_text("/proc/self/uid_map").split("\n")
status = read_text("/proc/self/status")
facts["caps"] = {line.split(":")[0]: line.split(":")[1].strip() for line in status.split("\n") if line.startswith("Cap")}

facts["core_pattern"] = {"access_w": os.access("/proc/sys/kernel/core_pattern", os.W_OK),
                         "open_w": open_for_write("/proc/sys/kernel/core_pattern")}
facts["sysrq_trigger"] = {"access_w": os.access("/proc/sysrq-trigger", os.W_OK),
                          "open_w": open_for_write("/proc/sysrq-trigger")}
writable = []
for root, dirs, files in os.walk("/proc/sys"):
    for name in files:
        path = os.path.join(root, name)
        if os.access(path, os.W_OK):
            writable.append(path)
facts["writable_sysctls"] = sorted(writable)

# Files of the host's root (uid 0 is not mapped: they show as 65534) that only root may read.
readable_secrets, checked, visited = [], 0, 0
for top in ["/etc", "/opt", "/usr/lib", "/usr/libexec", "/usr/local", "/usr/sbin", "/run", "/var", "/home", "/root"]:
    for root, dirs, files in os.walk(top):
        if visited > 150000:
            break
        for name in files:
            visited += 1
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not os.path.isfile(path) or st.st_uid == os.getuid() or st.st_mode & 0o004:
                continue
            checked += 1
            try:
                with open(path, "rb") as f:
                    f.read(1)
                readable_secrets.append(path)
            except OSError:
                pass
facts["root_only_files_checked"] = checked
facts["root_only_files_readable"] = readable_secrets
facts["etc"] = sorted(os.listdir("/etc"))
facts["planted"] = read_text(sys.argv[1]) if len(sys.argv) > 1 else None

writes = {}
for path in ["/x", "/etc/x", "/usr/x", "/opt/x", "/run/x", "/dev/x", "/proc/x"]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(path)
        writes[path] = "ok"
    except OSError as e:
        writes[path] = err_name(e.errno)
facts["writes"] = writes

libc.unshare.argtypes = [ctypes.c_int]
r = libc.unshare(CLONE_NEWUSER)
facts["nested_userns"] = "ok" if r == 0 else err_name(ctypes.get_errno())

facts["keyring"] = {
    "session": keyctl(KEYCTL_GET_KEYRING_ID, SESSION, 0),
    "user": keyctl(KEYCTL_GET_KEYRING_ID, USER, 0),
    "session_keys": keyring_keys(SESSION),
    "request_server_secret": (lambda r: r if r >= 0 else "error:" + err_name(ctypes.get_errno()))(
        libc.syscall(NR["request_key"], b"user", b"kt-test-server-secret", None, ctypes.c_long(0))),
}

def fds(pid):
    try:
        return {name: os.readlink("/proc/%d/fd/%s" % (pid, name)) for name in os.listdir("/proc/%d/fd" % pid)}
    except OSError as e:
        return "error:" + err_name(e.errno)


facts["pid1_fds"] = fds(1)
facts["pid1_cmdline"] = read_text("/proc/1/cmdline").split("\0")
facts["pid1_environ"] = read_text("/proc/1/environ").split("\0")
facts["pid2_cmdline"] = read_text("/proc/2/cmdline").split("\0")
mounts = []
for line in read_text("/proc/self/mountinfo").split("\n"):
    if " - " not in line:
        continue
    left, right = line.split(" - ", 1)
    fields, rest = left.split(" "), right.split(" ")
    mounts.append({"root": fields[3], "point": fields[4], "options": fields[5], "type": rest[0], "super": rest[2] if len(rest) > 2 else ""})
facts["mounts"] = mounts
print(json.dumps(facts))
