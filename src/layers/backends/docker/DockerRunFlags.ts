/**
 * `--docker-run-flag`: a documented subset of `docker run` flags, mapped onto the Engine API's
 * container-create body. Anything else is refused when the layer is built, so a typo never
 * silently weakens (or fails to apply) a setting.
 *
 * Each element of the list is either one token (`--read-only`, `--cap-add=SYS_PTRACE`), a flag
 * and its value separated by whitespace (`--cap-add SYS_PTRACE`), or a flag whose value is the
 * next element (`["--cap-add", "SYS_PTRACE"]`).
 *
 * Supported (docker-run meaning unless noted):
 *   --cap-add CAP            add a capability to the default set (ALL may not be added)
 *   --cap-drop CAP           remove one of the default capabilities
 *   -e, --env K=V            the container's environment. Kilntainers processes get exactly their
 *                            own environment (see DockerBackend.ts), so this only reaches the
 *                            container's main process and `docker exec` sessions from outside
 *   -v, --volume SRC:DST[:OPTS]   a bind mount or named volume
 *   --read-only              read-only root filesystem (add --tmpfs /home/agent and --tmpfs /tmp)
 *   --tmpfs PATH[:OPTS]      a tmpfs mount
 *   -u, --user USER[:GROUP]  the user of the container and of every process
 *   --shm-size SIZE          size of /dev/shm (512m, 1g, …)
 *   --ulimit NAME=SOFT[:HARD]
 *   --add-host HOST:IP       an /etc/hosts entry
 *   --dns IP                 a DNS server
 *   --hostname NAME          the container's hostname (default: the computer id)
 *   --label K[=V]            an extra label (`kilntainers` and `kilntainers.*`, the keys our
 *                            containers are found and described by, are reserved)
 *   --security-opt OPT       an extra security option (no-new-privileges stays on)
 *   --sysctl K=V             a namespaced sysctl
 * Refused on purpose: --privileged, --network/--net (use --network), --pid/--ipc/--userns=host,
 * --rm/--name/--restart (managed by kilntainers).
 */
import * as Either from "effect/Either"
import { MARKER } from "../../../domain/ComputerMetadata.js"
import { parseSize } from "../../../domain/Size.js"

/** What the run flags contribute to the create body. */
export interface RunFlagSettings {
  readonly capAdd: ReadonlyArray<string>
  readonly capDrop: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  readonly binds: ReadonlyArray<string>
  readonly readOnly: boolean
  readonly tmpfs: Readonly<Record<string, string>>
  readonly user: string | undefined
  readonly shmSize: number | undefined
  readonly ulimits: ReadonlyArray<{ readonly Name: string; readonly Soft: number; readonly Hard: number }>
  readonly extraHosts: ReadonlyArray<string>
  readonly dns: ReadonlyArray<string>
  readonly hostname: string | undefined
  readonly labels: Readonly<Record<string, string>>
  readonly securityOpt: ReadonlyArray<string>
  readonly sysctls: Readonly<Record<string, string>>
}

export const SUPPORTED_FLAGS = [
  "--cap-add", "--cap-drop", "-e/--env", "-v/--volume", "--read-only", "--tmpfs", "-u/--user", "--shm-size",
  "--ulimit", "--add-host", "--dns", "--hostname", "--label", "--security-opt", "--sysctl"
] as const

const REFUSED: Readonly<Record<string, string>> = {
  "--privileged": "it would undo the container hardening",
  "--network": "use kilntainers' --network to turn the network on",
  "--net": "use kilntainers' --network to turn the network on",
  "--pid": "sharing a namespace with the host would undo the isolation",
  "--ipc": "sharing a namespace with the host would undo the isolation",
  "--userns": "sharing a namespace with the host would undo the isolation",
  "--rm": "kilntainers manages the container's lifetime",
  "--name": "kilntainers names containers kilntainer-<id>",
  "--restart": "kilntainers manages the container's lifetime"
}

/**
 * The label keys the backend reads on containers (`ComputerMetadata`'s dotted style): the marker
 * and everything under it. `kilntainers-http-test` and the like are anyone's.
 */
export const isReservedLabel = (key: string) => key === MARKER || key.startsWith(`${MARKER}.`)

const ALIASES: Readonly<Record<string, string>> = { "-e": "--env", "-v": "--volume", "-u": "--user" }
const BOOLEAN_FLAGS = new Set(["--read-only"])

/** A capability name as the Engine API wants it: upper case, without the CAP_ prefix. */
export const normalizeCapability = (name: string) => name.trim().toUpperCase().replace(/^CAP_/, "")

/** Splits the elements into flag/value tokens (see the header). */
const tokenize = (flags: ReadonlyArray<string>): Array<string> =>
  flags.flatMap((element) => {
    const trimmed = element.trim()
    const withEquals = /^(-{1,2}[A-Za-z][\w-]*)=([\s\S]*)$/.exec(trimmed)
    if (withEquals) return [withEquals[1]!, withEquals[2]!]
    const withSpace = /^(-{1,2}[A-Za-z][\w-]*)\s+([\s\S]*)$/.exec(trimmed)
    if (withSpace) return [withSpace[1]!, withSpace[2]!]
    return [trimmed]
  })

const keyValue = (flag: string, value: string): Either.Either<readonly [string, string], string> => {
  const at = value.indexOf("=")
  return at <= 0 ? Either.left(`${flag} needs KEY=VALUE, got '${value}'`) : Either.right([value.slice(0, at), value.slice(at + 1)])
}

/** Parses the run flags, or explains what is wrong with them. */
export const parseRunFlags = (flags: ReadonlyArray<string>): Either.Either<RunFlagSettings, string> => {
  const capAdd: Array<string> = []
  const capDrop: Array<string> = []
  const env: Array<string> = []
  const binds: Array<string> = []
  const tmpfs: Record<string, string> = {}
  const ulimits: Array<{ Name: string; Soft: number; Hard: number }> = []
  const extraHosts: Array<string> = []
  const dns: Array<string> = []
  const labels: Record<string, string> = {}
  const securityOpt: Array<string> = []
  const sysctls: Record<string, string> = {}
  let readOnly = false
  let user: string | undefined
  let shmSize: number | undefined
  let hostname: string | undefined

  const tokens = tokenize(flags)
  for (let i = 0; i < tokens.length; i++) {
    const raw = tokens[i]!
    if (raw === "") continue
    const flag = ALIASES[raw] ?? raw
    const refused = REFUSED[flag]
    if (refused !== undefined) return Either.left(`--docker-run-flag ${raw} is not allowed: ${refused}`)
    if (BOOLEAN_FLAGS.has(flag)) {
      const next = tokens[i + 1]
      if (next === "true" || next === "false") {
        readOnly = next === "true"
        i++
      } else {
        readOnly = true
      }
      continue
    }
    const known = [
      "--cap-add", "--cap-drop", "--env", "--volume", "--tmpfs", "--user", "--shm-size", "--ulimit",
      "--add-host", "--dns", "--hostname", "--label", "--security-opt", "--sysctl"
    ]
    if (!known.includes(flag)) {
      return Either.left(
        `unsupported --docker-run-flag '${raw}'; supported: ${SUPPORTED_FLAGS.join(", ")} (see the header of DockerRunFlags.ts)`
      )
    }
    const value = tokens[i + 1]
    if (value === undefined || value === "") return Either.left(`--docker-run-flag ${raw} needs a value`)
    i++
    switch (flag) {
      case "--cap-add": {
        const cap = normalizeCapability(value)
        if (cap === "ALL") return Either.left("--docker-run-flag --cap-add ALL is not allowed: it would undo the container hardening")
        capAdd.push(cap)
        break
      }
      case "--cap-drop":
        capDrop.push(normalizeCapability(value))
        break
      case "--env": {
        const kv = keyValue(raw, value)
        if (Either.isLeft(kv)) return Either.left(kv.left)
        env.push(value)
        break
      }
      case "--volume":
        if (value.split(":").length < 2) return Either.left(`--docker-run-flag ${raw} needs SRC:DST[:OPTS], got '${value}'`)
        binds.push(value)
        break
      case "--tmpfs": {
        const at = value.indexOf(":")
        tmpfs[at < 0 ? value : value.slice(0, at)] = at < 0 ? "" : value.slice(at + 1)
        break
      }
      case "--user":
        user = value
        break
      case "--shm-size": {
        const bytes = parseSize(value)
        if (bytes === undefined || bytes === 0) return Either.left(`--docker-run-flag --shm-size: invalid size '${value}'`)
        shmSize = bytes
        break
      }
      case "--ulimit": {
        const match = /^([a-z]+)=(-?\d+)(?::(-?\d+))?$/.exec(value)
        if (!match) return Either.left(`--docker-run-flag --ulimit needs NAME=SOFT[:HARD], got '${value}'`)
        const soft = Number(match[2])
        ulimits.push({ Name: match[1]!, Soft: soft, Hard: match[3] === undefined ? soft : Number(match[3]) })
        break
      }
      case "--add-host":
        if (!/^[^:]+:.+$/.test(value)) return Either.left(`--docker-run-flag --add-host needs HOST:IP, got '${value}'`)
        extraHosts.push(value)
        break
      case "--dns":
        dns.push(value)
        break
      case "--hostname":
        hostname = value
        break
      case "--label": {
        // As docker run: a key alone is a label with an empty value.
        const at = value.indexOf("=")
        const [key, labelValue] = at < 0 ? [value, ""] : [value.slice(0, at), value.slice(at + 1)]
        if (key.trim() === "") return Either.left(`${raw} needs KEY or KEY=VALUE, got '${value}'`)
        if (isReservedLabel(key)) {
          return Either.left(`--docker-run-flag --label ${key}: the label '${MARKER}' and keys under '${MARKER}.' are kilntainers' own`)
        }
        labels[key] = labelValue
        break
      }
      case "--security-opt":
        securityOpt.push(value)
        break
      case "--sysctl": {
        const kv = keyValue(raw, value)
        if (Either.isLeft(kv)) return Either.left(kv.left)
        sysctls[kv.right[0]] = kv.right[1]
        break
      }
    }
  }
  return Either.right({
    capAdd, capDrop, env, binds, readOnly, tmpfs, user, shmSize, ulimits, extraHosts, dns, hostname, labels,
    securityOpt, sysctls
  })
}
