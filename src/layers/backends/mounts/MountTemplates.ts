/**
 * The mount templates of the user's directories (see `native/kt-sandbox/stage.c`): one mount
 * namespace, made by `kt-sandbox --make-templates` when a backend starts and kept alive by the
 * namespace descriptors held here, in which each root source (MountObjects.ts) is bound with the
 * deny rules mounted on the denied objects themselves. A mount holds onto its dentry whatever is
 * renamed around it, so the rules follow their objects for the life of the backend; every computer
 * copies its mounts out of the templates (host: kt-sandbox's `--kt-user-bind`; engines:
 * `EngineMounts.ts`), never by walking a host path again.
 *
 * When the server is not root the namespace is made inside a user namespace of its own (the
 * server's uid mapped to itself), which the computers' sandboxes join first.
 */
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import { spawn } from "node:child_process"
import { closeSync, openSync } from "node:fs"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import { FIRST_FD, handOn } from "../HandedDescriptors.js"
import { denyLabel, type HeldMount, mountLabel, type MountObjects } from "./MountObjects.js"


const MINIMAL_ENV = { PATH: "/usr/local/bin:/usr/bin:/bin" }

export interface MountTemplates {
  /** The server's descriptors a kt-sandbox run needs: the child's descriptor FIRST_FD + i is fds[i]. */
  readonly fds: ReadonlyArray<number>
  /** kt-sandbox's options that name them: `--templates USERNS MNTNS` and `--source FD LABEL` per root. */
  readonly options: ReadonlyArray<string>
  /** Template, descriptor and label of a mount, as `--kt-user-bind` and `--engine-stage` take them. */
  readonly spec: (mount: HeldMount) => readonly [template: string, fd: string, label: string]
  /**
   * Copies each mount out of its template to its `path` in the host's mount namespace, for a
   * container engine to bind (root only; `--engine-stage`).
   */
  readonly stage: (entries: ReadonlyArray<{ readonly path: string; readonly mount: HeldMount }>) => Effect.Effect<void, ProviderError>
  /** Unmounts the `paths` and removes them when they are empty (`--engine-unstage`). */
  readonly unstage: (paths: ReadonlyArray<string>) => Effect.Effect<void, ProviderError>
}

/** Runs kt-sandbox to its end; its stderr is the failure's detail. */
const run = (launcher: string, args: ReadonlyArray<string>, fds: ReadonlyArray<number>, backend: string, operation: string) =>
  Effect.async<void, ProviderError>((resume) => {
    const child = spawn(launcher, [...args], { env: MINIMAL_ENV, stdio: handOn(["ignore", "ignore", "pipe"], fds) })
    let stderr = ""
    child.stderr!.on("data", (chunk: Buffer) => {
      if (stderr.length < 4096) stderr += chunk.toString()
    })
    child.on("error", (error) => resume(providerError(backend, operation, "Failed", `cannot run ${launcher}: ${error.message}`)))
    child.on("close", (code) =>
      resume(code === 0 ? Effect.void : providerError(backend, operation, "Failed", stderr.trim() || `kt-sandbox ended with status ${code}`)))
    return Effect.sync(() => child.kill("SIGKILL"))
  }).pipe(
    Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => providerError(backend, operation, "Timeout", "kt-sandbox did not finish within 30 seconds") })
  )

/** Every descriptor handed on, numbered in the child from FIRST_FD. */
const numbering = (fds: ReadonlyArray<number>) => (fd: number) => String(FIRST_FD + fds.indexOf(fd))

/**
 * Runs `kt-sandbox --make-templates` and keeps its namespaces (`userns`: the server is not root):
 * the helper says `ready` once the templates are made, the namespaces are opened through its /proc
 * entry, and closing its stdin lets it exit.
 */
const makeNamespace = (launcher: string, args: ReadonlyArray<string>, fds: ReadonlyArray<number>, userns: boolean, backend: string) =>
  Effect.async<{ readonly userns: number | undefined; readonly mntns: number }, ProviderError>((resume) => {
    const child = spawn(launcher, [...args], { env: MINIMAL_ENV, stdio: handOn(["pipe", "pipe", "pipe"], fds) })
    let done = false
    let stdout = ""
    let stderr = ""
    const finish = (effect: Effect.Effect<{ readonly userns: number | undefined; readonly mntns: number }, ProviderError>) => {
      if (done) return
      done = true
      child.stdin!.end()
      resume(effect)
    }
    const failed = (detail: string) => finish(providerError(backend, "prepare the mounts", "Failed", detail))
    child.stdout!.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
      if (!stdout.includes("ready\n") || done) return
      try {
        const user = userns ? openSync(`/proc/${child.pid}/ns/user`, "r") : undefined
        finish(Effect.succeed({ userns: user, mntns: openSync(`/proc/${child.pid}/ns/mnt`, "r") }))
      } catch (error) {
        failed(`cannot keep the templates' namespace: ${String(error)}`)
      }
    })
    child.stderr!.on("data", (chunk: Buffer) => {
      if (stderr.length < 4096) stderr += chunk.toString()
    })
    child.on("error", (error) => failed(`cannot run ${launcher}: ${error.message}`))
    child.on("exit", (code) => failed(stderr.trim() || `kt-sandbox --make-templates ended with status ${code}`))
    return Effect.sync(() => child.kill("SIGKILL"))
  }).pipe(
    Effect.timeoutFail({
      duration: "20 seconds",
      onTimeout: () => providerError(backend, "prepare the mounts", "Timeout", "kt-sandbox --make-templates did not finish within 20 seconds")
    })
  )

/**
 * The templates of `objects` for as long as the Scope lasts (none when there is no host mount).
 * Fails, saying why, when the kernel or the filesystems cannot make them.
 */
export const make = (
  launcher: string,
  objects: MountObjects,
  mode: "root" | "userns",
  backend: string
): Effect.Effect<MountTemplates | undefined, ProviderError, Scope.Scope> =>
  Effect.gen(function*() {
    if (objects.roots.length === 0) return undefined
    const rootLabel = (index: number) => mountLabel(objects.mounts.find((mount) => mount.root === index)!.mount)
    const heldFds = [...objects.roots.map((root) => root.fd), ...objects.denies.map((deny) => deny.object.fd)]
    const child = numbering(heldFds)
    const args = [
      "--make-templates",
      ...(mode === "userns" ? ["--userns"] : []),
      ...objects.roots.flatMap((root, index) => ["--source", child(root.fd), rootLabel(index)]),
      ...objects.denies.flatMap((deny) => [deny.write ? "--deny-write" : "--deny-read", String(deny.root), child(deny.object.fd), denyLabel(deny)])
    ]
    const namespace = yield* Effect.acquireRelease(
      makeNamespace(launcher, args, heldFds, mode === "userns", backend),
      (ns) =>
        Effect.sync(() => {
          closeSync(ns.mntns)
          if (ns.userns !== undefined) closeSync(ns.userns)
        })
    )
    const nsFds = namespace.userns === undefined ? [namespace.mntns] : [namespace.userns, namespace.mntns]
    const fds = [...new Set([...nsFds, ...objects.roots.map((root) => root.fd), ...objects.mounts.map((mount) => mount.object.fd)])]
    const number = numbering(fds)
    const options = [
      "--templates",
      namespace.userns === undefined ? "-" : number(namespace.userns),
      number(namespace.mntns),
      ...objects.roots.flatMap((root, index) => ["--source", number(root.fd), rootLabel(index)])
    ]
    const spec = (mount: HeldMount) => [String(mount.root), number(mount.object.fd), mountLabel(mount.mount)] as const
    return {
      fds,
      options,
      spec,
      stage: (entries) =>
        run(launcher, ["--engine-stage", ...options, "--", ...entries.flatMap(({ path, mount }) => [path, ...spec(mount)])], fds, backend, "prepare the mounts"),
      unstage: (paths) => paths.length === 0 ? Effect.void : run(launcher, ["--engine-unstage", ...paths], [], backend, "remove the staged mounts")
    }
  })
