/**
 * Private copies of the native helpers the host backend runs itself (kt-sandbox; kt-agent, which
 * kt-sandbox copies into each sandbox or which runs directly when unsandboxed), written at startup
 * from the bytes NativeChecksums verified into `<state-dir>/helpers` (0700, the server's own) and
 * run from there. A package file replaced or rewritten after startup (`cp` over it writes into
 * the same inode) then changes nothing that runs: only the server's own user, or root, can change a
 * private copy, and either could change the server itself. A copy is named after its SHA-256, so
 * servers of different versions sharing a state directory each keep theirs.
 */
import * as Effect from "effect/Effect"
import { createHash } from "node:crypto"
import { chmodSync, closeSync, constants, lstatSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs"
import { join } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"

/** Where a state directory keeps the private copies. */
export const helpersDir = (stateDir: string): string => join(stateDir, "helpers")

/** The directory exists, is a directory (not a link to one) and only this process's user can write it. */
const ownDirectory = (dir: string): string | undefined => {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const stat = lstatSync(dir)
  const uid = process.geteuid?.() ?? stat.uid
  if (!stat.isDirectory()) return `${dir} is not a directory`
  if (stat.uid !== uid) return `${dir} belongs to uid ${stat.uid}, not to this server's (${uid})`
  if ((stat.mode & 0o077) !== 0) chmodSync(dir, 0o700)
  return undefined
}

/** Writes `bytes` to a new file `path` (mode 0500), never through a link left at that name. */
const writeNew = (path: string, bytes: Uint8Array) => {
  rmSync(path, { force: true })
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o500)
  try {
    for (let done = 0; done < bytes.length;) done += writeSync(fd, bytes, done)
  } finally {
    closeSync(fd)
  }
}

/**
 * Copies helper `name`'s verified `bytes` into `dir` (helpersDir) and returns the copy's path, which
 * is what the server runs. Fails when the directory is not the server's own.
 */
export const install = (backend: string, dir: string, name: string, bytes: Uint8Array): Effect.Effect<string, ProviderError> =>
  Effect.gen(function*() {
    const operation = `copy ${name} into ${dir}`
    const result = yield* Effect.try({
      try: () => {
        const refused = ownDirectory(dir)
        if (refused !== undefined) return { refused }
        const path = join(dir, `${name}-${createHash("sha256").update(bytes).digest("hex").slice(0, 16)}`)
        // Written aside, then renamed into place: a server starting beside a running one never runs a
        // half-written copy, and one running from the old copy keeps its inode.
        const temporary = `${path}.${process.pid}.tmp`
        writeNew(temporary, bytes)
        renameSync(temporary, path)
        return { path }
      },
      catch: (error) => providerError(backend, operation, "Failed", String(error), error)
    })
    if ("refused" in result) {
      return yield* providerError(backend, operation, "Invalid", `${result.refused}: the helpers the server runs must be in a directory only its user can write`)
    }
    return result.path
  })
