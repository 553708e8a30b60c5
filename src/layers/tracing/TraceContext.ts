/**
 * The client's trace, carried in a request's `params._meta` (SEP-414: `traceparent` and
 * `tracestate`, unprefixed, in W3C Trace Context format). A tool call's span continues it: the
 * client's span is its parent.
 */
import * as Context from "effect/Context"
import * as Tracer from "effect/Tracer"

/** A client's span as W3C Trace Context describes it. */
export interface TraceParent {
  /** 32 lower-case hex digits, not all zero. */
  readonly traceId: string
  /** 16 lower-case hex digits, not all zero. */
  readonly spanId: string
  /** Trace flags; bit 0 is "sampled". */
  readonly flags: number
  /** The vendors' `tracestate` list, as given (bounded). */
  readonly state: string | undefined
}

// version-traceid-parentid-flags; a future version may append fields after another dash.
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/
const ZEROS = /^0+$/
/** W3C: at most 32 list members; 512 characters is what implementations must be able to carry. */
const MAX_TRACESTATE = 512

/**
 * The client's span from a request's `_meta`, or undefined when it carries none or an invalid one
 * (W3C: an invalid `traceparent` is ignored, and so is its `tracestate`).
 */
export const fromMeta = (meta: Readonly<Record<string, unknown>>): TraceParent | undefined => {
  const header = meta.traceparent
  if (typeof header !== "string" || header.length > 256) return undefined
  const match = TRACEPARENT.exec(header.trim())
  if (match === null) return undefined
  const [, version, traceId, spanId, flags, rest] = match
  // Version ff is forbidden; version 00 has exactly four fields.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined
  if (ZEROS.test(traceId!) || ZEROS.test(spanId!)) return undefined
  const state = typeof meta.tracestate === "string" && meta.tracestate.length <= MAX_TRACESTATE && meta.tracestate.trim() !== ""
    ? meta.tracestate.trim()
    : undefined
  return { traceId: traceId!, spanId: spanId!, flags: parseInt(flags!, 16), state }
}

/**
 * Makes the parent span of a call from the client's span. The default knows trace id, span id and
 * sampling; the OpenTelemetry exporter replaces it with one that also carries `tracestate`.
 */
export class ClientSpan extends Context.Reference<ClientSpan>()("kilntainers/tracing/ClientSpan", {
  defaultValue: () => (parent: TraceParent): Tracer.ExternalSpan =>
    Tracer.externalSpan({ traceId: parent.traceId, spanId: parent.spanId, sampled: (parent.flags & 1) === 1 })
}) {}
