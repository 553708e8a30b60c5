/**
 * The user's own files in computers (host and Docker): `--mount`, `--workdir`, `--deny-read`, and
 * process-mcp's SANDBOX_ALLOW_WRITE, SANDBOX_DENY_WRITE, DEFAULT_WORKDIR, DOCKER_VOLUME,
 * DOCKER_CONTAINER and DOCKER_USE_EXISTING. Checked against this machine in `MountChecks.ts`.
 * Listed by `--help-all` (the short help keeps to 100 lines).
 */
import * as Either from "effect/Either"
import * as Mounts from "../../domain/Mounts.js"
import * as Flag from "../Flag.js"

const problem = <A>(result: Either.Either<A, string>) => (Either.isLeft(result) ? result.left : undefined)

export const mountFlags = {
  mount: Flag.commaList("mount", {
    group: "filesystem options",
    metavar: "HOST_PATH:PATH[:ro]",
    backends: ["host", "docker"],
    each: (item) => problem(Mounts.parseMount(item)),
    more: true,
    help: "Show a host directory inside every computer at PATH, read-write (or :ro); writes land on the host; " +
      "repeatable, or a comma list"
  }),
  workdir: Flag.optionalText("workdir", {
    group: "filesystem options",
    metavar: "PATH",
    // process-mcp's DEFAULT_WORKDIR works too.
    alsoFrom: ["DEFAULT_WORKDIR"],
    shownDefault: "the computer's home, /home/agent",
    pattern: { test: /^\//, says: "must be an absolute path inside the computer" },
    more: true,
    help: "Default working directory of processes (relative cwds resolve against it)"
  }),
  denyRead: Flag.commaList("deny-read", {
    group: "filesystem options",
    metavar: "PATH",
    alsoFrom: ["SANDBOX_DENY_READ"],
    backends: ["host", "docker"],
    each: Mounts.hostPathProblem,
    more: true,
    help: "Hide this host path from computers wherever they would see it (a mount, /etc, /usr, /opt); repeatable"
  }),
  allowWrite: Flag.commaList("allow-write", {
    group: "filesystem options",
    metavar: "PATH",
    alsoFrom: ["SANDBOX_ALLOW_WRITE"],
    backends: ["host", "docker"],
    each: Mounts.hostPathProblem,
    more: true,
    help: "process-mcp's SANDBOX_ALLOW_WRITE: a host directory writable at the same path (= --mount PATH:PATH); repeatable"
  }),
  denyWrite: Flag.commaList("deny-write", {
    group: "filesystem options",
    metavar: "PATH",
    alsoFrom: ["SANDBOX_DENY_WRITE"],
    backends: ["host", "docker"],
    each: Mounts.hostPathProblem,
    more: true,
    help: "process-mcp's SANDBOX_DENY_WRITE: a host path inside a writable mount that stays read-only; repeatable"
  }),
  dockerVolume: Flag.optionalText("docker-volume", {
    group: "filesystem options",
    metavar: "NAME",
    // process-mcp's DOCKER_VOLUME: a named volume on the working directory.
    alsoFrom: ["DOCKER_VOLUME"],
    backends: ["docker"],
    pattern: { test: /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/, says: "must be a Docker volume name" },
    more: true,
    help: "A Docker named volume mounted at the working directory of every container (--workdir, else /home/agent)"
  }),
  dockerContainer: Flag.optionalText("docker-container", {
    group: "filesystem options",
    metavar: "NAME",
    // process-mcp's DOCKER_CONTAINER, which counts only with DOCKER_USE_EXISTING=true.
    alsoFrom: ["DOCKER_CONTAINER"],
    backends: ["docker"],
    more: true,
    help: "Adopt this existing running container as a permanent computer: processes run in it; it is never " +
      "stopped, restarted, reset or removed"
  }),
  dockerUseExisting: Flag.boolean("docker-use-existing", {
    group: "filesystem options",
    alsoFrom: ["DOCKER_USE_EXISTING"],
    backends: ["docker"],
    more: true,
    help: "process-mcp's DOCKER_USE_EXISTING: DOCKER_CONTAINER names a container to adopt"
  })
}
