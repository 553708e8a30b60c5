/**
 * What is checked before the server starts, after every value is well formed: flags that
 * contradict each other or the transport, what the chosen backend needs, the shell and the state
 * directory. Refusals are `ConfigRefused`s (exit 1, as Kilntainers' `validate_config`); flags of
 * another backend only earn a warning, so that one configuration can switch backends.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import { constants } from "node:fs"
import { access, mkdir, realpath, stat } from "node:fs/promises"
import { basename, isAbsolute } from "node:path"
import { envProblem } from "../domain/Environment.js"
import { parseSize } from "../domain/Size.js"
import type { BackendChoice } from "./BackendChoice.js"
import { ConfigRefused } from "./CliError.js"
import { egressChecks } from "./EgressChecks.js"
import { allFlags } from "./FlagTable.js"
import { mountChecks } from "./MountChecks.js"
import type { ResolvedFlags } from "./ResolvedFlags.js"
import type { SettingsShape } from "../services/Settings.js"

const refuse = (message: string) => Effect.fail(new ConfigRefused({ message }))

/** The shells the toolset's own shell answers to (`wasm/Shell.ts`). */
const TOOLSET_SHELLS = new Set(["sh", "bash", "dash", "ash"])
/** What the host sandbox shows of this machine (`host/Sandbox.ts`: read-only system directories). */
const SANDBOX_VISIBLE = new Set(["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt", "etc"])
const topDirectory = (path: string) => path.split("/").filter((part) => part !== "")[0] ?? ""

const errorCode = (error: unknown) =>
  typeof error === "object" && error !== null && "code" in error ? String(error.code) : String(error)

/**
 * The shell must be able to run `<shell> -c`: checked on this machine for the host backend (and
 * where the sandbox can see it), by name for the toolset; the other backends get an absolute path
 * whose existence their image decides at the first command.
 */
const checkShell = (shell: string, choice: BackendChoice, unsafeNoSandbox: boolean) =>
  Effect.gen(function*() {
    if (choice.backend === "wasm") return
    if (choice.backend === "toolset") {
      if (TOOLSET_SHELLS.has(basename(shell))) return
      return yield* refuse(`--shell ${shell}: the toolset backend runs its own shell; use sh, bash, dash or ash`)
    }
    if (!isAbsolute(shell)) return yield* refuse(`--shell must be an absolute path (got '${shell}')`)
    if (choice.backend !== "host") return
    const onThisMachine = (problem: string) => new ConfigRefused({ message: `--shell ${shell} ${problem} on this machine` })
    const info = yield* Effect.tryPromise({
      try: () => stat(shell),
      catch: (error) => onThisMachine(errorCode(error) === "ENOENT" ? "does not exist" : `cannot be examined (${errorCode(error)})`)
    })
    if (!info.isFile()) return yield* Effect.fail(onThisMachine("is not a file"))
    yield* Effect.tryPromise({ try: () => access(shell, constants.X_OK), catch: () => onThisMachine("is not executable") })
    if (unsafeNoSandbox) return
    const real = yield* Effect.tryPromise(() => realpath(shell)).pipe(Effect.orElseSucceed(() => shell))
    if (!SANDBOX_VISIBLE.has(topDirectory(shell)) || !SANDBOX_VISIBLE.has(topDirectory(real))) {
      return yield* refuse(
        `--shell ${shell} is not visible inside the host sandbox, which sees only this machine's /usr, /bin, ` +
          `/sbin, /lib*, /opt and /etc`
      )
    }
  })

/** The state directory is created if need be and must be writable. */
const checkStateDir = (dir: string, choice: BackendChoice) =>
  Effect.gen(function*() {
    if (choice.backend !== "host" && choice.backend !== "wasm" && choice.backend !== "toolset") return
    yield* Effect.tryPromise({
      try: async () => {
        await mkdir(dir, { recursive: true, mode: 0o700 })
        await access(dir, constants.W_OK | constants.X_OK)
      },
      catch: (error) => new ConfigRefused({ message: `--state-dir ${dir} cannot be used: ${errorCode(error)}` })
    })
  })

const refuseFuel = (fuel: number | undefined) =>
  fuel === undefined ? Effect.void : refuse(
    "--wasm-fuel is not supported: Node.js has no WebAssembly instruction metering; use --wasm-timeout-ms (wall clock) instead"
  )

const checkBackendNeeds = (resolved: ResolvedFlags, choice: BackendChoice) =>
  Effect.gen(function*() {
    const values = resolved.values
    switch (choice.backend) {
      case "fly":
        if (values.flyApp === undefined) return yield* refuse("--backend fly needs --fly-app (or FLY_APP_NAME)")
        if (values.flyToken === undefined) return yield* refuse("--backend fly needs a token: FLY_API_TOKEN, FLY_TOKEN or --fly-token")
        return
      case "e2b":
        if (values.e2bApiKey === undefined) return yield* refuse("--backend e2b needs an API key: E2B_API_KEY or --e2b-api-key")
        return
      case "modal":
        // As Fly and E2B: refused now, not at the first tool call (the SDK reads only what we pass it).
        if (values.modalTokenId === undefined || values.modalTokenSecret === undefined) {
          return yield* refuse(
            "--backend modal needs a token: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or --modal-token-id and --modal-token-secret ('modal token new' makes one)"
          )
        }
        return
      case "wasm": {
        yield* refuseFuel(values.wasmFuel)
        const path = values.wasmPath
        if (path === undefined) return yield* refuse("--backend wasm needs --wasm-path (the WASI module to run)")
        yield* Effect.tryPromise({
          try: () => access(path, constants.R_OK),
          catch: (error) => new ConfigRefused({ message: `--wasm-path ${path} cannot be read: ${errorCode(error)}` })
        })
        return
      }
      case "toolset":
        return yield* refuseFuel(values.wasmFuel)
      case "docker": {
        // Loaded now for the checks; serving loads it anyway.
        const { connectionOptions, parseRunFlags } = yield* Effect.promise(() =>
          Promise.all([import("../layers/backends/docker/DockerBackend.js"), import("../layers/backends/docker/DockerRunFlags.js")])
            .then(([backend, runFlags]) => ({ connectionOptions: backend.connectionOptions, parseRunFlags: runFlags.parseRunFlags }))
        )
        const address = connectionOptions({ engine: values.engine, dockerHost: values.dockerHost })
        if (Either.isLeft(address)) return yield* refuse(`--docker-host: ${address.left}`)
        const parsed = parseRunFlags(values.dockerRunFlag)
        if (Either.isLeft(parsed)) return yield* refuse(parsed.left)
        return
      }
    }
  })

const checkTransport = (resolved: ResolvedFlags) =>
  Effect.gen(function*() {
    const { sources, values } = resolved
    if (values.transport === "stdio") {
      const httpOnly = allFlags.filter(([key, flag]) => flag.transport === "http" && sources[key]._tag === "CommandLine")
      if (httpOnly.length > 0) {
        const names = httpOnly.map(([, flag]) => `--${flag.name}`).join(", ")
        return yield* refuse(
          `${names} ${httpOnly.length === 1 ? "is" : "are"} only valid with --transport http: in stdio mode there is no HTTP server`
        )
      }
      return
    }
    const { isLoopback } = yield* Effect.promise(() => import("../layers/mcp/HttpServer.js"))
    const tokens = values.authToken !== undefined || Object.keys(values.authPrincipal).length > 0
    if (!isLoopback(values.host) && !tokens && !values.allowUnauthenticatedHttp) {
      return yield* refuse(
        `a non-loopback --host (${values.host}) lets anyone who reaches it run commands: set KILNTAINERS_AUTH_TOKEN ` +
          `(or --auth-token), or pass --allow-unauthenticated-http if something in front of this server authenticates`
      )
    }
  })

/** The warnings for flags the chosen backend ignores (given on the command line). */
const ignoredFlags = (resolved: ResolvedFlags, choice: BackendChoice): Array<string> => {
  const ignored = allFlags.filter(([key, flag]) =>
    resolved.sources[key]._tag === "CommandLine" && flag.backends !== undefined && !flag.backends.includes(choice.backend)
  )
  const warnings: Array<string> = []
  if (ignored.length > 0) {
    const names = ignored.map(([, flag]) => `--${flag.name}`).join(", ")
    const auto = choice.reason === undefined ? "" : ` (auto: ${choice.reason.split(";")[0]})`
    warnings.push(`${names} ${ignored.length === 1 ? "does" : "do"} not apply to --backend ${choice.backend}${auto}: ignored`)
  }
  if (choice.backend === "fly" && resolved.sources.flyCli._tag === "CommandLine") {
    warnings.push("--fly-cli is ignored: kilntainers calls the Fly Machines API itself, without flyctl")
  }
  return warnings
}

/** Refuses a configuration that cannot work; returns the warnings to print. */
export const startupChecks = (resolved: ResolvedFlags, choice: BackendChoice, settings: SettingsShape) =>
  Effect.gen(function*() {
    const values = resolved.values
    yield* checkTransport(resolved)
    if (values.toolInstructionOverride !== undefined && values.extendedToolInstruction !== undefined) {
      return yield* refuse(
        "Cannot use both --tool-instruction-override and --extended-tool-instruction: the override replaces the " +
          "description entirely, the extension appends to the backend's"
      )
    }
    if (values.warmPool > 0 && choice.backend !== "docker" && choice.backend !== "host") {
      return yield* refuse(
        `--warm-pool is for the docker and host backends; ${choice.backend} computers ${
          choice.backend === "wasm" || choice.backend === "toolset"
            ? "are created in a moment and need no pool"
            : "cannot be renamed when handed out, so a pooled one could not be found again by its id"
        }`
      )
    }
    const disk = parseSize(values.wasmMaxDisk)
    if (disk === undefined || disk < 64 * 1024) {
      return yield* refuse(`--wasm-max-disk must be a size of at least 64k, such as 256m or 1g (got ${JSON.stringify(values.wasmMaxDisk)})`)
    }
    const envError = envProblem(values.env, "--env")
    if (envError !== undefined) return yield* refuse(envError)
    if (values.flyMemory % 256 !== 0) {
      return yield* refuse(`--fly-memory must be a multiple of 256 MB (Fly refuses others; got ${values.flyMemory})`)
    }
    if (values.transport === "http" && values.authToken !== undefined) {
      const { validateToken } = yield* Effect.promise(() => import("../layers/mcp/BearerAuth.js"))
      const checked = validateToken(Redacted.value(values.authToken), "--auth-token (or KILNTAINERS_AUTH_TOKEN)")
      if (Either.isLeft(checked)) return yield* refuse(checked.left)
    }
    yield* checkBackendNeeds(resolved, choice)
    yield* checkShell(values.shell, choice, values.unsafeNoSandbox)
    yield* checkStateDir(settings.stateDir, choice)
    const egressWarnings = yield* egressChecks(resolved, choice, settings)
    const mountWarnings = yield* mountChecks(values, choice, settings)
    return [...ignoredFlags(resolved, choice), ...egressWarnings, ...mountWarnings]
  })
