/**
 * The `/etc` a host computer sees: only what a Debian-like userland needs to run shells, python,
 * pip, git, curl, vim, less, top and friends, read-only; never the host's secrets or its
 * configuration with credentials in it.
 *
 * - Bound from the host (read-only, when present): name service and network files, the dynamic
 *   linker's cache, time zone and locale aliases, CA certificates (not `ssl/private`),
 *   alternatives, shell start-up files, terminfo, the distribution's release files, and the
 *   system-wide configuration of python, perl, java, vim, nano, less, fonts, gnutls, mime types.
 * - Written for the guest (see GuestUser): `passwd` and `group` (root, agent, nobody),
 *   `hostname`, `hosts` (loopback and the computer's own name) and `nsswitch.conf` (files and dns
 *   only, so no host name service is ever asked).
 * - Left out, among others: shadow files, ssh, sudoers, pam, machine-id, subuid/subgid,
 *   `environment`, and tool configuration that may carry credentials (`pip.conf`, `npmrc`,
 *   `gitconfig`, `wgetrc`, `curlrc`, `netrc`): configure tools in the home directory instead.
 *   `resolv.conf` only when the computer has the network.
 */
import { existsSync, lstatSync, readdirSync, readlinkSync, realpathSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { group, passwd } from "./GuestUser.js"

/** Top-level names under /etc bound read-only when present (a RegExp matches several). */
// Each entry costs a mount at every sandbox start (about 0.2 ms idle, more under load): the list
// holds what common tools read, not everything a Debian system has.
const BOUND: ReadonlyArray<string | RegExp> = [
  "host.conf", "gai.conf", "services", "protocols",
  "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
  "localtime", "timezone", "locale.alias", "locale.conf", "mtab",
  "crypto-policies",
  "alternatives",
  "profile", "profile.d", "bash.bashrc", "bash_completion", "bash_completion.d", "inputrc", "shells",
  "zsh", "zshrc", "zshenv", "zprofile", "zlogin", "zlogout", "fish",
  "terminfo",
  "os-release", "lsb-release", "debian_version", /^[a-z]+-release$/,
  /^python3(\.\d+)?$/, "perl", /^java-\d+-openjdk$/, "vim", "nanorc", "emacs", "sysless", "lesskey",
  "mime.types", "mailcap", "fonts", "gnutls", "ImageMagick-6", "ImageMagick-7"
]

/** Paths below /etc bound read-only when present, inside directories that are not bound whole. */
const NESTED: ReadonlyArray<string> = [
  "ssl/certs", "ssl/openssl.cnf", "ssl/cert.pem",
  "pki/tls/certs", "pki/tls/cert.pem", "pki/tls/openssl.cnf", "pki/ca-trust/extracted", "pki/ca-trust/source"
]

const nsswitch = [
  "passwd: files", "group: files", "shadow: files", "gshadow: files", "hosts: files dns", "networks: files",
  "protocols: files", "services: files", "ethers: files", "rpc: files", "netgroup: files"
].join("\n") + "\n"

const hosts = (hostname: string) =>
  `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t${hostname}\n`

const matches = (name: string) => BOUND.some((entry) => (typeof entry === "string" ? entry === name : entry.test(name)))

/**
 * A host symlink under /etc is kept as a symlink when its target stays inside what the guest
 * sees (/usr, /etc itself, /proc: `os-release`, `localtime`, `mtab`), else the file it points to is
 * bound (`resolv.conf` → /run/systemd/resolve/… is not in the sandbox).
 */
const bindOne = (path: string): Array<string> => {
  let stat
  try {
    stat = lstatSync(path)
  } catch {
    return []
  }
  if (stat.isSymbolicLink()) {
    const target = readlinkSync(path)
    const absolute = resolve(dirname(path), target)
    if (/^\/(usr|proc)\//.test(absolute) || (absolute.startsWith("/etc/") && matches(absolute.split("/")[2] ?? ""))) {
      return ["--symlink", target, path]
    }
    try {
      realpathSync(path)
    } catch {
      return []
    }
  }
  return ["--ro-bind", path, path]
}

export interface EtcOptions {
  readonly hostname: string
  readonly network: boolean
  /**
   * "synthesised": passwd, group, hosts, hostname and nsswitch.conf are written for the guest
   * (through kt-sandbox's `--kt-data`). "host": the host's passwd, group, hosts, hostname and nsswitch.conf
   * are bound (for callers that run bwrap directly, like the test fakes).
   */
  readonly accounts: "synthesised" | "host"
}

/** The files of /etc written for the guest (synthesised accounts): none of the host's bytes, nothing to hide. */
export const written: ReadonlyArray<string> = ["/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname", "/etc/nsswitch.conf"]

/** bwrap arguments that build the guest's /etc (a directory on the sandbox's own root). */
export const etcArgs = (options: EtcOptions): Array<string> => {
  const args = ["--dir", "/etc"]
  let names: Array<string> = []
  try {
    names = readdirSync("/etc").filter(matches).sort()
  } catch {
    // no /etc on the host: the guest gets only the written files
  }
  for (const name of names) args.push(...bindOne(join("/etc", name)))
  for (const path of NESTED) {
    if (existsSync(join("/etc", path))) args.push(...bindOne(join("/etc", path)))
  }
  if (options.network) args.push(...bindOne("/etc/resolv.conf"))
  if (options.accounts === "synthesised") {
    args.push(
      "--kt-data", "/etc/passwd", passwd(),
      "--kt-data", "/etc/group", group(),
      "--kt-data", "/etc/hosts", hosts(options.hostname),
      "--kt-data", "/etc/hostname", `${options.hostname}\n`,
      "--kt-data", "/etc/nsswitch.conf", nsswitch
    )
  } else {
    for (const name of ["passwd", "group", "hosts", "hostname", "nsswitch.conf"]) args.push(...bindOne(join("/etc", name)))
  }
  return args
}
