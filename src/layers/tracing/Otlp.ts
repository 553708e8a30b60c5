/**
 * The OTLP/HTTP exporter of traces: Effect's spans become OpenTelemetry spans (`@effect/opentelemetry`),
 * sent in batches as OTLP JSON by the SDK's exporter. Imported only when an endpoint is set (see
 * `Tracing.layer`): without one, none of the OpenTelemetry SDK is loaded.
 *
 * The SDK also reads the standard variables for what we do not set: `OTEL_EXPORTER_OTLP_HEADERS`
 * (a collector's credentials; never logged), `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_RESOURCE_ATTRIBUTES`,
 * `OTEL_TRACES_SAMPLER`. Sampling is parent-based by default: a client that did not sample its
 * span gets none recorded here either.
 */
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import * as Resource from "@effect/opentelemetry/Resource"
import * as OtelTracer from "@effect/opentelemetry/Tracer"
import { diag, type DiagLogger, DiagLogLevel } from "@opentelemetry/api"
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http"
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Runtime from "effect/Runtime"
import * as Tracer from "effect/Tracer"
import { ClientSpan } from "./TraceContext.js"
import type { TracingOptions } from "./Tracing.js"

/** Spans waiting to be sent; beyond this the SDK drops new ones (and says so) rather than grow. */
const MAX_QUEUED_SPANS = 4096

/** The SDK reports an export failure as the error's JSON (stack included): its message says enough. */
const readable = (message: string) => {
  try {
    const parsed: unknown = JSON.parse(message)
    if (typeof parsed === "object" && parsed !== null && "message" in parsed && typeof parsed.message === "string") {
      return `cannot export spans: ${parsed.message}`
    }
  } catch {
    // not JSON: the message as it is
  }
  return message
}

/**
 * The SDK's own complaints (an unreachable collector, dropped spans) go to our log on stderr: the
 * first as a warning, later ones at debug level, so a collector that is down does not flood the log.
 */
const diagnostics = Layer.scopedDiscard(Effect.gen(function*() {
  const log = Runtime.runFork(yield* Effect.runtime<never>())
  let warned = false
  const report = (message: string, args: ReadonlyArray<unknown>) => {
    const line = `traces: ${[readable(message), ...args.map(String)].join(" ")}`
    log(warned ? Effect.logDebug(line) : Effect.logWarning(`${line} (further exporter messages at debug level)`))
    warned = true
  }
  const logger: DiagLogger = {
    error: (message, ...args) => report(message, args),
    warn: (message, ...args) => report(message, args),
    info: () => {},
    debug: () => {},
    verbose: () => {}
  }
  yield* Effect.acquireRelease(
    Effect.sync(() => diag.setLogger(logger, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true })),
    () => Effect.sync(() => diag.disable())
  )
}))

/**
 * Effect's spans as OpenTelemetry spans, without OpenTelemetry's context propagation: that serves
 * libraries instrumented with OpenTelemetry's own API (none run here), and it would cost a context
 * object on every run of every fiber that holds a span (a process's fibers hold one for its life).
 */
const tracer = Layer.unwrapEffect(Effect.map(OtelTracer.make, (otel) =>
  Layer.setTracer(Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => otel.span(name, parent, context, links, startTime, kind, options),
    context: (run) => run()
  }))))

/** Exports every span to `url` (OTLP JSON over HTTP) until the layer is released, which flushes what is left. */
export const layer = (options: TracingOptions & { readonly url: string }) => {
  const provider = Layer.unwrapEffect(Effect.sync(() =>
    NodeSdk.layerTracerProvider(
      new BatchSpanProcessor(new OTLPTraceExporter({ url: options.url }), {
        maxQueueSize: MAX_QUEUED_SPANS,
        maxExportBatchSize: 512,
        scheduledDelayMillis: options.exportDelayMs ?? 2_000
      }),
      // A collector that is down delays shutdown by this much at most.
      { shutdownTimeout: "3 seconds" }
    )
  ))
  // Resource attributes: OTEL_RESOURCE_ATTRIBUTES, then ours.
  const resource = Resource.layerFromEnv(Resource.configToAttributes({
    serviceName: options.serviceName,
    serviceVersion: options.serviceVersion,
    attributes: { "service.instance.id": options.instanceId }
  }))
  return Layer.mergeAll(
    tracer.pipe(Layer.provide(OtelTracer.layerTracer), Layer.provide(provider), Layer.provide(resource)),
    // The client's tracestate travels with its span into ours.
    Layer.succeed(ClientSpan, (parent) =>
      OtelTracer.makeExternalSpan({
        traceId: parent.traceId,
        spanId: parent.spanId,
        traceFlags: parent.flags,
        traceState: parent.state
      }))
  ).pipe(Layer.provideMerge(diagnostics))
}
