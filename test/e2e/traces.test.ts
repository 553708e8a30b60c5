import { assert, it } from "@effect/vitest"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { Effect } from "effect"
import { existsSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { binPath, root, startServer, waitFor } from "../support/McpHarness.js"
import * as OtlpReceiver from "../support/OtlpReceiver.js"
import { bwrapWorks, describeIf } from "../support/Requirements.js"

const CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
const CLIENT_SPAN = "b7ad6b7169203331"
const SECRET = "e2e-ENV-SECRET-5ac1d3"

/** The built CLI over stdio with a probe recording which OpenTelemetry modules it loads. */
const serverWithProbe = (args: ReadonlyArray<string>, env: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const modules = join(mkdtempSync(join(tmpdir(), "kt-probe-")), "modules")
      const server = await startServer(["--backend", "host", ...args], {
        NODE_OPTIONS: `--import ${join(root, "test", "support", "module-probe.mjs")}`,
        KT_MODULE_PROBE: modules,
        ...env
      })
      const loaded = () => (existsSync(modules) ? readFileSync(modules, "utf8").split("\n").filter((line) => line !== "") : [])
      return { server, loaded }
    }),
    ({ server }) => Effect.promise(() => server.client.close().catch(() => undefined))
  )

describeIf(bwrapWorks && existsSync(binPath), "bubblewrap and a built CLI (npm run build)")("traces from the built CLI", () => {
  it.scopedLive("OTEL_EXPORTER_OTLP_ENDPOINT set: the call, its computer and its process arrive, in the client's trace", () =>
    Effect.gen(function*() {
      const receiver = yield* OtlpReceiver.make
      const { server, loaded } = yield* serverWithProbe([], { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_SERVICE_NAME: "kt-e2e" })
      const result = yield* Effect.promise(() =>
        server.client.request({
          method: "tools/call",
          params: {
            name: "sandbox_exec",
            arguments: { command: "printf %s \"$TRACE_TEST_VALUE\"; exit 3", env: { TRACE_TEST_VALUE: SECRET } },
            _meta: { traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01` }
          }
        }, CallToolResultSchema)
      )
      const structured = result.structuredContent as { stdout: string; exit_code: number }
      assert.strictEqual(structured.stdout, SECRET, "the process got the value")
      assert.strictEqual(structured.exit_code, 3)
      // The client leaves: the server releases its computer, flushes its spans and exits.
      yield* Effect.promise(() => server.client.close())
      const arrived = yield* Effect.promise(() => waitFor(() => receiver.named("computer.release").length > 0, 20_000))
      assert.isTrue(arrived, `spans at shutdown; stderr: ${server.stderr()}`)

      const tool = receiver.named("tools/call sandbox_exec")[0]!
      assert.strictEqual(tool.traceId, CLIENT_TRACE)
      assert.strictEqual(tool.parentSpanId, CLIENT_SPAN)
      assert.strictEqual(tool.resource["service.name"], "kt-e2e")
      const process = receiver.named("process")[0]!
      assert.strictEqual(process.parentSpanId, tool.spanId)
      assert.strictEqual(process.attributes["process.exit.code"], 3)
      assert.strictEqual(process.attributes["kilntainers.process.stdout_bytes"], SECRET.length)
      assert.isNumber(process.attributes["process.pid"])
      const created = receiver.named("computer.create")[0]!
      assert.strictEqual(created.attributes["kilntainers.backend"], "host")
      assert.strictEqual(created.parentSpanId, tool.spanId)
      assert.includeMembers(receiver.childrenOf(created).map((span) => span.name), ["provider.create", "provider.connect"])
      assert.notInclude(receiver.bodies.join("\n"), SECRET)
      assert.deepStrictEqual(receiver.strays, [])
      assert.isTrue(loaded().some((url) => url.includes("@opentelemetry/exporter-trace-otlp-http")), "the probe sees the exporter load")
    }), 60_000)

  it.scopedLive("no endpoint: none of OpenTelemetry is loaded", () =>
    Effect.gen(function*() {
      const { server, loaded } = yield* serverWithProbe([])
      const result = yield* Effect.promise(() => server.call("sandbox_exec", { command: "echo ok" }))
      assert.strictEqual(result.structured.stdout, "ok\n")
      assert.deepStrictEqual(loaded(), [])
    }), 60_000)
})
