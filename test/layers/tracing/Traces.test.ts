import { assert, describe, it } from "@effect/vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js"
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import * as HttpServer from "../../../src/layers/mcp/HttpServer.js"
import { ready, serve, type ToolServices } from "../../../src/layers/mcp/McpServer.js"
import * as Runtime from "../../../src/layers/Runtime.js"
import * as Tracing from "../../../src/layers/tracing/Tracing.js"
import * as Spans from "../../../src/services/Spans.js"
import { Settings, type SettingsShape } from "../../../src/services/Settings.js"
import * as OtlpReceiver from "../../support/OtlpReceiver.js"
import * as ScriptedBackend from "../../support/ScriptedBackend.js"

/** The client's span (W3C traceparent) and its vendors' state, as a client puts them in `_meta`. */
const CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
const CLIENT_SPAN = "00f067aa0ba902b7"
const traceparent = (flags = "01") => `00-${CLIENT_TRACE}-${CLIENT_SPAN}-${flags}`
const TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"

/** Values that must never leave the server in a span. */
const SECRETS = {
  env: "tok-ENVVALUE-7f3a9c2e51",
  bearer: "BEARERSECRET0123456789",
  urlPassword: "pa55-URLPASSWORD",
  assignment: "ASSIGNEDSECRET-99887766",
  badArgument: "hunter2-NOT-A-NUMBER"
}

/**
 * Runs `body` against an MCP server session over the scripted backend, traced to an in-process
 * OTLP receiver; answers when the runtime is shut down (every span flushed) with the receiver.
 */
const tracedSession = <A>(
  body: (
    call: (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) => Effect.Effect<any>,
    scripted: Effect.Effect.Success<ReturnType<typeof ScriptedBackend.make>>
  ) => Effect.Effect<A>,
  overrides: Partial<SettingsShape> = {}
) =>
  Effect.gen(function*() {
    const receiver = yield* OtlpReceiver.make
    const scripted = yield* ScriptedBackend.make()
    const settings = Settings.make({ killGraceMs: 50, ...overrides })
    const layer = Runtime.layer(settings, scripted.layer, "test").pipe(
      Layer.provideMerge(Tracing.layer({
        endpoint: receiver.endpoint,
        serviceName: "kt-test",
        serviceVersion: "0.0.0-test",
        instanceId: "instance-1",
        exportDelayMs: 50
      }))
    )
    const result = yield* Effect.gen(function*() {
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair()
      const session = yield* Effect.fork(
        Effect.flatMap(Effect.context<ToolServices>(), (context) => serve(settings, ready(context), serverSide, "session-1"))
      )
      const client = new Client({ name: "trace-test", version: "1.2.3" })
      yield* Effect.promise(() => client.connect(clientSide))
      const call = (name: string, args: Record<string, unknown>, meta?: Record<string, unknown>) =>
        Effect.promise(() =>
          client.request({ method: "tools/call", params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) } }, CallToolResultSchema)
        )
      const value = yield* body(call, scripted)
      // The client goes away: the session releases its temporary computers (computer.release).
      yield* Effect.promise(() => client.close())
      yield* Fiber.join(session)
      return value
    }).pipe(Effect.provide(layer))
    return { receiver, result, scripted }
  })

const only = <T>(items: ReadonlyArray<T>, what: string): T => {
  assert.strictEqual(items.length, 1, `exactly one ${what}, got ${items.length}`)
  return items[0]!
}

describe("traces over OTLP/HTTP", () => {
  it.scopedLive("a tool call continues the client's trace; computer creation, provider calls and the process are its children", () =>
    Effect.gen(function*() {
      const { receiver } = yield* tracedSession((call) =>
        call("spawn", { command: "fail-fast" }, { traceparent: traceparent(), tracestate: TRACESTATE })
      )
      assert.deepStrictEqual(receiver.strays, [])
      const tool = only(receiver.named("tools/call spawn"), "tool call span")
      assert.strictEqual(tool.traceId, CLIENT_TRACE, "the client's trace")
      assert.strictEqual(tool.parentSpanId, CLIENT_SPAN, "the client's span is the parent")
      assert.strictEqual(tool.traceState, TRACESTATE, "the client's tracestate travels on")
      assert.strictEqual(tool.kind, 2, "server kind")
      assert.strictEqual(tool.attributes["mcp.method.name"], "tools/call")
      assert.strictEqual(tool.attributes["gen_ai.tool.name"], "spawn")
      assert.strictEqual(tool.attributes["gen_ai.operation.name"], "execute_tool")
      // A transport without MCP session ids (stdio, in-memory) is one session: the connection's.
      assert.strictEqual(tool.attributes["kilntainers.session"], "session-1")
      assert.strictEqual(tool.attributes["network.transport"], "pipe")
      assert.notProperty(tool.attributes, "mcp.session.id")
      assert.strictEqual(tool.attributes["kilntainers.process.id"], "p1")
      assert.strictEqual(tool.attributes["kilntainers.client.name"], "trace-test")
      assert.isString(tool.attributes["kilntainers.computer.id"])
      assert.isAbove(tool.attributes["kilntainers.result.bytes"] as number, 20)
      assert.strictEqual(tool.status.code, 1, "ok")
      assert.deepStrictEqual(tool.resource["service.name"], "kt-test")
      assert.deepStrictEqual(tool.resource["service.instance.id"], "instance-1")

      const created = only(receiver.named("computer.create"), "computer.create span")
      assert.strictEqual(created.parentSpanId, tool.spanId, "created for this call")
      assert.strictEqual(created.attributes["kilntainers.backend"], "scripted")
      assert.strictEqual(created.attributes["kilntainers.computer.id"], tool.attributes["kilntainers.computer.id"])
      assert.strictEqual(created.attributes["kilntainers.computer.generation"], 1)
      assert.strictEqual(created.attributes["kilntainers.computer.temporary"], true)
      const providerCalls = receiver.childrenOf(created).map((span) => span.name).sort()
      assert.deepStrictEqual(providerCalls, ["provider.connect", "provider.create"])
      for (const span of receiver.childrenOf(created)) assert.strictEqual(span.kind, 3, `${span.name} is a client span`)
      assert.strictEqual(only(receiver.named("provider.create"), "create").attributes["kilntainers.computer.provider_id"], "scripted-1")

      const process = only(receiver.named("process"), "process span")
      assert.strictEqual(process.parentSpanId, tool.spanId)
      assert.strictEqual(process.traceId, CLIENT_TRACE)
      assert.strictEqual(process.attributes["kilntainers.process.id"], "p1")
      assert.strictEqual(process.attributes["kilntainers.process.command"], "fail-fast")
      assert.strictEqual(process.attributes["kilntainers.process.tty"], false)
      assert.strictEqual(process.attributes["process.exit.code"], 1)
      assert.strictEqual(process.attributes["process.pid"], 1)
      assert.strictEqual(process.attributes["kilntainers.process.stderr_bytes"], 5)
      assert.strictEqual(process.attributes["kilntainers.process.stdout_bytes"], 0)
      assert.isTrue(process.endNanos >= process.startNanos)
      assert.lengthOf(receiver.childrenOf(process), 0, "starting it is part of its span")

      // When the session ends its temporary computer is released, and the shutdown's spans are flushed.
      const released = only(receiver.named("computer.release"), "computer.release span")
      assert.strictEqual(released.attributes["kilntainers.computer.release"], "remove")
      assert.isTrue(receiver.named("provider.remove").some((span) => span.parentSpanId === released.spanId))
      // The reaper runs in the background from the start: its passes are traces of their own.
      assert.isAtLeast(receiver.named("reaper.pass").length, 1)
      assert.isUndefined(receiver.named("reaper.pass")[0]!.parentSpanId)
    }))

  it.scopedLive("a failed call is an error span with the error's tag; lifecycle steps and failed provider calls are recorded", () =>
    Effect.gen(function*() {
      const { receiver } = yield* tracedSession((call) =>
        Effect.gen(function*() {
          const made = yield* call("computer_create", { computer_id: "box", temporary: false })
          assert.notStrictEqual(made.isError, true)
          yield* call("kill", { id: "p42" })
          yield* call("computer_restart", { computer_id: "box" })
          yield* call("computer_factory_reset", { computer_id: "box" })
          yield* call("computer_delete", { computer_id: "box" })
          yield* call("no_such_tool", {})
        })
      )
      const kill = only(receiver.named("tools/call kill"), "kill span")
      assert.strictEqual(kill.status.code, 2, "error status")
      assert.strictEqual(kill.attributes["error.type"], "tool_error")
      assert.strictEqual(kill.attributes["kilntainers.error"], "ProcessNotFound")
      assert.strictEqual(kill.attributes["kilntainers.process.id"], "p42")
      assert.match(kill.status.message ?? "", /^ProcessNotFound: no process with id 'p42'/)
      assert.isUndefined(kill.parentSpanId, "no client span: a trace of its own")

      const unknown = only(receiver.named("tools/call no_such_tool"), "unknown tool span")
      assert.strictEqual(unknown.attributes["error.type"], "tool_error")
      assert.strictEqual(unknown.status.code, 2)

      for (const [tool, step] of [["computer_restart", "restart"], ["computer_factory_reset", "reset"], ["computer_delete", "delete"]]) {
        const call = only(receiver.named(`tools/call ${tool}`), tool)
        const span = only(receiver.named(`computer.${step}`), step)
        assert.strictEqual(span.parentSpanId, call.spanId, `${step} belongs to its call`)
        assert.strictEqual(span.attributes["kilntainers.computer.id"], "box")
        assert.strictEqual(span.attributes["kilntainers.computer.temporary"], false)
      }
      const restart = only(receiver.named("computer.restart"), "restart")
      assert.deepStrictEqual(receiver.childrenOf(restart).map((span) => span.name).sort(), ["provider.connect", "provider.restart"])
      assert.strictEqual(restart.attributes["kilntainers.computer.generation"], 2, "the new connection is the second generation")
      const reset = only(receiver.named("computer.reset"), "reset")
      assert.deepStrictEqual(receiver.childrenOf(reset).map((span) => span.name).sort(), ["provider.connect", "provider.create", "provider.remove"])
      // The registry looked for "box" at the provider first, and found nothing.
      const find = receiver.named("provider.find").find((span) => span.attributes["kilntainers.computer.id"] === "box")
      assert.isDefined(find)
      assert.strictEqual(find!.attributes["kilntainers.provider.found"], 0)
    }))

  it.scopedLive("attaching a computer the provider has, its loss (a trace of its own) and its recovery", () =>
    Effect.gen(function*() {
      const { receiver } = yield* tracedSession((call, scripted) =>
        Effect.gen(function*() {
          yield* scripted.plant({ id: "kept", temporary: false, image: "scripted-image", created: "2026-01-01T00:00:00.000Z", instance: "earlier" })
          yield* call("spawn", { command: "server", computer_id: "kept", background: true })
          yield* scripted.byId("kept")!.lose("its container was removed outside kilntainers")
          // The loss is noticed in the computer's own fiber; the next call opens it again.
          for (let i = 0; i < 1_000 && !scripted.calls.includes("disconnect kept"); i++) yield* Effect.yieldNow()
          assert.include(scripted.calls, "disconnect kept")
          yield* call("spawn", { command: "fail-fast", computer_id: "kept" })
        })
      )
      const attached = only(receiver.named("computer.attach"), "computer.attach")
      assert.strictEqual(attached.attributes["kilntainers.computer.id"], "kept")
      assert.deepStrictEqual(receiver.childrenOf(attached).map((span) => span.name), ["provider.connect"], "running: attached without a start")
      const lost = only(receiver.named("computer.lost"), "computer.lost")
      assert.isUndefined(lost.parentSpanId, "noticed in the background: a trace of its own")
      assert.strictEqual(lost.attributes["kilntainers.reason"], "its container was removed outside kilntainers")
      assert.strictEqual(lost.attributes["kilntainers.computer.generation"], 1)
      const recovered = only(receiver.named("computer.recover"), "computer.recover")
      assert.includeMembers(receiver.childrenOf(recovered).map((span) => span.name), ["provider.find", "provider.connect"])
      assert.strictEqual(recovered.attributes["kilntainers.computer.generation"], 2)
      const killed = receiver.named("process").find((span) => span.attributes["kilntainers.process.command"] === "server")
      assert.strictEqual(killed?.attributes["kilntainers.reason"], "computer lost: its container was removed outside kilntainers")
    }))

  it.scopedLive("a warm pool's computer handed out is an adopt step of the call", () =>
    Effect.gen(function*() {
      const { receiver } = yield* tracedSession((call) => call("spawn", { command: "fail-fast" }), { warmPool: 1 })
      const adopt = only(receiver.named("computer.adopt"), "computer.adopt")
      const tool = only(receiver.named("tools/call spawn"), "tool call")
      assert.strictEqual(adopt.parentSpanId, tool.spanId)
      assert.strictEqual(adopt.attributes["kilntainers.computer.new_id"], tool.attributes["kilntainers.computer.id"])
      assert.match(String(adopt.attributes["kilntainers.computer.id"]), /^pool-/)
      assert.deepStrictEqual(receiver.childrenOf(adopt).map((span) => span.name), ["provider.adopt"])
      assert.isTrue(receiver.named("computer.create").some((span) => span.attributes["kilntainers.computer.pooled"] === true))
    }))

  it.scopedLive("a provider failure is recorded with its reason, without the provider's cause", () =>
    Effect.gen(function*() {
      const receiver = yield* OtlpReceiver.make
      const scripted = yield* ScriptedBackend.make()
      const layer = Runtime.layer(Settings.make({ killGraceMs: 50 }), scripted.layer, "test").pipe(
        Layer.provideMerge(Tracing.layer({ endpoint: receiver.endpoint, serviceName: "kt", serviceVersion: "0", instanceId: "i", exportDelayMs: 50 }))
      )
      yield* Effect.gen(function*() {
        const { Computers } = yield* Effect.promise(() => import("../../../src/services/Computers.js"))
        const computers = yield* Computers
        yield* scripted.failNext("create", "the engine said no")
        const failed = yield* Effect.either(computers.create("s", { computer_id: "doomed" }))
        assert.strictEqual(failed._tag, "Left")
      }).pipe(Effect.provide(layer))
      const create = only(receiver.named("provider.create"), "provider.create")
      assert.strictEqual(create.status.code, 2)
      assert.strictEqual(create.attributes["kilntainers.provider.failure"], "Failed")
      assert.strictEqual(create.attributes["error.type"], "ProviderError")
      assert.match(create.status.message ?? "", /^ProviderError: scripted backend: cannot create: the engine said no/)
      const computer = only(receiver.named("computer.create"), "computer.create")
      assert.strictEqual(computer.status.code, 2)
      assert.strictEqual(create.parentSpanId, computer.spanId)
    }))

  it.scopedLive("no environment value, token or rejected argument appears in any exported byte", () =>
    Effect.gen(function*() {
      const { receiver, scripted } = yield* tracedSession((call) =>
        Effect.gen(function*() {
          const command = `API_KEY=${SECRETS.assignment} curl -H "Authorization: Bearer ${SECRETS.bearer}" ` +
            `https://agent:${SECRETS.urlPassword}@example.com/ && echo $API_TOKEN`
          yield* call("spawn", { command, env: { API_TOKEN: SECRETS.env }, background: true }, { traceparent: traceparent() })
          yield* call("spawn", { command: "echo-stdin", cols: SECRETS.badArgument })
          yield* call("sandbox_exec", { command: "fail-fast", env: { OTHER: SECRETS.env } })
        })
      )
      // The process really got its environment (the test would prove nothing otherwise).
      assert.strictEqual(scripted.spawned[0]!.spec.env.API_TOKEN, SECRETS.env)
      const everything = receiver.bodies.join("\n")
      assert.isAbove(receiver.spans.length, 8)
      for (const [what, secret] of Object.entries(SECRETS)) assert.notInclude(everything, secret, `${what} leaked into a span`)
      const process = receiver.named("process").find((span) => String(span.attributes["kilntainers.process.command"]).includes("curl"))
      assert.isDefined(process)
      assert.include(String(process!.attributes["kilntainers.process.command"]), "API_KEY=***")
      assert.include(String(process!.attributes["kilntainers.process.command"]), "Authorization: ***")
      assert.include(String(process!.attributes["kilntainers.process.command"]), "https://agent:***@example.com/")
      const invalid = receiver.named("tools/call spawn").find((span) => span.attributes["kilntainers.error"] === "InvalidInput")
      assert.isDefined(invalid, "the rejected call is traced")
      assert.match(invalid!.status.message ?? "", /^InvalidInput: invalid arguments for spawn/)
    }))

  it.scopedLive("a client that did not sample its span gets none recorded", () =>
    Effect.gen(function*() {
      const { receiver } = yield* tracedSession((call) =>
        Effect.gen(function*() {
          yield* call("spawn", { command: "fail-fast" }, { traceparent: traceparent("00") })
          yield* call("ps", {}, { traceparent: traceparent("01") })
        })
      )
      assert.lengthOf(receiver.named("tools/call spawn"), 0)
      assert.lengthOf(receiver.named("process"), 0)
      assert.lengthOf(receiver.named("computer.create"), 0)
      assert.lengthOf(receiver.named("tools/call ps"), 1, "the sampled call is there")
    }))

  it.scopedLive("an egress decision is a span of its own trace with the host, the rule and injected header names", () =>
    Effect.gen(function*() {
      const receiver = yield* OtlpReceiver.make
      const layer = Tracing.layer({ endpoint: receiver.endpoint, serviceName: "kt", serviceVersion: "0", instanceId: "i", exportDelayMs: 50 })
      yield* Effect.gen(function*() {
        yield* Spans.egressBytes({ sent: 120, received: 4096 }).pipe(
          Spans.egress({
            computerId: "box",
            host: "api.github.com",
            port: 443,
            method: "GET",
            allowed: true,
            rule: "api.github.com",
            intercepted: true,
            injected: ["Authorization"]
          })
        )
        yield* Effect.void.pipe(Spans.egress({ computerId: "box", host: "evil.example", port: 443, method: "CONNECT", allowed: false, rule: "evil.example" }))
      }).pipe(Effect.provide(layer))
      const [allowed, denied] = receiver.named("egress")
      assert.isDefined(allowed)
      assert.isDefined(denied)
      assert.isUndefined(allowed!.parentSpanId)
      assert.strictEqual(allowed!.kind, 3)
      assert.deepStrictEqual(
        {
          host: allowed!.attributes["server.address"],
          port: allowed!.attributes["server.port"],
          decision: allowed!.attributes["kilntainers.egress.decision"],
          injected: allowed!.attributes["kilntainers.egress.injected"],
          sent: allowed!.attributes["kilntainers.egress.bytes_sent"],
          received: allowed!.attributes["kilntainers.egress.bytes_received"]
        },
        { host: "api.github.com", port: 443, decision: "allow", injected: "Authorization", sent: 120, received: 4096 }
      )
      assert.strictEqual(denied!.attributes["kilntainers.egress.decision"], "deny")
      assert.strictEqual(denied!.attributes["http.request.method"], "CONNECT")
    }))
})

describe("traces over Streamable HTTP", () => {
  it.scopedLive("each MCP session's tool calls are traced, with the session id (HTTP requests themselves get no span)", () =>
    Effect.gen(function*() {
      const receiver = yield* OtlpReceiver.make
      const scripted = yield* ScriptedBackend.make()
      const layer = Runtime.layer(Settings.make({ killGraceMs: 50 }), scripted.layer, "test").pipe(
        Layer.provideMerge(Tracing.layer({ endpoint: receiver.endpoint, serviceName: "kt", serviceVersion: "0", instanceId: "i", exportDelayMs: 50 }))
      )
      const sessionId = yield* Effect.gen(function*() {
        const { port } = yield* HttpServer.serveHttp({
          host: "127.0.0.1",
          port: 0,
          sessionTimeoutMs: 60_000,
          authToken: undefined,
          allowUnauthenticated: false,
          maxSessions: 4
        })
        const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`))
        const client = new Client({ name: "http-trace-test", version: "1" })
        yield* Effect.acquireRelease(Effect.promise(() => client.connect(transport)), () => Effect.promise(() => client.close()))
        yield* Effect.promise(() =>
          client.request(
            { method: "tools/call", params: { name: "spawn", arguments: { command: "fail-fast" }, _meta: { traceparent: traceparent() } } },
            CallToolResultSchema
          )
        )
        return transport.sessionId
      }).pipe(Effect.scoped, Effect.provide(layer))
      const tool = only(receiver.named("tools/call spawn"), "tool call span over HTTP")
      assert.strictEqual(tool.parentSpanId, CLIENT_SPAN)
      assert.strictEqual(tool.attributes["network.transport"], "tcp")
      assert.isString(sessionId)
      assert.strictEqual(tool.attributes["mcp.session.id"], sessionId)
      assert.strictEqual(tool.attributes["kilntainers.session"], sessionId)
      assert.strictEqual(only(receiver.named("process"), "process").parentSpanId, tool.spanId)
      assert.isFalse(receiver.spans.some((span) => span.name.startsWith("http.server")), "no HTTP request spans")
    }))
})

describe("without an endpoint", () => {
  it.effect("spans are no-ops and their attributes are never computed", () =>
    Effect.gen(function*() {
      let computed = 0
      const probe = Effect.gen(function*() {
        const on = yield* Spans.enabled
        yield* Spans.annotate(() => {
          computed++
          return {}
        })
        return on
      }).pipe(Spans.span("probe", {
        attributes: () => {
          computed++
          return {}
        }
      }))
      const off = Tracing.layer({ endpoint: undefined, serviceName: "kt", serviceVersion: "0", instanceId: "i" })
      const done = yield* Deferred.make<boolean>()
      yield* Effect.flatMap(probe, (on) => Deferred.succeed(done, on)).pipe(Effect.provide(off))
      assert.isFalse(yield* Deferred.await(done))
      assert.strictEqual(computed, 0)
      // With the default tracer (a library user's runtime), the same span computes them.
      yield* probe
      assert.strictEqual(computed, 2)
    }))
})
