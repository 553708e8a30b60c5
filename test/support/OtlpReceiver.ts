import { Effect } from "effect"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"

/** A span as it arrived, with its attributes decoded from OTLP JSON's typed values. */
export interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly traceState: string | undefined
  readonly name: string
  /** OTLP SpanKind: 1 internal, 2 server, 3 client. */
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
  /** 0 unset, 1 ok, 2 error. */
  readonly status: { readonly code: number; readonly message?: string }
  readonly startNanos: bigint
  readonly endNanos: bigint
  readonly resource: Readonly<Record<string, unknown>>
}

/** OTLP JSON's AnyValue as a plain value. */
const valueOf = (value: Record<string, any>): unknown => {
  if ("stringValue" in value) return value.stringValue
  if ("boolValue" in value) return value.boolValue
  if ("intValue" in value) return Number(value.intValue)
  if ("doubleValue" in value) return value.doubleValue
  if ("arrayValue" in value) return (value.arrayValue.values ?? []).map(valueOf)
  return undefined
}

const attributesOf = (list: ReadonlyArray<{ key: string; value: Record<string, any> }> | undefined) =>
  Object.fromEntries((list ?? []).map(({ key, value }) => [key, valueOf(value)]))

const readBody = (request: IncomingMessage) =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    request.on("error", reject)
  })

/**
 * An OTLP/HTTP receiver on 127.0.0.1 (a stand-in for a collector): accepts `POST /v1/traces` in
 * OTLP JSON, keeps every raw body (to look for what must never be exported) and the decoded spans.
 * Anything else is answered 404 and recorded as a stray request.
 */
export const make = Effect.gen(function*() {
  const bodies: Array<string> = []
  const spans: Array<ReceivedSpan> = []
  const strays: Array<string> = []
  const server = createServer(async (request, response) => {
    const body = await readBody(request)
    if (request.method !== "POST" || request.url !== "/v1/traces" || !(request.headers["content-type"] ?? "").includes("json")) {
      strays.push(`${request.method} ${request.url} ${request.headers["content-type"]}`)
      response.writeHead(404).end()
      return
    }
    bodies.push(body)
    const payload = JSON.parse(body)
    for (const resourceSpans of payload.resourceSpans ?? []) {
      const resource = attributesOf(resourceSpans.resource?.attributes)
      for (const scopeSpans of resourceSpans.scopeSpans ?? []) {
        for (const span of scopeSpans.spans ?? []) {
          spans.push({
            traceId: span.traceId,
            spanId: span.spanId,
            parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
            traceState: span.traceState === "" ? undefined : span.traceState,
            name: span.name,
            kind: span.kind,
            attributes: attributesOf(span.attributes),
            status: span.status ?? { code: 0 },
            startNanos: BigInt(span.startTimeUnixNano),
            endNanos: BigInt(span.endTimeUnixNano),
            resource
          })
        }
      }
    }
    response.writeHead(200, { "content-type": "application/json" }).end("{}")
  })
  yield* Effect.acquireRelease(
    Effect.async<void>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.void))
    }),
    () => Effect.async<void>((resume) => {
      server.closeAllConnections()
      server.close(() => resume(Effect.void))
    })
  )
  const port = (server.address() as AddressInfo).port
  return {
    /** The base URL, as `--otel-endpoint` takes it. */
    endpoint: `http://127.0.0.1:${port}`,
    bodies,
    spans,
    strays,
    named: (name: string) => spans.filter((span) => span.name === name),
    childrenOf: (parent: ReceivedSpan) => spans.filter((span) => span.parentSpanId === parent.spanId && span.traceId === parent.traceId)
  }
})
