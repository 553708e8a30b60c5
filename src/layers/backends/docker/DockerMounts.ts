/**
 * The user's directories in Docker and Podman computers (see `domain/Mounts.ts`). The engine binds
 * a host *path* itself, at every container start, so what it is given must be what was checked
 * (`mounts/MountObjects.ts` holds each source and deny target since startup). Two ways, chosen when
 * the backend starts:
 *
 *   - "staged" (the server is root, in the engine's mount namespace, with a state directory): right
 *     before the engine creates, starts or restarts a container, each mount is copied out of its
 *     template (`mounts/MountTemplates.ts`: the held object, its --deny-read masks and --deny-write
 *     read-only binds mounted on the denied objects) to `<stateDir>/engine-mounts/<container>/<key>`,
 *     the engine binds that (recursively: the masks come along), and the copy is unmounted as soon
 *     as the engine is done (the container keeps its own). Nothing a computer renames or links
 *     changes what a later container gets. Leftovers of a crash (untouched for 15 minutes) are swept
 *     when the backend starts.
 *   - "checked" (otherwise: a non-root server with the engine's socket, an engine in another mount
 *     namespace or on another machine): the engine binds each source's current path, with masks at
 *     the deny targets' current places; right before create, start or restart each of those paths is
 *     walked without following symlinks and must be the held object, and a container whose mounts
 *     no longer match refuses to start (factory reset makes it afresh). What remains is the moment
 *     between that check and the engine's own walk (README, Security).
 *
 * Named volumes (DOCKER_VOLUME) are the engine's and are bound by name. What processes create in a
 * bind mount belongs on disk to their uid: the guest `agent` has the first writable directory's
 * owner's (DockerGuest.ts).
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { createHash } from "node:crypto"
import { chmodSync, closeSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import * as Mounts from "../../../domain/Mounts.js"
import * as MountObjects from "../mounts/MountObjects.js"
import type { MountTemplates } from "../mounts/MountTemplates.js"

export interface DockerMounts {
  readonly mode: "staged" | "checked"
  /** The user's binds of a new container named `name`. */
  readonly binds: (name: string) => Effect.Effect<ReadonlyArray<string>, ProviderError>
  /**
   * Runs an engine call that creates, starts or restarts a container whose user binds are `binds`,
   * with the user's directories ready for it (staged), or after checking them (checked).
   */
  readonly around: <A, E>(binds: ReadonlyArray<string>, call: Effect.Effect<A, E>) => Effect.Effect<A, E | ProviderError>
}

const readOnly = (mount: Mounts.Mount) => (mount.readOnly ? ":ro" : "")
const byTarget = (a: { readonly mount: Mounts.Mount }, b: { readonly mount: Mounts.Mount }) =>
  a.mount.target.split("/").length - b.mount.target.split("/").length

/** The named volumes of the policy, bound by name. */
const volumes = (policy: Mounts.FilesystemPolicy) => policy.mounts.filter((m) => m.volume).map((m) => `${m.source}:${m.target}${readOnly(m)}`)

/** The mountpoints below `dir` in this process's mount table (octal escapes of /proc undone), deepest first. */
const mountedBelow = (dir: string): Array<string> =>
  readFileSync("/proc/self/mountinfo", "utf8").split("\n")
    .map((line) => line.split(" ")[4]?.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8))))
    .filter((point): point is string => point !== undefined && point.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length)

const list = (path: string) => {
  try {
    return readdirSync(path).map((name) => join(path, name))
  } catch {
    return []
  }
}

/**
 * Unmounts what is mounted in the staging directories `containers` (`<root>/<container>`), then
 * removes their entries and them; entries are listed only once nothing is mounted there any more,
 * and never deeper (that would be a user's directory).
 */
const clear = (templates: MountTemplates, containers: ReadonlyArray<string>) =>
  containers.length === 0 ? Effect.void : Effect.suspend(() =>
    templates.unstage(containers.flatMap(mountedBelow)).pipe(
      Effect.zipRight(Effect.suspend(() => templates.unstage(containers.flatMap((dir) => [...list(dir), dir]))))
    )
  )

/**
 * A staging directory left by a crash: untouched for longer than any create, start or restart
 * takes (an image pull included), so that a second server sharing the state directory never loses
 * the copies it is staging now.
 */
const STALE_MS = 15 * 60_000

const staged = (
  policy: Mounts.FilesystemPolicy,
  objects: MountObjects.MountObjects,
  templates: MountTemplates,
  root: string,
  backend: string
): Effect.Effect<DockerMounts, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const key = (held: MountObjects.HeldMount) =>
      createHash("sha256").update(`${held.mount.source}\0${held.mount.target}\0${held.mount.readOnly}`).digest("hex").slice(0, 16)
    const byKey = new Map(objects.mounts.map((held) => [key(held), held]))
    const now = yield* Clock.currentTimeMillis
    const stale = (dir: string) => {
      try {
        return now - statSync(dir).mtimeMs > STALE_MS
      } catch {
        return false
      }
    }
    yield* clear(templates, list(root).filter(stale))
    /** This server's staging directories: each is cleared after its engine call, and again at the end. */
    const ours = new Set<string>()
    yield* Effect.addFinalizer(() => clear(templates, [...ours]).pipe(Effect.catchAll((error) => Effect.logWarning(error.message))))
    mkdirSync(root, { recursive: true, mode: 0o700 })
    chmodSync(root, 0o700)
    const refuse = (detail: string) => providerError(backend, "start the container", "Conflict", `${detail}; factory-reset the computer to make it with the mounts as they are now`)
    return {
      mode: "staged",
      binds: (name) =>
        Effect.succeed([
          ...[...objects.mounts].sort(byTarget).map((held) => `${join(root, name, key(held))}:${held.mount.target}${readOnly(held.mount)}`),
          ...volumes(policy)
        ]),
      around: (binds, call) =>
        Effect.gen(function*() {
          const entries: Array<{ readonly path: string; readonly mount: MountObjects.HeldMount }> = []
          for (const bind of binds) {
            const [source = "", target] = bind.split(":")
            if (source.startsWith(`${root}/`)) {
              const held = byKey.get(source.slice(source.lastIndexOf("/") + 1))
              if (held === undefined) return yield* refuse(`its mount at ${target} was made for another --mount configuration`)
              entries.push({ path: source, mount: held })
            } else if (objects.mounts.some((held) => held.mount.target === target)) {
              return yield* refuse(`its mount at ${target} binds the host path ${source} itself (an older kilntainers made it)`)
            }
          }
          if (entries.length === 0) return yield* call
          const paths = entries.map((entry) => entry.path)
          const dirs = [...new Set(paths.map((path) => dirname(path)))]
          dirs.forEach((dir) => ours.add(dir))
          return yield* Effect.acquireUseRelease(
            Effect.zipRight(Effect.sync(() => dirs.forEach((dir) => mkdirSync(dir, { recursive: true, mode: 0o700 }))), templates.stage(entries)),
            () => call,
            () => templates.unstage([...paths, ...dirs]).pipe(Effect.catchAll((error) => Effect.logWarning(error.message)))
          )
        })
    }
  })

/** The binds of the policy where its objects are now, each path checked to be the held object. */
const currentBinds = (policy: Mounts.FilesystemPolicy, objects: MountObjects.MountObjects, emptyDir: string): Array<string> | string => {
  const check = (object: MountObjects.HeldObject): string | undefined => {
    const path = MountObjects.currentPath(object)
    if (path === undefined) return undefined
    const opened = MountObjects.openNoFollow(path)
    if ("problem" in opened) return undefined
    closeSync(opened.object.fd)
    return opened.object.dev === object.dev && opened.object.ino === object.ino ? path : undefined
  }
  const now: Array<Mounts.Mount> = []
  for (const held of [...objects.mounts].sort(byTarget)) {
    const path = check(held.object)
    if (path === undefined) return `${MountObjects.mountLabel(held.mount)}: its host directory was removed or replaced`
    now.push({ ...held.mount, source: path })
  }
  const binds = [...now.map((mount) => `${mount.source}:${mount.target}${readOnly(mount)}`), ...volumes(policy)]
  for (const deny of objects.denies) {
    const path = check(deny.object)
    if (path === undefined) continue
    for (const place of Mounts.placesOf(now, path)) {
      if (deny.write) {
        if (!place.mount.readOnly) binds.push(`${path}:${place.at}:ro`)
      } else binds.push(`${deny.object.directory ? emptyDir : "/dev/null"}:${place.at}:ro`)
    }
  }
  return binds
}

const checked = (policy: Mounts.FilesystemPolicy, objects: MountObjects.MountObjects, emptyDir: string, backend: string): DockerMounts => {
  const expected = (operation: string) =>
    Effect.suspend(() => {
      const binds = currentBinds(policy, objects, emptyDir)
      return typeof binds === "string" ? providerError(backend, operation, "NotFound", binds) : Effect.succeed(binds)
    })
  return {
    mode: "checked",
    binds: () => expected("create the container"),
    around: (binds, call) =>
      Effect.gen(function*() {
        const now = yield* expected("start the container")
        const sorted = (list: ReadonlyArray<string>) => JSON.stringify([...list].sort())
        if (sorted(binds) !== sorted(now)) {
          const gone = binds.filter((bind) => !now.includes(bind))
          return yield* providerError(
            backend,
            "start the container",
            "Conflict",
            `its mounts no longer match the host (${gone.join(", ") || "a deny rule moved"}): a directory was moved or replaced since it was made; factory-reset the computer to make it with the mounts as they are now`
          )
        }
        return yield* call
      })
  }
}

/**
 * The user's directories for containers: staged when `stageable` (and there is a host mount),
 * checked otherwise; undefined without a policy. Held (and, staged, the templates) for as long as
 * the Scope lasts.
 */
export const make = (options: {
  readonly policy: Mounts.FilesystemPolicy
  readonly backend: string
  readonly stateDir: string | undefined
  /** The templates, when the server is root in the engine's mount namespace (else: checked). */
  readonly templates: ((objects: MountObjects.MountObjects) => Effect.Effect<MountTemplates | undefined, ProviderError, Scope.Scope>) | undefined
}): Effect.Effect<DockerMounts | undefined, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    const { policy, backend, stateDir } = options
    if (policy.mounts.length === 0) return undefined
    const objects = yield* MountObjects.hold(policy, backend, stateDir)
    const templates = stateDir === undefined || options.templates === undefined ? undefined : yield* options.templates(objects)
    if (templates !== undefined) return yield* staged(policy, objects, templates, join(stateDir!, "engine-mounts"), backend)
    const masksDirectories = objects.denies.some((deny) => !deny.write && deny.object.directory)
    const emptyDir = masksDirectories
      ? yield* Effect.try({
        try: () => emptyDirectory(stateDir),
        catch: (error) => providerError(backend, "make the directory that masks --deny-read paths", "Failed", String(error))
      })
      : "/nonexistent"
    if (objects.roots.length > 0) {
      yield* Effect.logWarning(
        `${backend} backend: the engine binds the --mount paths itself (this server cannot stage them: it is not root in the engine's mount namespace, or has no state directory); each is checked right before a container starts, which leaves a moment in which a computer could swap one`
      )
    }
    return checked(policy, objects, emptyDir, backend)
  })

/**
 * The empty read-only directory that masks denied directories (checked mode): made once under the
 * state directory (or a fresh temporary one), and refused when something was put in it.
 */
export const emptyDirectory = (stateDir: string | undefined): string => {
  const dir = stateDir === undefined ? mkdtempSync(join(tmpdir(), "kilntainers-empty-")) : join(stateDir, "docker-empty")
  mkdirSync(dir, { recursive: true, mode: 0o555 })
  chmodSync(dir, 0o555)
  if (readdirSync(dir).length > 0) throw new Error(`${dir} must be empty: it masks --deny-read directories`)
  return dir
}
