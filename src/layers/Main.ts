import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import * as Logger from "effect/Logger"
import * as Runtime from "effect/Runtime"
import { type ProviderError, providerError } from "../domain/Errors.js"
import { AuditLog } from "../services/AuditLog.js"
import type { Backend } from "../services/Backend.js"
import type { SettingsShape } from "../services/Settings.js"
import * as CloudEgress from "./egress/CloudEgress.js"
import type { RelaySettings } from "./backends/agent/Relay.js"
import type { EgressShape } from "./egress/Egress.js"
import { serverInfo } from "./mcp/McpServer.js"
import * as KilntainersRuntime from "./Runtime.js"
import * as Tracing from "./tracing/Tracing.js"

// Each backend (and its SDK) is loaded only when chosen: a stdio server starts in a fraction of the
// time and memory it would take with every cloud SDK loaded.
const load = <M>(name: string, module: () => Promise<M>) =>
  Effect.tryPromise({
    try: module,
    catch: (error) => providerError(name, "load the backend", "Unavailable", String(error), error)
  })

const backendFrom = <M, E, R>(
  name: string,
  module: () => Promise<M>,
  make: (module: M) => Layer.Layer<Backend, E, R>
): Layer.Layer<Backend, E | ProviderError, R> => Layer.unwrapEffect(Effect.map(load(name, module), make))

/**
 * The backend of host or Docker computers, with the egress proxy when `--allow-host` is set (loaded
 * only then): its relay and what each computer needs (variables, CA bundle) go to the backend, and
 * its connections end with the layer. Computers keep `network: false` (the startup checks refuse
 * `--network` with `--allow-host`): the relay is their only way out.
 */
const withEgress = <E, R>(
  settings: SettingsShape,
  make: (egress: EgressShape | undefined) => Layer.Layer<Backend, E, R>
) =>
  settings.egress.allowHosts.length === 0
    ? make(undefined)
    : Layer.unwrapScoped(Effect.gen(function*() {
      const Egress = yield* load("egress", () => import("./egress/Egress.js"))
      const egress = yield* Egress.make({ settings: settings.egress, stateDir: settings.stateDir, audit: yield* AuditLog })
      yield* Effect.logInfo(egress.summary)
      return make(egress)
    }))

/** The backend's relay: each connection to the agent's relay port is served by the egress proxy. */
const relayOf = (egress: EgressShape | undefined): RelaySettings | undefined =>
  egress === undefined
    ? undefined
    : { port: egress.computer.relayPort, handler: (computer, connection) => egress.serve(computer, connection.socket) }

const missing = (backend: string, what: string) => Layer.fail(providerError(backend, "start", "Denied", `${what} is required`))

const hostLayer = (settings: SettingsShape) =>
  withEgress(settings, (egress) =>
    backendFrom("host", () => import("./backends/host/HostBackend.js"), (HostBackend) =>
      HostBackend.layer({
        relay: relayOf(egress),
        egress: egress?.computer,
        stateDir: settings.stateDir,
        network: settings.network,
        sandbox: settings.unsafeNoSandbox ? "none" : "bwrap",
        bwrap: settings.bwrapPath,
        limits: { pids: settings.pidsLimit, memory: settings.memory, cpu: settings.cpu },
        filesystem: settings.filesystem,
        retainBytes: settings.retainBytes,
        maxFinished: settings.maxFinished
      })))

const dockerLayer = (settings: SettingsShape, log: (line: string) => void) =>
  withEgress(settings, (egress) =>
    backendFrom("docker", () => import("./backends/docker/DockerBackend.js"), (DockerBackend) =>
      DockerBackend.layer({
        relay: relayOf(egress),
        egress: egress?.computer,
        engine: settings.engine,
        dockerHost: settings.dockerHost,
        image: settings.image,
        cpu: settings.cpu,
        memory: settings.memory,
        pidsLimit: settings.pidsLimit,
        network: settings.network,
        runFlags: settings.dockerRunFlags,
        onPullProgress: log,
        filesystem: settings.filesystem,
        adoptContainer: settings.dockerContainer,
        stateDir: settings.stateDir,
        retainBytes: settings.retainBytes,
        maxFinished: settings.maxFinished
      })))

const flyLayer = (settings: SettingsShape) => {
  const fly = settings.fly
  const app = fly.app
  const token = fly.token
  if (app === undefined) return missing("fly", "--fly-app (or FLY_APP_NAME)")
  if (token === undefined) return missing("fly", "a token in FLY_API_TOKEN or FLY_TOKEN (or --fly-token)")
  return backendFrom("fly", () => import("./backends/fly/FlyBackend.js"), (FlyBackend) =>
    FlyBackend.layer({ ...fly, app, token, network: settings.network }))
}

const e2bLayer = (settings: SettingsShape) => {
  const e2b = settings.e2b
  const apiKey = e2b.apiKey
  if (apiKey === undefined) return missing("e2b", "an API key in E2B_API_KEY (or --e2b-api-key)")
  const network = CloudEgress.e2bNetwork(settings.egress)
  if (Either.isLeft(network)) return Layer.fail(providerError("e2b", "start", "Invalid", network.left))
  return backendFrom("e2b", () => import("./backends/e2b/E2BBackend.js"), (E2BBackend) =>
    E2BBackend.layer({
      network: network.right,
      apiKey,
      template: e2b.template,
      sandboxTimeoutSec: e2b.sandboxTimeoutSec,
      maxRuntimeSec: e2b.maxRuntimeSec,
      metadata: e2b.metadata,
      envs: e2b.envs,
      apiUrl: e2b.apiUrl,
      sandboxUrl: e2b.sandboxUrl,
      domain: e2b.domain,
      home: e2b.home,
      retainBytes: settings.retainBytes,
      maxFinished: settings.maxFinished
    }))
}

const modalLayer = (settings: SettingsShape) => {
  const outbound = CloudEgress.modalOutbound(settings.egress)
  if (Either.isLeft(outbound)) return Layer.fail(providerError("modal", "start", "Invalid", outbound.left))
  return backendFrom("modal", () => import("./backends/modal/ModalBackend.js"), (ModalBackend) =>
    ModalBackend.layer({
      outbound: outbound.right,
      tokenId: settings.modal.tokenId,
      tokenSecret: settings.modal.tokenSecret,
      appName: settings.modal.appName,
      image: settings.modal.image,
      cpu: settings.modal.cpu,
      memoryMb: settings.modal.memoryMb,
      gpu: settings.modal.gpu,
      region: settings.modal.region,
      sandboxTimeoutSec: settings.modal.sandboxTimeoutSec,
      previewPorts: settings.modal.previewPorts,
      network: settings.network,
      retainBytes: settings.retainBytes,
      maxFinished: settings.maxFinished
    }))
}

/** What the cluster lacks (Unsupported) stops the server as any startup failure does. */
const kubernetesLayer = (settings: SettingsShape) =>
  backendFrom("kubernetes", () => import("./backends/kubernetes/KubernetesBackend.js"), (KubernetesBackend) =>
    KubernetesBackend.layer({ ...settings.kubernetes, network: settings.network }).pipe(
      Layer.mapError((error) => (error._tag === "Unsupported" ? providerError("kubernetes", "start", "Invalid", error.message) : error))
    ))

const wasmLayer = (settings: SettingsShape, mode: "module" | "toolset") =>
  backendFrom("wasm", () => import("./backends/wasm/WasmBackend.js"), (WasmBackend) =>
    WasmBackend.layer({
      mode,
      modulePath: settings.wasmPath,
      maxMemoryMb: settings.wasmMaxMemoryMb,
      timeoutMs: settings.wasmTimeoutMs,
      maxDiskBytes: settings.wasmMaxDiskBytes,
      stateDir: settings.stateDir
    }))

/**
 * The backend the settings ask for. `auto` picks docker when an engine answers, else host, and
 * says which on stderr.
 */
export const backendLayer = (settings: SettingsShape) =>
  Layer.unwrapEffect(Effect.gen(function*() {
    let backend = settings.backend
    if (backend === "auto") {
      const { ping } = yield* load("docker", () => import("./backends/docker/DockerBackend.js"))
      const reachable = yield* ping({ engine: settings.engine, dockerHost: settings.dockerHost })
      backend = reachable ? "docker" : "host"
      yield* Effect.logInfo(
        reachable
          ? `backend: docker (a ${settings.engine} engine answered; --backend host to use the host sandbox instead)`
          : `backend: host (no ${settings.engine} engine answered; --backend docker to insist)`
      )
    }
    // Pull progress goes to the log (stderr), never to stdout.
    const log = Runtime.runSync(yield* Effect.runtime<never>())
    switch (backend) {
      case "docker":
        return dockerLayer(settings, (line) => log(Effect.logInfo(line)))
      case "fly":
        return flyLayer(settings)
      case "e2b":
        return e2bLayer(settings)
      case "modal":
        return modalLayer(settings)
      case "kubernetes":
        return kubernetesLayer(settings)
      case "wasm":
        return wasmLayer(settings, "module")
      case "toolset":
        return wasmLayer(settings, "toolset")
      case "host":
        return hostLayer(settings)
    }
  }))

/** The runtime over the configured backend. */
export const runtimeLayer = (settings: SettingsShape, instanceId: string) =>
  KilntainersRuntime.layer(settings, backendLayer(settings), instanceId)

/**
 * Traces, when an OTLP endpoint is set (nothing is loaded otherwise). Provided around the whole
 * server: it is built first and released last, so the spans of shutdown are sent too.
 */
export const tracingLayer = (settings: SettingsShape, instanceId: string) =>
  Tracing.layer({ ...settings.otel, serviceVersion: serverInfo.version, instanceId })

/** Everything a server needs: the runtime over the configured backend, traced when asked. */
export const layer = (settings: SettingsShape, instanceId: string) =>
  runtimeLayer(settings, instanceId).pipe(Layer.provideMerge(tracingLayer(settings, instanceId)))

/** Logs go to stderr only: in stdio mode stdout carries the MCP protocol and nothing else. */
export const stderrLogger = Logger.replace(Logger.defaultLogger, Logger.prettyLogger({ stderr: true, colors: false }))
