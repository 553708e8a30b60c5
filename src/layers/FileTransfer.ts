import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { processEnvironment } from "../domain/Environment.js"
import { FileNotFound, InvalidInput, providerError, Unsupported } from "../domain/Errors.js"
import { AuditLog } from "../services/AuditLog.js"
import { Backend } from "../services/Backend.js"
import { type ComputerHandle, Computers } from "../services/Computers.js"
import { type FileReadInput, Files, type FileWriteInput } from "../services/Files.js"
import { Settings } from "../services/Settings.js"

/** Largest file content one call moves. */
export const maxFileBytes = 16 * 1024 * 1024
export const defaultReadBytes = 1024 * 1024

// Run by the computer's own shell: the sandbox (or container) decides what a path means, so `..`
// and symlinks resolve inside the computer and never reach the host.
const readScript = `f=$1
if [ ! -e "$f" ]; then echo "no such file: $f" >&2; exit 2; fi
if [ ! -f "$f" ]; then echo "not a regular file: $f" >&2; exit 2; fi
if [ ! -r "$f" ]; then echo "permission denied: $f" >&2; exit 2; fi
printf '%s\\n' "$(wc -c < "$f")" && head -c "$2" -- "$f"`

const writeScript = `f=$1
mkdir -p -- "$(dirname -- "$f")" || exit 2
if [ -d "$f" ]; then echo "is a directory: $f" >&2; exit 2; fi
if [ "$2" = append ]; then cat >> "$f"; else cat > "$f"; fi || exit 2
if [ -n "$3" ]; then chmod "$3" -- "$f" || exit 2; fi`

const utf8 = new TextDecoder("utf-8", { fatal: true })

export const layer = Layer.effect(
  Files,
  Effect.gen(function*() {
    const computers = yield* Computers
    const settings = yield* Settings
    const backend = yield* Backend
    const audit = yield* Effect.serviceOption(AuditLog)

    // Relative paths resolve as the shell would resolve them: from the processes' default working
    // directory (--workdir), else the computer's home.
    const spec = (computer: ComputerHandle, argv: ReadonlyArray<string>) => ({
      argv,
      cwd: settings.workdir ?? computer.home,
      env: processEnvironment({
        home: computer.home,
        shell: settings.shell,
        tty: false,
        backend: backend.environment,
        server: settings.env,
        call: undefined
      })
    })

    const checkPath = (path: string) =>
      path.trim() === "" || path.includes("\0")
        ? new InvalidInput({ message: "path must be a non-empty path without NUL bytes" })
        : Effect.void

    const failure = (computer: ComputerHandle, what: string, path: string, stderr: string, exitCode: number | null) => {
      // What the computer's shell said, without its own name and line (`sh: 4: cannot create x: …`).
      const said = stderr.replace(/^sh: (?:line )?\d+: /gm, "").trim()
      const notFound = /^(no such file|not a regular file|is a directory): /.exec(said)
      if (exitCode === 2 && notFound) return new FileNotFound({ path, why: notFound[1]! })
      if (exitCode === 2 && said !== "") return new InvalidInput({ message: said })
      return providerError(computer.backendName, what, "Failed", `exit ${exitCode}${said === "" ? "" : `: ${said}`}`)
    }

    const filesSupported = backend.capabilities.files
      ? Effect.void
      : Effect.fail(new Unsupported({ backend: backend.name, feature: "file_read and file_write (use sandbox_exec with cat)" }))

    const read = (session: string, input: FileReadInput) =>
      Effect.gen(function*() {
        yield* checkPath(input.path)
        const limit = input.maxBytes ?? defaultReadBytes
        if (!(Number.isInteger(limit) && limit >= 0 && limit <= maxFileBytes)) {
          return yield* new InvalidInput({ message: `maxBytes must be an integer between 0 and ${maxFileBytes}` })
        }
        yield* filesSupported
        const computer = yield* computers.resolve(session, input)
        const result = yield* computer.run(spec(computer, ["sh", "-c", readScript, "sh", input.path, String(limit)]), undefined, limit + 32)
        if (result.exit.exitCode !== 0) return yield* failure(computer, "read the file", input.path, result.stderr, result.exit.exitCode)
        const newline = result.stdout.indexOf(10)
        const size = Number(new TextDecoder().decode(result.stdout.subarray(0, newline)).trim())
        const bytes = result.stdout.subarray(newline + 1)
        let encoding = input.encoding ?? "utf8"
        let content: string
        if (encoding === "utf8") {
          try {
            content = utf8.decode(bytes)
          } catch {
            encoding = "base64"
            content = Buffer.from(bytes).toString("base64")
          }
        } else {
          content = Buffer.from(bytes).toString("base64")
        }
        return { computer_id: computer.id, path: input.path, size, encoding, content, truncated: bytes.length < size }
      })

    const write = (session: string, input: FileWriteInput) =>
      Effect.gen(function*() {
        yield* checkPath(input.path)
        if (input.mode !== undefined && !/^[0-7]{3,4}$/.test(input.mode)) {
          return yield* new InvalidInput({ message: "mode must be octal permissions such as 644 or 0755" })
        }
        // White space removed first: classes that overlap across a star and a tail backtrack quadratically.
        if (input.encoding === "base64" && !/^[A-Za-z0-9+/]*={0,2}$/.test(input.content.replace(/\s+/g, ""))) {
          return yield* new InvalidInput({ message: "content is not valid base64" })
        }
        const data = input.encoding === "base64" ? Buffer.from(input.content, "base64") : Buffer.from(input.content, "utf8")
        if (data.length > maxFileBytes) {
          return yield* new InvalidInput({ message: `content is ${data.length} bytes; the limit is ${maxFileBytes}` })
        }
        yield* filesSupported
        const computer = yield* computers.resolve(session, input)
        const argv = ["sh", "-c", writeScript, "sh", input.path, input.append ? "append" : "replace", input.mode ?? ""]
        const result = yield* computer.run(spec(computer, argv), data, 0)
        if (result.exit.exitCode !== 0) return yield* failure(computer, "write the file", input.path, result.stderr, result.exit.exitCode)
        if (audit._tag === "Some") {
          yield* audit.value.record({
            type: "file.written",
            ...(session === "" ? {} : { session }),
            computer: computer.id,
            path: input.path,
            bytes: data.length,
            ...(input.append ? { append: true } : {})
          })
        }
        return { computer_id: computer.id, path: input.path, bytes: data.length }
      })

    return Files.of({ read, write })
  })
)
