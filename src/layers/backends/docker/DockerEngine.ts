/**
 * The container engine as the Docker backend talks to it: where it is (unix socket, tcp, ssh — like
 * DOCKER_HOST, Podman through its Docker-compatible socket) and every Engine API call, bounded in
 * time and with its failure wrapped once into a ProviderError whose reason comes from the HTTP
 * status. dockerode is the client; no `docker` CLI subprocess anywhere.
 */
import Docker from "dockerode"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { existsSync } from "node:fs"
import { type ProviderError, type ProviderFailure, providerError } from "../../../domain/Errors.js"

export interface EngineAddress {
  /** podman: through its Docker-compatible socket. */
  readonly engine: "docker" | "podman"
  /**
   * unix:///path, tcp://host:port (or http://, https://), ssh://user@host[:port] — like DOCKER_HOST;
   * undefined = the default socket (/var/run/docker.sock; Podman: /run/user/<uid>/podman/podman.sock
   * for a non-root user when it exists, else /run/podman/podman.sock).
   */
  readonly dockerHost: string | undefined
  /** ssh:// engines: the ssh-agent socket used to authenticate (the caller's SSH_AUTH_SOCK). */
  readonly sshAuthSock?: string | undefined
}

/** Every call but pulls and streams gets an answer within this, or is a Timeout. */
const CALL_TIMEOUT = "60 seconds"

const defaultSocket = (engine: EngineAddress["engine"]) => {
  if (engine === "docker") return "/var/run/docker.sock"
  const uid = typeof process.getuid === "function" ? process.getuid() : 0
  const user = `/run/user/${uid}/podman/podman.sock`
  return uid !== 0 && existsSync(user) ? user : "/run/podman/podman.sock"
}

/**
 * dockerode options for an engine address. Every connection key is set explicitly so docker-modem's
 * own fallback to the DOCKER_HOST environment variable never applies.
 */
export const connectionOptions = (options: EngineAddress): Either.Either<Docker.DockerOptions, string> => {
  const base = {
    socketPath: undefined,
    host: undefined,
    port: undefined,
    protocol: undefined,
    ca: undefined,
    cert: undefined,
    key: undefined,
    timeout: undefined,
    version: undefined
  } as unknown as Docker.DockerOptions
  const address = options.dockerHost?.trim()
  if (address === undefined || address === "") return Either.right({ ...base, socketPath: defaultSocket(options.engine) })
  if (address.startsWith("unix://")) {
    return Either.right({ ...base, socketPath: address.slice("unix://".length) || defaultSocket(options.engine) })
  }
  if (address.startsWith("/")) return Either.right({ ...base, socketPath: address })
  let url: URL
  try {
    url = new URL(address.includes("://") ? address : `tcp://${address}`)
  } catch {
    return Either.left(`invalid engine address '${address}' (use unix:///path, tcp://host:port or ssh://user@host)`)
  }
  switch (url.protocol) {
    case "tcp:":
    case "http:":
      return Either.right({ ...base, host: url.hostname, port: url.port || "2375", protocol: "http" })
    case "https:":
      return Either.right({ ...base, host: url.hostname, port: url.port || "2376", protocol: "https" })
    case "ssh:":
      return Either.right({
        ...base,
        host: url.hostname,
        port: url.port || "22",
        protocol: "ssh",
        username: decodeURIComponent(url.username),
        sshOptions: options.sshAuthSock === undefined ? {} : { agent: options.sshAuthSock }
      })
    default:
      return Either.left(`unsupported engine address '${address}' (use unix:///path, tcp://host:port or ssh://user@host)`)
  }
}

/** The address as the user would write it, for messages. */
export const describeAddress = (options: EngineAddress) =>
  options.dockerHost?.trim() ? options.dockerHost.trim() : `unix://${defaultSocket(options.engine)}`

/** dockerode's ping takes options (the abort signal) although its types say otherwise. */
const pingEngine = (docker: Docker, signal: AbortSignal) =>
  (docker.ping as unknown as (options: object) => Promise<unknown>).call(docker, { abortSignal: signal })

/** Whether an engine answers at this address (bounded to ~1.5 s). */
export const ping = (options: EngineAddress): Effect.Effect<boolean> =>
  Effect.suspend(() => {
    const connection = connectionOptions(options)
    if (Either.isLeft(connection)) return Effect.succeed(false)
    const docker = new Docker(connection.right)
    return Effect.tryPromise((signal) => pingEngine(docker, signal)).pipe(
      Effect.timeout("1500 millis"),
      Effect.as(true),
      Effect.orElseSucceed(() => false)
    )
  })

/** What the engine said: its JSON message when there is one. */
export const engineMessage = (error: unknown): string => {
  if (error && typeof error === "object") {
    const json = (error as { json?: unknown }).json
    if (json && typeof json === "object" && typeof (json as { message?: unknown }).message === "string") {
      return (json as { message: string }).message.trim()
    }
    if (typeof (error as { message?: unknown }).message === "string") return (error as { message: string }).message.trim()
  }
  return String(error)
}

/** The HTTP status of a failed engine call, when there was one. */
export const statusOf = (error: unknown): number | undefined =>
  error && typeof error === "object" && typeof (error as { statusCode?: unknown }).statusCode === "number"
    ? (error as { statusCode: number }).statusCode
    : undefined

const reasonOf = (status: number | undefined, said: string): ProviderFailure => {
  if (status === undefined) return "Unavailable"
  if (status === 404) return "NotFound"
  // Podman answers a container name already taken with 500 ("that name is already in use"), Docker with 409.
  if (status === 500 && /already in use/i.test(said)) return "Conflict"
  if (status === 409 || status === 304) return "Conflict"
  if (status === 401 || status === 403) return "Denied"
  if (status === 429) return "RateLimited"
  if (status === 400) return "Invalid"
  return "Failed"
}

/** Whether a ProviderError came from the engine answering with this HTTP status. */
export const hasStatus = (error: ProviderError, status: number) => statusOf(error.cause) === status

/** A connected engine: the client and its calls. */
export interface Engine {
  /** "docker" or "podman": the backend's name in messages. */
  readonly name: string
  readonly docker: Docker
  /** The address, as the user would write it. */
  readonly where: string
  /** One Engine API call: bounded in time, its failure a ProviderError (the dockerode error as cause). */
  readonly call: <A>(operation: string, f: (signal: AbortSignal) => Promise<A>) => Effect.Effect<A, ProviderError>
  /** A ProviderError of this backend. */
  readonly fail: (operation: string, reason: ProviderFailure, detail: string, cause?: unknown) => ProviderError
}

/** The engine at this address; fails with Invalid for an address that cannot be used. */
export const make = (options: EngineAddress): Effect.Effect<Engine, ProviderError> =>
  Effect.gen(function*() {
    const name = options.engine
    const fail = (operation: string, reason: ProviderFailure, detail: string, cause?: unknown) =>
      providerError(name, operation, reason, detail, cause)
    const connection = yield* Either.mapLeft(connectionOptions(options), (detail) => fail("connect to the engine", "Invalid", detail))
    const docker = new Docker(connection)
    const where = describeAddress(options)
    const call = <A>(operation: string, f: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, ProviderError> =>
      Effect.tryPromise({
        try: f,
        catch: (error) => fail(operation, reasonOf(statusOf(error), engineMessage(error)), engineMessage(error), error)
      }).pipe(
        Effect.timeoutFail({
          duration: CALL_TIMEOUT,
          onTimeout: () => fail(operation, "Timeout", `no answer from the engine at ${where}`)
        })
      )
    return { name, docker, where, call, fail }
  })

/** Fails the layer when no engine answers: the message says where it looked and what to do. */
export const reachable = (engine: Engine): Effect.Effect<void, ProviderError> =>
  Effect.tryPromise((signal) => pingEngine(engine.docker, signal)).pipe(
    Effect.timeout("5 seconds"),
    Effect.mapError((error) =>
      engine.fail(
        "reach the engine",
        "Unavailable",
        `no ${engine.name} engine answers at ${engine.where} (${
          error._tag === "TimeoutException" ? "no answer within 5 s" : engineMessage(error.error)
        }). Start the engine${engine.name === "podman" ? " socket (systemctl --user start podman.socket)" : ""}, or point --docker-host at it`,
        error
      )
    )
  )

