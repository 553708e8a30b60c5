/**
 * The spans kilntainers records: their names, their attribute keys, and the functions that open
 * them. This is the contract every part writes its spans against (the kernel's actors, the MCP
 * server, the egress proxy, the traced provider); the spans go to Effect's own Tracer service
 * (`Effect.withSpan` reads it from the fiber), which `layers/tracing/Tracing.ts` sets up: the OTLP
 * exporter when an endpoint is set, else a disabled tracer.
 *
 * Spans: `tools/call <tool>` (server kind, a child of the client's span when `_meta` carries one),
 * `computer.<step>` (create, attach, restart, reset, recover, delete, release, adopt, lost, renew),
 * `provider.<call>` (client kind: every call of the `Backend`, see `TracedBackend.ts`), `process`
 * (from spawn to exit), `egress` (one decision of the egress proxy, and the connection it allowed).
 * Attributes follow OpenTelemetry's semantic conventions where one fits (`process.pid`,
 * `process.exit.code`, `server.address`, `error.type`) and are `kilntainers.*` otherwise. No span
 * carries an environment value, file contents, tool output or a token: commands are cut and masked
 * (`domain/Redact.ts`), errors are reduced to their tag and first line.
 *
 * Without an endpoint the tracer is disabled: every span is a no-op and its attributes are never
 * computed.
 */
import * as Effect from "effect/Effect"
import * as FiberRef from "effect/FiberRef"
import type * as Tracer from "effect/Tracer"
import type { ProcessInfo } from "../domain/Process.js"
import { commandCut, errorSummary } from "../domain/Redact.js"

/** Attribute keys. */
export const Attr = {
  backend: "kilntainers.backend",
  computerId: "kilntainers.computer.id",
  providerId: "kilntainers.computer.provider_id",
  temporary: "kilntainers.computer.temporary",
  generation: "kilntainers.computer.generation",
  reason: "kilntainers.reason",
  session: "kilntainers.session",
  processId: "kilntainers.process.id",
  command: "kilntainers.process.command",
  cwd: "kilntainers.process.cwd",
  tty: "kilntainers.process.tty",
  signal: "kilntainers.process.signal",
  stdoutBytes: "kilntainers.process.stdout_bytes",
  stderrBytes: "kilntainers.process.stderr_bytes",
  osPid: "process.pid",
  exitCode: "process.exit.code",
  errorType: "error.type",
  errorTag: "kilntainers.error",
  providerFailure: "kilntainers.provider.failure"
} as const

export type Attributes = Readonly<Record<string, unknown>>

/** Whether spans are recorded here (false: every span is a no-op). */
export const enabled: Effect.Effect<boolean> = FiberRef.get(FiberRef.currentTracerEnabled)

/** Adds attributes to the current span; `attributes` runs only when spans are recorded. */
export const annotate = (attributes: () => Attributes): Effect.Effect<void> =>
  Effect.flatMap(enabled, (on) => (on ? Effect.annotateCurrentSpan(attributes()) : Effect.void))

const field = (error: unknown, key: "_tag" | "message"): string | undefined =>
  typeof error === "object" && error !== null && key in error ? String((error as Record<string, unknown>)[key]) : undefined

/** The failure a span records in place of the real one: the tag and a safe summary, no fields, no cause. */
class SpanFailure extends Error {
  constructor(tag: string, summary: string) {
    super(summary)
    this.name = tag
  }
}

export interface SpanOptions {
  readonly kind?: Tracer.SpanKind
  /** A new trace (background work: renewal, loss, egress), not a child of whatever ran before. */
  readonly root?: boolean
  readonly parent?: Tracer.AnySpan | undefined
  /** Computed only when spans are recorded. */
  readonly attributes?: () => Attributes
  /** `error.type` of a failure (default: the error's tag). */
  readonly errorType?: string
}

/**
 * Runs the effect in a span. A failure is recorded by its tag and first line (`error.type`,
 * `kilntainers.error`, the status message), never with its fields or cause — a provider's error may
 * hold a request with credentials; the effect itself still fails with the original error.
 */
export const span = (name: string, options: SpanOptions = {}) => <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(enabled, (on) => {
    if (!on) return effect
    let original: E
    return effect.pipe(
      Effect.mapError((error) => {
        original = error
        const tag = field(error, "_tag") ?? "Error"
        return new SpanFailure(tag, errorSummary(tag, field(error, "message") ?? ""))
      }),
      Effect.tapError((failure) => Effect.annotateCurrentSpan({ [Attr.errorType]: options.errorType ?? failure.name, [Attr.errorTag]: failure.name })),
      Effect.withSpan(name, {
        kind: options.kind ?? "internal",
        // A stack trace per span costs more than the span; the name says where it is.
        captureStackTrace: false,
        ...(options.root ? { root: true } : {}),
        ...(options.parent === undefined ? {} : { parent: options.parent }),
        ...(options.attributes === undefined ? {} : { attributes: options.attributes() })
      }),
      Effect.mapError(() => original)
    )
  })

/** The steps of a computer's life that get a span. */
export type LifecycleStep = "create" | "attach" | "restart" | "reset" | "recover" | "delete" | "release" | "adopt" | "lost" | "renew"

/** A span of a computer's lifecycle step (`computer.create`, …). */
export const lifecycle = (step: LifecycleStep, attributes: () => Attributes, options: { readonly root?: boolean } = {}) =>
  span(`computer.${step}`, { attributes, ...options })

/**
 * A process's span, from spawn to exit (`processEnded` records how it ended): its handle, computer,
 * the command cut and masked, working directory and whether it has a terminal — never its environment.
 * A process stopped from outside (its computer lost, restarted, closed) ends its span when it is
 * stopped; `stopping` says why.
 */
export const process = (request: {
  readonly id: string
  readonly computerId: string
  readonly backend: string
  readonly command: string
  readonly spec: { readonly cwd: string; readonly tty?: unknown }
}, stopping: () => string | undefined) => <A, E, R>(untilExit: Effect.Effect<A, E, R>) =>
  untilExit.pipe(
    Effect.onInterrupt(() => annotate(() => ({ [Attr.reason]: stopping() ?? "stopped by kilntainers" }))),
    span("process", {
      attributes: () => ({
        [Attr.processId]: request.id,
        [Attr.computerId]: request.computerId,
        [Attr.backend]: request.backend,
        [Attr.command]: commandCut(request.command),
        [Attr.cwd]: request.spec.cwd,
        [Attr.tty]: request.spec.tty !== undefined
      })
    })
  )

/** How a process ended, on its span: exit code or signal, the OS pid, its output, why it was stopped. */
export const processEnded = (info: ProcessInfo, totals: { readonly stdout: number; readonly stderr: number }) =>
  annotate(() => ({
    ...(info.exitCode === undefined ? {} : { [Attr.exitCode]: info.exitCode }),
    ...(info.signal === undefined ? {} : { [Attr.signal]: info.signal }),
    ...(info.osPid === undefined ? {} : { [Attr.osPid]: info.osPid }),
    ...(info.reason === undefined ? {} : { [Attr.reason]: info.reason }),
    [Attr.stdoutBytes]: totals.stdout,
    [Attr.stderrBytes]: totals.stderr
  }))

/**
 * One decision of the egress proxy: a computer asked to reach `host:port`. Names of injected
 * headers are recorded, never their values; neither is the request's path or query.
 */
export interface EgressDecision {
  readonly computerId: string
  readonly host: string
  readonly port: number
  /** The HTTP method when the proxy sees it (plain HTTP, or an intercepted HTTPS request); `CONNECT` for a tunnel. */
  readonly method?: string | undefined
  readonly allowed: boolean
  /** The rule that allowed it, or, when denied, the rule that would. */
  readonly rule?: string | undefined
  /** The HTTPS connection was intercepted (to inject headers). */
  readonly intercepted?: boolean | undefined
  /** Names of the headers injected (recorded comma-separated). */
  readonly injected?: ReadonlyArray<string> | undefined
}

/**
 * Runs the handling of one proxied request or connection (the 403 of a denial, or the whole tunnel
 * of an allowed one) in an `egress` span of its own trace. Call `egressBytes` inside it when the
 * connection ends.
 */
export const egress = (decision: EgressDecision) =>
  span("egress", {
    kind: "client",
    root: true,
    attributes: () => ({
      [Attr.computerId]: decision.computerId,
      "server.address": decision.host,
      "server.port": decision.port,
      "kilntainers.egress.decision": decision.allowed ? "allow" : "deny",
      ...(decision.method === undefined ? {} : { "http.request.method": decision.method }),
      ...(decision.rule === undefined ? {} : { "kilntainers.egress.rule": decision.rule }),
      ...(decision.intercepted === undefined ? {} : { "kilntainers.egress.intercepted": decision.intercepted }),
      ...(decision.injected === undefined || decision.injected.length === 0 ? {} : { "kilntainers.egress.injected": decision.injected.join(",") })
    })
  })

/** Bytes a proxied connection carried, on its `egress` span. */
export const egressBytes = (bytes: { readonly sent: number; readonly received: number }) =>
  annotate(() => ({ "kilntainers.egress.bytes_sent": bytes.sent, "kilntainers.egress.bytes_received": bytes.received }))
