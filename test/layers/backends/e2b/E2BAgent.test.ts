// The sandbox's agent (E2BAgent.ts) against the fake: the key where servers read it and the guest
// does not, a connector started from inside the sandbox without the key refused, processes that
// outlive the connection that started them, and what a pause does to them (E2B's two kinds).
import { assert, it } from "@effect/vitest"
import { Effect, Exit, Scope, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import { newKey } from "../../../../src/layers/backends/agent/AgentHandshake.js"
import * as ProcessAgent from "../../../../src/layers/backends/agent/ProcessAgent.js"
import { AGENT_KEY_METADATA, agentDir } from "../../../../src/layers/backends/e2b/E2BAgent.js"
import * as E2BBackend from "../../../../src/layers/backends/e2b/E2BBackend.js"
import { Backend, type Connection, type Instance, ownedEvents } from "../../../../src/services/Backend.js"
import * as E2BFake from "../../../support/E2BFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { computerId, ENV, exec, metadataFor, options, spec, text } from "./E2BTestKit.js"

const started = bwrapWorks ? E2BFake.start({ defaultTimeoutSec: 120 }) : undefined
let fake: E2BFake.E2BFake
beforeAll(async () => {
  if (started) fake = await started
})
afterAll(async () => {
  await fake?.close()
})

const provider = <A, E>(body: Effect.Effect<A, E, Backend | Scope.Scope>) =>
  Effect.scoped(Effect.provide(body, E2BBackend.layer(options(fake))))

/** A permanent sandbox, removed with the Scope. */
const permanent = (what: string) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    return yield* Effect.acquireRelease(
      Effect.flatMap(metadataFor(computerId(what), false, backend.image), backend.create),
      (instance) => Effect.ignore(backend.remove(instance))
    )
  })

/** A connection in a Scope of its own, closed by the caller (a server that comes and goes). */
const connectFor = (instance: Instance) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const scope = yield* Scope.make()
    const connection = yield* Scope.extend(backend.connect(instance), scope)
    return { connection, close: Scope.close(scope, Exit.void) }
  })

/** Starts `argv` through the agent and lets go of it at once: the sandbox holds it. */
const startHeld = (connection: Connection, argv: ReadonlyArray<string>) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* connection.spawn(spec(argv))
    const handle = process.handle
    assert.isDefined(handle, "a process the agent holds has a handle")
    // Its first line: it runs.
    yield* ownedEvents(process).pipe(Stream.filter((event) => event._tag === "Stdout"), Stream.take(1), Stream.runDrain)
    return handle!
  }))

const sandboxOf = (instance: Instance) => fake.sandboxes().find((s) => s.sandboxID === instance.providerId)

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: the sandbox's agent", () => {
  it.live("keeps its key in the sandbox's metadata, where a server reads it and no process inside does", () =>
    provider(Effect.gen(function*() {
        const instance = yield* permanent("key")
        const key = sandboxOf(instance)?.metadata[AGENT_KEY_METADATA]
        assert.match(key ?? "", /^[0-9a-f]{64}$/)
        assert.notProperty(sandboxOf(instance)?.envVars ?? {}, AGENT_KEY_METADATA)
        const { connection } = yield* connectFor(instance)
        // Nothing in the guest's environment, its processes' command lines or its files carries it
        // (the key is looked for here, never named in the sandbox).
        const seen = yield* exec(connection, [
          "sh",
          "-c",
          `env; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < "$f"; echo; done; find ${E2BFake.FAKE_HOME} /tmp -type f -size -2M -exec cat {} + 2>/dev/null; true`
        ])
        assert.include(text(seen.stdout), "E2B_SANDBOX=true", "what the guest sees was read")
        assert.notInclude(text(seen.stdout), key!)
    })), 60_000)

  it.live("refuses a connector started inside the sandbox without the key, and serves the servers after", () =>
    provider(Effect.gen(function*() {
        const instance = yield* permanent("guest")
        const { connection } = yield* connectFor(instance)
        assert.isDefined(connection.held, "the sandbox holds its processes")
        // The guest's own process (through the agent itself) runs the connector with a key it made up.
        const guest: ProcessAgent.ProcessHost = {
          backend: "e2b",
          spawn: connection.spawn,
          dir: agentDir(E2BFake.FAKE_HOME),
          cwd: E2BFake.FAKE_HOME,
          env: ENV
        }
        const forged = yield* Effect.either(Effect.scoped(ProcessAgent.attach(guest, newKey())))
        assert.strictEqual(forged._tag, "Left")
        if (forged._tag === "Left") assert.match(forged.left.message, /key|ended|closed/)
        const after = yield* exec(connection, ["echo", "still served"])
        assert.strictEqual(text(after.stdout), "still served\n")
    })), 60_000)

  it.live("a process outlives the connection that started it: the next connection finds it under its handle, from the same agent", () =>
    provider(Effect.gen(function*() {
        const instance = yield* permanent("outlives")
        const first = yield* connectFor(instance)
        const boot = first.connection.held!.boot
        const handle = yield* startHeld(first.connection, ["sh", "-c", "echo up; sleep 30"])
        yield* first.close
        const second = yield* connectFor(instance)
        assert.strictEqual(second.connection.held!.boot, boot, "the same agent")
        const listed = yield* second.connection.held!.list
        const found = listed.find((one) => one.handle === handle)
        assert.isDefined(found)
        assert.isUndefined(found!.exit, "it still runs")
        const head = yield* second.connection.held!.read(handle, "stdout", 0, 100)
        assert.strictEqual(Buffer.from(head.data).toString(), "up\n")
        yield* second.close
    })), 60_000)

  it.live("a pause without memory (a cold boot) ends the agent: the next connection has another boot, and the process is gone", () =>
    provider(Effect.gen(function*() {
        const backend = yield* Backend
        const instance = yield* permanent("cold")
        const first = yield* connectFor(instance)
        const boot = first.connection.held!.boot
        const handle = yield* startHeld(first.connection, ["sh", "-c", "echo up; sleep 30"])
        yield* first.close
        assert.isTrue(yield* Effect.promise(() => fake.pause(instance.providerId, { memory: false })))
        const resumed = yield* backend.start(instance)
        const second = yield* connectFor(resumed)
        assert.notStrictEqual(second.connection.held!.boot, boot, "another agent")
        const listed = yield* second.connection.held!.list
        assert.isUndefined(listed.find((one) => one.handle === handle && one.exit === undefined))
        const ps = yield* exec(second.connection, ["sh", "-c", "ps -eo args | grep -c '^sleep 30$' || true"])
        assert.strictEqual(text(ps.stdout).trim(), "0")
        yield* second.close
    })), 90_000)

  it.live("a pause with memory (E2B's default, from outside) brings the same agent back, still holding the process", () =>
    provider(Effect.gen(function*() {
        const backend = yield* Backend
        const instance = yield* permanent("warm")
        const first = yield* connectFor(instance)
        const boot = first.connection.held!.boot
        const handle = yield* startHeld(first.connection, ["sh", "-c", "echo up; sleep 30"])
        yield* first.close
        assert.isTrue(yield* Effect.promise(() => fake.pause(instance.providerId, { memory: true })))
        const resumed = yield* backend.start(instance)
        const second = yield* connectFor(resumed)
        assert.strictEqual(second.connection.held!.boot, boot, "the same agent")
        const found = (yield* second.connection.held!.list).find((one) => one.handle === handle)
        assert.isDefined(found)
        assert.isUndefined(found!.exit)
        yield* second.close
    })), 90_000)

  it.live("a released permanent sandbox whose agent holds a running process is left running; an idle one is paused", () =>
    provider(Effect.gen(function*() {
        const backend = yield* Backend
        const busy = yield* permanent("busy")
        const idle = yield* permanent("idle")
        const a = yield* connectFor(busy)
        yield* startHeld(a.connection, ["sh", "-c", "echo up; sleep 30"])
        yield* a.close
        const b = yield* connectFor(idle)
        yield* exec(b.connection, ["true"])
        yield* b.close
        yield* backend.suspend!(busy)
        yield* backend.suspend!(idle)
        assert.strictEqual(sandboxOf(busy)?.state, "running")
        assert.strictEqual(sandboxOf(idle)?.state, "paused")
    })), 90_000)
})
