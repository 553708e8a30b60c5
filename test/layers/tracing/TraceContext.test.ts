import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { ClientSpan, fromMeta } from "../../../src/layers/tracing/TraceContext.js"
import { tracesUrl } from "../../../src/layers/tracing/Tracing.js"

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
const SPAN = "00f067aa0ba902b7"

describe("the client's trace context in _meta (SEP-414, W3C Trace Context)", () => {
  it("reads traceparent and tracestate", () => {
    assert.deepStrictEqual(fromMeta({ traceparent: `00-${TRACE}-${SPAN}-01`, tracestate: "rojo=1,congo=2" }), {
      traceId: TRACE,
      spanId: SPAN,
      flags: 1,
      state: "rojo=1,congo=2"
    })
    assert.deepStrictEqual(fromMeta({ traceparent: `00-${TRACE}-${SPAN}-00` }), { traceId: TRACE, spanId: SPAN, flags: 0, state: undefined })
  })

  it("accepts a later version's extra fields, and ignores what W3C says is invalid", () => {
    assert.strictEqual(fromMeta({ traceparent: `01-${TRACE}-${SPAN}-01-future` })?.spanId, SPAN)
    for (
      const bad of [
        undefined,
        42,
        "",
        `ff-${TRACE}-${SPAN}-01`,
        `00-${TRACE}-${SPAN}-01-extra`,
        `00-${"0".repeat(32)}-${SPAN}-01`,
        `00-${TRACE}-${"0".repeat(16)}-01`,
        `00-${TRACE.toUpperCase()}-${SPAN}-01`,
        `00-${TRACE}-${SPAN}`,
        `00-${TRACE}-${SPAN}-01${" ".repeat(300)}`
      ]
    ) {
      assert.isUndefined(fromMeta({ traceparent: bad, tracestate: "a=b" }), String(bad))
    }
    assert.isUndefined(fromMeta({ traceparent: `00-${TRACE}-${SPAN}-01`, tracestate: "x".repeat(600) })?.state, "an oversized tracestate is dropped")
  })

  it.effect("the default parent carries ids and the sampling bit", () =>
    Effect.gen(function*() {
      const make = yield* ClientSpan
      const parent = make({ traceId: TRACE, spanId: SPAN, flags: 0, state: undefined })
      assert.deepStrictEqual([parent.traceId, parent.spanId, parent.sampled], [TRACE, SPAN, false])
    }))
})

describe("where spans are sent", () => {
  it("the endpoint is a base URL, unless it already names /v1/traces", () => {
    assert.strictEqual(tracesUrl("http://collector:4318"), "http://collector:4318/v1/traces")
    assert.strictEqual(tracesUrl("http://collector:4318/"), "http://collector:4318/v1/traces")
    assert.strictEqual(tracesUrl("https://otlp.example.com/otlp"), "https://otlp.example.com/otlp/v1/traces")
    assert.strictEqual(tracesUrl("http://collector:4318/v1/traces"), "http://collector:4318/v1/traces")
  })
})
