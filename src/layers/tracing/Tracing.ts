/**
 * kilntainers' tracing layer: where the spans of `services/Spans.ts` go. OTLP over HTTP, loaded
 * only when an endpoint is set; without one the tracer is disabled, so every span is a no-op and
 * its attributes are never computed.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"

/** Settings of the exporter. */
export interface TracingOptions {
  /** The collector's base URL (spans go to `<endpoint>/v1/traces`); nothing is exported without it. */
  readonly endpoint: string | undefined
  readonly serviceName: string
  readonly serviceVersion: string
  /** `service.instance.id`: this server's instance id. */
  readonly instanceId: string
  /** How long spans wait in the exporter's bounded queue before a batch is sent. */
  readonly exportDelayMs?: number | undefined
}

/** The exporter cannot be loaded. */
export class TracingError extends Schema.TaggedError<TracingError>()("TracingError", {
  message: Schema.String
}) {}

/** Where spans are sent: the endpoint as a base URL (OTEL_EXPORTER_OTLP_ENDPOINT's rule), unless it already names `/v1/traces`. */
export const tracesUrl = (endpoint: string): string => {
  const trimmed = endpoint.trim()
  if (/\/v1\/traces\/?$/.test(trimmed)) return trimmed
  return `${trimmed.replace(/\/+$/, "")}/v1/traces`
}

/**
 * Tracing for a server: the OTLP exporter when an endpoint is set (its modules are imported only
 * then), else the tracer disabled, so spans cost nothing.
 */
export const layer = (options: TracingOptions): Layer.Layer<never, TracingError> =>
  options.endpoint === undefined
    ? Layer.setTracerEnabled(false)
    : Layer.unwrapEffect(
      Effect.tryPromise({
        try: () => import("./Otlp.js"),
        catch: (error) => new TracingError({ message: `cannot load the OpenTelemetry exporter: ${String(error)}` })
      }).pipe(Effect.map((Otlp) => Otlp.layer({ ...options, url: tracesUrl(options.endpoint!) })))
    )
