/**
 * Who a Docker or Podman computer's processes are: `agent`, home /home/agent, the same user as the
 * host backend's (host/GuestUser.ts), and not root.
 *
 * An adopted container (--docker-container) keeps its own users: it is not ours to change.
 *
 * Its ids: the owner (uid and gid) of the first writable host directory mounted into the computer
 * (--mount, or a --docker-run-flag --volume of a host path), so that what the computer writes there
 * belongs on the host to the directory's owner, as on host (where an idmapped mount does it);
 * otherwise 1000:1000. Two exceptions keep the image's own user (the engine's exec default, root in
 * Debian images), as before:
 *   - `--docker-run-flag --user=…` names the user, whoever it is (`--user=0` for root, e.g. to
 *     `apt-get install` with --network);
 *   - the first writable host directory belongs to root: Docker 20.10 has no idmapped binds, so only
 *     root could write it there (say so in the README's mounts section).
 *
 * A root step as each connection begins (`prepare`, before the agent starts) makes the image agree:
 * the `agent` entries of /etc/passwd and /etc/group get those ids (added when the image has none,
 * rewritten when another uid had them), and /home/agent exists and belongs to them (itself only,
 * never a directory mounted there). An image where that step cannot run (no /bin/sh, a read-only
 * root) keeps its own user, said once on stderr.
 */
import * as Effect from "effect/Effect"
import { statSync } from "node:fs"
import type * as Mounts from "../../../domain/Mounts.js"
import { containerName, HOME } from "./DockerContainers.js"
import type { Engine } from "./DockerEngine.js"
import type { RunFlagSettings } from "./DockerRunFlags.js"
import { runShort } from "./DockerSignal.js"

export const NAME = "agent"
/** The guest's ids when no writable host directory is mounted: the host backend's. */
export const DEFAULT_IDS = { uid: 1000, gid: 1000 } as const

export interface GuestIds {
  readonly uid: number
  readonly gid: number
}

/** The host paths of the writable binds: the policy's (--mount) first, then --volume host paths. */
const writableSources = (mounts: ReadonlyArray<Mounts.Mount>, flags: RunFlagSettings): Array<string> => [
  ...mounts.filter((mount) => !mount.volume && !mount.readOnly).map((mount) => mount.source),
  ...flags.binds
    .filter((bind) => bind.startsWith("/") && !bind.split(":").slice(2).join(":").split(",").includes("ro"))
    .map((bind) => bind.split(":")[0] ?? bind)
]

/**
 * The guest's ids for a backend's computers, or undefined for the image's own user (see the header).
 * Read once when the backend starts: the directories are the ones the server holds.
 */
export const idsFor = (mounts: ReadonlyArray<Mounts.Mount>, flags: RunFlagSettings): GuestIds | undefined => {
  if (flags.user !== undefined) return undefined
  const source = writableSources(mounts, flags)[0]
  if (source === undefined) return DEFAULT_IDS
  // A --volume path that does not exist yet is made by the engine, as root.
  const owner = statSync(source, { throwIfNoEntry: false })
  return owner === undefined || owner.uid === 0 ? undefined : { uid: owner.uid, gid: owner.gid }
}

// Run as root inside the container: $1 uid, $2 gid. The home directory is changed only when it is on
// the container's own filesystem (a directory mounted at /home/agent is the user's, never chowned).
const PREPARE_SCRIPT = [
  `set -e`,
  `group="${NAME}:x:$2:"`,
  `user="${NAME}:x:$1:$2:${NAME}:${HOME}:/bin/sh"`,
  `[ -x /bin/bash ] && user="${NAME}:x:$1:$2:${NAME}:${HOME}:/bin/bash"`,
  `if ! grep -qx "$group" /etc/group; then sed -i '/^${NAME}:/d' /etc/group; echo "$group" >>/etc/group; fi`,
  `if ! grep -qx "$user" /etc/passwd; then sed -i '/^${NAME}:/d' /etc/passwd; echo "$user" >>/etc/passwd; fi`,
  `mkdir -p ${HOME}`,
  `if [ "$(stat -c %d ${HOME})" = "$(stat -c %d /)" ] && [ "$(stat -c %u:%g ${HOME})" != "$1:$2" ]; then chown "$1:$2" ${HOME}; fi`
].join("\n")

/**
 * Makes the container's `agent` have `ids` (the root step of the header). Succeeds with the user to
 * start processes as ("uid:gid"), or undefined when the image keeps its own (said on stderr).
 */
export const prepare = (engine: Engine, providerId: string, computerId: string, ids: GuestIds) =>
  Effect.gen(function*() {
    const operation = "give the computer its user"
    const argv = ["/bin/sh", "-c", PREPARE_SCRIPT, "kilntainers", String(ids.uid), String(ids.gid)]
    const { exitCode, said } = yield* runShort(engine, providerId, operation, argv, "0:0")
    if (exitCode !== 0) return yield* engine.fail(operation, "Failed", said || `exit code ${exitCode}`)
    return `${ids.uid}:${ids.gid}` as string | undefined
  }).pipe(
    Effect.catchAll((error) =>
      Effect.as(
        Effect.logWarning(
          `${engine.name} backend: ${containerName(computerId)}: cannot make its user ${NAME} (${error.detail}); its processes run as the image's user`
        ),
        undefined
      )
    )
  )
