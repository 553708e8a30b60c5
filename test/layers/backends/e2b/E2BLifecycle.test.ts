// The E2B provider against what the real service does and the old fake did not: the plan's
// maximum runtime, 409 while a sandbox changes state, templates with an old envd, and an SDK
// without the process client the backend reads output from.
import { assert, it } from "@effect/vitest"
import { Effect, Fiber, Stream } from "effect"
import { Sandbox } from "e2b"
import { afterAll, beforeAll } from "vitest"
import { labelKey } from "../../../../src/domain/ComputerMetadata.js"
import * as E2BBackend from "../../../../src/layers/backends/e2b/E2BBackend.js"
import { END_GRACE_MS } from "../../../../src/layers/backends/e2b/E2BConnection.js"
import { Backend, type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import * as E2BFake from "../../../support/E2BFake.js"
import { envelope } from "../../../support/E2BFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import {
  advance,
  alignClocks,
  collect,
  computerId,
  count,
  eventually,
  exec,
  metadataFor,
  opened,
  options,
  services,
  spec,
  text,
  withKernel
} from "./E2BTestKit.js"

const MAX_RUNTIME_SEC = 4
let capped: E2BFake.E2BFake
let fake: E2BFake.E2BFake
beforeAll(async () => {
  if (!bwrapWorks) return
  // Time stands still at the fake until the test moves it, with the kernel's TestClock.
  capped = await E2BFake.start({ maxRuntimeSec: MAX_RUNTIME_SEC, manualClock: true })
  fake = await E2BFake.start({
    pauseDelayMs: 1200,
    templates: { "legacy-0.3": { envdVersion: "0.3.5" }, "legacy-0.5": { envdVersion: "0.5.0" } }
  })
})
afterAll(async () => {
  await capped?.close()
  await fake?.close()
})

const ID_KEY = labelKey("dashed", "id")
const sandboxOf = (on: E2BFake.E2BFake, id: string) => on.sandboxes().filter((s) => s.metadata[ID_KEY] === id)
const provider = <A, E>(body: Effect.Effect<A, E, Backend>, overrides: Partial<E2BBackend.E2BBackendOptions> = {}) =>
  Effect.scoped(Effect.provide(body, E2BBackend.layer(options(fake, overrides))))

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: the plan's maximum runtime", () => {
  // Processes as envd commands (a sandbox made before agents): the runtime's end as the kernel sees
  // it on the test clock. The agent's side of a pause is E2BAgent.test.ts's, on the live clock.
  const cappedOptions = { sandboxTimeoutSec: 2, maxRuntimeSec: MAX_RUNTIME_SEC, keepAliveIntervalMs: 500, processes: "envd" as const }

  /** Past the end of the runtime and the watch's grace after it, on both clocks. */
  const pastTheEnd = MAX_RUNTIME_SEC * 1000 + END_GRACE_MS + 500

  it.scoped("a temporary computer ends with its runtime: the agent is warned, renewals never ask past it, and it is lost saying why", () =>
    withKernel(capped, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("cap-temp")
      yield* alignClocks(capped)
      const start = capped.now()
      const computer = yield* computers.create("s1", { computer_id: id })
      const listed = (yield* computers.list("s1")).find((c) => c.computer_id === id)!
      assert.strictEqual(listed.ends_at, new Date(start + MAX_RUNTIME_SEC * 1000).toISOString())
      assert.match(listed.warning ?? "", /the provider ends this computer in 1 min \(its maximum runtime there\)/)
      const { pid } = yield* processes.spawn("s1", { computer_id: id, command: "sleep 300", background: true })
      const waiting = yield* Effect.fork(processes.wait("s1", { id: pid, timeoutMs: 20_000 }))
      yield* advance(capped, pastTheEnd, 250)
      const done = yield* Fiber.join(waiting)
      assert.strictEqual(done.status, "terminated")
      assert.match(done.reason ?? "", /reached the end of its runtime, 4 s of continuous running .*E2B deleted it with its files$/)
      assert.deepStrictEqual(sandboxOf(capped, id), [])
      const sandboxId = yield* computer.providerId
      const renewals = capped.requests.filter((r) => r.path === `/sandboxes/${sandboxId}/timeout`)
      // Every 500 ms while at least a second is left (0.5 s to 3 s), for at most what is left: 1.5 s
      // at 2.5 s (the SDK asks in whole seconds, rounding up; E2B caps it), 1 s at 3 s, none after.
      assert.deepStrictEqual(
        renewals.map((r) => [r.status, (r.body as { timeout: number }).timeout]),
        [[204, 2], [204, 2], [204, 2], [204, 2], [204, 2], [204, 1]]
      )
    }), cappedOptions), 60_000)

  it.scoped("a permanent computer is paused by E2B at the end; restart resumes it with its files and a new period", () =>
    withKernel(capped, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("cap-perm")
      yield* alignClocks(capped)
      yield* computers.create("s1", { computer_id: id, temporary: false })
      const endOf = Effect.map(computers.list("s1"), (all) => all.find((c) => c.computer_id === id)?.ends_at)
      const firstEnd = (yield* endOf)!
      assert.strictEqual((yield* processes.exec("s1", { computer_id: id, command: "echo kept > work.txt" })).exit_code, 0)
      const { pid } = yield* processes.spawn("s1", { computer_id: id, command: "sleep 300", background: true })
      const waiting = yield* Effect.fork(processes.wait("s1", { id: pid, timeoutMs: 20_000 }))
      yield* advance(capped, pastTheEnd, 250)
      const done = yield* Fiber.join(waiting)
      assert.match(done.reason ?? "", /E2B paused it and kept its files: computer_restart resumes it/)
      assert.strictEqual(sandboxOf(capped, id)[0]?.state, "paused")
      yield* computers.restart("s1", id)
      assert.strictEqual(sandboxOf(capped, id)[0]?.state, "running")
      assert.isAbove(Date.parse((yield* endOf)!), Date.parse(firstEnd))
      // The renewals run again: past the 2 s timeout, the sandbox is still there.
      yield* advance(capped, 3_000, 250)
      assert.strictEqual(sandboxOf(capped, id)[0]?.state, "running")
      assert.strictEqual((yield* processes.exec("s1", { computer_id: id, command: "cat work.txt" })).stdout, "kept\n")
      yield* computers.delete("s1", id)
    }), cappedOptions), 60_000)

  it.scoped("a permanent computer paused at its end comes back from its files alone when next used: a process the kernel ended stays ended", () =>
    withKernel(capped, Effect.gen(function*() {
      const { computers, processes } = yield* services
      const id = computerId("cap-cold")
      yield* alignClocks(capped)
      yield* computers.create("s1", { computer_id: id, temporary: false })
      // Detached from every process group the kernel could end: only a cold boot ends it.
      yield* processes.exec("s1", { computer_id: id, command: "setsid sleep 283 >/dev/null 2>&1 & echo kept > work.txt" })
      const { pid } = yield* processes.spawn("s1", { computer_id: id, command: "sleep 284", background: true })
      const waiting = yield* Effect.fork(processes.wait("s1", { id: pid, timeoutMs: 20_000 }))
      yield* advance(capped, pastTheEnd, 250)
      const done = yield* Fiber.join(waiting)
      assert.strictEqual(done.status, "terminated", "the kernel says the process ended with the pause")
      // The next use resumes it (no restart asked: the kernel recovers a lost computer on use).
      const left = yield* processes.exec("s1", { computer_id: id, command: "ps -eo args | grep -c '^sleep 28[34]$' || true; cat work.txt" })
      assert.strictEqual(left.stdout, "0\nkept\n", "nothing of the old processes came back; the files did")
      const create = capped.requests.find((r) =>
        r.method === "POST" && r.path === "/v2/sandboxes" && (r.body as { metadata?: Record<string, string> }).metadata?.[ID_KEY] === id
      )
      assert.deepInclude(create?.body as object, { autoPause: true, autoPauseMemory: false }, "E2B is asked for a filesystem snapshot")
      yield* computers.delete("s1", id)
    }), cappedOptions), 60_000)

  it.live("create never asks for more than the maximum runtime, which E2B would refuse", () =>
    Effect.scoped(Effect.gen(function*() {
      const id = computerId("cap-ask")
      yield* opened(id)
      const create = capped.requests.find((r) => r.method === "POST" && r.path === "/v2/sandboxes" && r.status === 201 &&
        (r.body as { metadata?: Record<string, string> }).metadata?.[ID_KEY] === id)
      assert.strictEqual((create?.body as { timeout?: number }).timeout, MAX_RUNTIME_SEC)
      // The fake refuses what E2B refuses.
      const refused = yield* Effect.flip(Effect.tryPromise(() =>
        Sandbox.create("base", { apiKey: capped.apiKey, apiUrl: capped.url, sandboxUrl: capped.url, timeoutMs: 10_000 })
      ))
      assert.match(String(refused.error), /400: Timeout cannot be greater than 4 seconds/)
    })).pipe(Effect.provide(E2BBackend.layer(options(capped, { ...cappedOptions, sandboxTimeoutSec: 3600 })))), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: 409 while a sandbox changes state", () => {
  /** The kernel's restart: the connection goes first, then the provider restarts, then a new connection. */
  const restarted = (id: string, temporary: boolean, before: (connection: Connection) => Effect.Effect<void, unknown>) =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const instance = yield* Effect.flatMap(metadataFor(id, temporary), backend.create)
      yield* Effect.scoped(Effect.flatMap(backend.connect(instance), before))
      return instance
    })

  it.live("a pause that meets a pause in progress waits for it, and only then resumes", () =>
    provider(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("409-wait")
      const instance = yield* restarted(id, false, (connection) => Effect.asVoid(exec(connection, ["sh", "-c", "echo kept > f.txt"])))
      const outside = fake.pause(instance.providerId) // 1.2 s of "pausing"
      const resumed = yield* backend.restart(instance)
      yield* Effect.promise(() => outside)
      const pauses = fake.requests.filter((r) => r.path === `/sandboxes/${instance.providerId}/pause`)
      assert.isTrue(pauses.some((r) => r.status === 409 && /cannot be paused while in 'pausing' state/.test(r.message ?? "")), JSON.stringify(pauses))
      assert.strictEqual(sandboxOf(fake, id)[0]?.state, "running")
      assert.strictEqual(resumed.state, "running")
      const read = yield* Effect.scoped(Effect.flatMap(backend.connect(resumed), (connection) => exec(connection, ["cat", "f.txt"])))
      assert.strictEqual(text(read.stdout), "kept\n")
      yield* backend.remove(resumed)
    })), 60_000)

  it.live("a pause answered 409 once is tried again: the restart really happens", () =>
    provider(Effect.gen(function*() {
      const backend = yield* Backend
      // Detached from the process's group: only a cold boot ends it.
      const instance = yield* restarted(computerId("409-once"), true, (connection) =>
        Effect.gen(function*() {
          yield* exec(connection, ["sh", "-c", "setsid sleep 271 >/dev/null 2>&1 &"])
          assert.strictEqual(yield* count(connection, "sleep 271"), "1")
        }))
      fake.inject({ path: /\/pause$/, status: 409, times: 1 })
      const resumed = yield* backend.restart(instance)
      const pauses = fake.requests.filter((r) => r.path === `/sandboxes/${instance.providerId}/pause`).map((r) => r.status)
      assert.deepStrictEqual(pauses, [409, 204])
      const left = yield* Effect.scoped(Effect.flatMap(backend.connect(resumed), (connection) => count(connection, "sleep 271")))
      assert.strictEqual(left, "0", "a cold boot: the process is gone")
      yield* backend.remove(resumed)
    })), 60_000)

  it.live("a pause answered 409 for good fails clearly and is not taken for done", () =>
    provider(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("409-stuck")
      const instance = yield* restarted(id, true, () => Effect.void)
      fake.inject({ path: /\/pause$/, status: 409 })
      const error = yield* Effect.flip(backend.restart(instance))
      fake.clearFaults()
      assert.strictEqual(error._tag, "ProviderError")
      assert.match(
        error.message,
        /^e2b backend: cannot pause the sandbox: sandbox \S+ kept changing state for 2 s; it was not paused \(try again in a moment\)$/
      )
      assert.isFalse(fake.requests.some((r) => r.path === `/v2/sandboxes/${instance.providerId}/connect` && r.status === 201), "no resume")
      assert.strictEqual(sandboxOf(fake, id)[0]?.state, "running")
      yield* backend.remove(instance)
    }), { conflictWaitMs: 2000 }), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: old templates", () => {
  const stdinRoundTrip = (connection: Connection) =>
    Effect.scoped(Effect.gen(function*() {
      const process = yield* connection.spawn(spec(["sh", "-c", "od -An -tx1 | tr -s ' \\n' ' '; echo; echo done"]))
      yield* process.write(new Uint8Array([0, 255, 10]))
      yield* process.write(new TextEncoder().encode(".\n"))
      yield* process.closeStdin
      return yield* collect(process).pipe(Effect.timeout("20 seconds"))
    }))

  it.live("envd < 0.4.0: the start names the user, and EOF reaches a pipe through the relay", () =>
    provider(Effect.gen(function*() {
      const { connection, instance } = yield* opened(computerId("envd03"))
      assert.strictEqual(fake.sandboxes().find((s) => s.sandboxID === instance.providerId)?.envdVersion, "0.3.5")
      const result = yield* stdinRoundTrip(connection)
      assert.strictEqual(text(result.stdout), " 00 ff 0a 2e 0a \ndone\n")
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      assert.strictEqual(text((yield* exec(connection, ["sh", "-c", "echo $0 ok"])).stdout), "sh ok\n")
      // Without the header this envd refuses a start: the fake holds the rule.
      const token = yield* Effect.promise(() =>
        fetch(`${fake.url}/sandboxes/${instance.providerId}`, { headers: { "x-api-key": fake.apiKey } }).then((res) => res.json())
      ).pipe(Effect.map((info: { envdAccessToken: string }) => info.envdAccessToken))
      const start = (user: Record<string, string>) =>
        Effect.promise(() =>
          fetch(`${fake.url}/process.Process/Start`, {
            method: "POST",
            headers: { "content-type": "application/connect+json", "e2b-sandbox-id": instance.providerId, "x-access-token": token, ...user },
            body: new Uint8Array(envelope(0, { process: { cmd: "true", args: [] } }))
          }).then((res) => res.text())
        )
      assert.match(yield* start({}), /"code":"unauthenticated","message":"no user specified"/)
      assert.match(yield* start({ authorization: `Basic ${btoa("nobody:")}` }), /invalid username: 'nobody'/)
      assert.match(yield* start({ authorization: `Basic ${btoa("user:")}` }), /"start":\{"pid":\d+\}/)
    }).pipe(Effect.scoped), { template: "legacy-0.3" }), 60_000)

  it.live("envd 0.5.0 has no CloseStdin: EOF goes through the relay, on both output paths", () =>
    Effect.gen(function*() {
      for (const outputApi of ["auto", "public"] as const) {
        const providerId = yield* provider(Effect.gen(function*() {
          const { connection, instance } = yield* opened(computerId(`envd05-${outputApi}`))
          const result = yield* stdinRoundTrip(connection)
          assert.strictEqual(text(result.stdout), " 00 ff 0a 2e 0a \ndone\n", outputApi)
          assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
          return instance.providerId
        }).pipe(Effect.scoped), { template: "legacy-0.5", outputApi })
        const closes = fake.requests.filter((r) => r.sandboxId === providerId && r.path === "/process.Process/CloseStdin")
        assert.deepStrictEqual(closes, [])
      }
    }), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: output", () => {
  it.live("a reader that stops early is not held by a read in flight, and the process ends with its scope", () =>
    Effect.gen(function*() {
      for (const outputApi of ["auto", "public"] as const) {
        yield* provider(Effect.gen(function*() {
          const { connection } = yield* opened(computerId(`early-${outputApi}`))
          yield* Effect.scoped(Effect.gen(function*() {
            const quiet = yield* connection.spawn(spec(["sh", "-c", "echo one; exec sleep 272"]))
            // The reader gives up while a read waits for output that never comes.
            const started = Date.now()
            const seen = yield* ownedEvents(quiet).pipe(Stream.runCollect, Effect.timeoutTo({ duration: "1 second", onSuccess: () => "ended", onTimeout: () => "gave up" }))
            assert.strictEqual(seen, "gave up")
            assert.isBelow(Date.now() - started, 4000, outputApi)
            assert.strictEqual(yield* count(connection, "sleep 272"), "1")
          })).pipe(Effect.timeout("15 seconds"))
          yield* eventually(Effect.map(count(connection, "sleep 272"), (n) => n === "0"), 5)
        }).pipe(Effect.scoped), { outputApi, processes: "envd" })
      }
    }), 60_000)

  it.live("output past the point where the reading holds back (4 MiB) arrives whole, in order", () =>
    provider(Effect.gen(function*() {
      const { connection } = yield* opened(computerId("heavy"))
      const result = yield* exec(connection, ["sh", "-c", "seq 1 1200000; echo tail >&2"])
      const expected = Array.from({ length: 1_200_000 }, (_, i) => `${i + 1}\n`).join("")
      assert.strictEqual(result.stdout.length, expected.length)
      assert.isTrue(text(result.stdout) === expected)
      assert.strictEqual(result.stderr, "tail\n")
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
    }).pipe(Effect.scoped)), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: an SDK without its process client", () => {
  it.live("falls back to the public API by itself", () =>
    Effect.gen(function*() {
      const original = { create: Sandbox.create, connect: Sandbox.connect }
      // Another SDK version: no `commands.rpc` to be seen from outside (the SDK's own methods keep theirs).
      const strip = <A extends Sandbox>(sandbox: A) => {
        const commands = new Proxy(sandbox.commands, {
          get: (target, key) => {
            if (key === "rpc") return undefined
            const value = Reflect.get(target, key)
            return typeof value === "function" ? value.bind(target) : value
          }
        })
        Object.defineProperty(sandbox, "commands", { value: commands })
        return sandbox
      }
      Object.assign(Sandbox, {
        create: (...args: Parameters<typeof Sandbox.create>) => original.create.apply(Sandbox, args).then(strip),
        connect: (...args: Parameters<typeof Sandbox.connect>) => original.connect.apply(Sandbox, args).then(strip)
      })
      yield* Effect.gen(function*() {
        yield* provider(Effect.gen(function*() {
        const { connection } = yield* opened(computerId("no-rpc"))
        const result = yield* exec(connection, ["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert.deepStrictEqual([text(result.stdout), result.stderr, result.exit], ["out\n", "err\n", { exitCode: 4, signal: null }])
        const cat = yield* connection.spawn(spec(["cat"]))
        yield* cat.write(new TextEncoder().encode("through stdin"))
        yield* cat.closeStdin
        assert.strictEqual(text((yield* collect(cat)).stdout), "through stdin")
        const killed = yield* connection.spawn(spec(["sleep", "300"]))
        yield* killed.signal("SIGTERM")
        assert.deepStrictEqual((yield* collect(killed)).exit, { exitCode: null, signal: "SIGTERM" })
      }).pipe(Effect.scoped))
      // Forced onto the SDK's client, the same SDK says why it cannot.
      const forced = yield* provider(Effect.gen(function*() {
        const { connection } = yield* opened(computerId("rpc-only"))
        return yield* Effect.flip(connection.spawn(spec(["true"])))
      }).pipe(Effect.scoped), { outputApi: "rpc" })
      assert.strictEqual(forced.message, "could not start 'true': this e2b SDK has no process client (commands.rpc)")
      }).pipe(Effect.ensuring(Effect.sync(() => Object.assign(Sandbox, original))))
    }), 60_000)
})

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B: header rules (--egress-header)", () => {
  const rules = (domains: ReadonlyArray<string>) =>
    Object.fromEntries(domains.map((domain) => [domain, [{ transform: { headers: { Authorization: "Bearer egress-value" } } }]]))
  const network = (domains: ReadonlyArray<string>) => ({ allowOut: [...domains], denyOut: ["0.0.0.0/0"], rules: rules(domains) })
  const withTeamFeature = <A, E, R>(body: Effect.Effect<A, E, R>) =>
    Effect.acquireUseRelease(Effect.sync(() => (fake.team.networkTransformRules = true)), () => body, () =>
      Effect.sync(() => (fake.team.networkTransformRules = false)))
  const refusal = (template: string, domains: ReadonlyArray<string>) =>
    Effect.flip(Effect.tryPromise(() =>
      Sandbox.create(template, { apiKey: fake.apiKey, apiUrl: fake.url, sandboxUrl: fake.url, network: network(domains) })
    )).pipe(Effect.map((error) => String(error.error)))

  it.live("E2B's API refuses rules without the team's feature, on an envd before 0.5.13, for *.x, and past 10 domains", () =>
    Effect.gen(function*() {
      assert.match(yield* refusal("base", ["api.github.com"]), /400: Network transform rules are not available for your team/)
      yield* withTeamFeature(Effect.gen(function*() {
        assert.match(yield* refusal("legacy-0.5", ["api.github.com"]), /400: .*Template envd version is 0\.5\.0, must be at least 0\.5\.13/)
        assert.match(yield* refusal("base", ["*.github.com"]), /400: Rule domain "\*\.github\.com" is not a valid domain name/)
        const eleven = Array.from({ length: 11 }, (_, i) => `h${i}.example.com`)
        assert.match(yield* refusal("base", eleven), /400: Network rules can have at most 10 domains/)
      }))
      assert.deepStrictEqual(fake.sandboxes().filter((s) => s.network !== undefined), [], "nothing was created")
    }), 60_000)

  it.live("a team without header rules, or a template whose envd is too old, fails the create saying what --egress-header needs", () =>
    Effect.gen(function*() {
      const overrides = { network: network(["api.github.com"]) }
      const noFeature = yield* provider(Effect.flip(Effect.flatMap(Backend, (backend) =>
        Effect.flatMap(metadataFor(computerId("rules-team"), true), backend.create))), overrides)
      assert.strictEqual(noFeature._tag, "ProviderError")
      assert.match(noFeature.message, /--egress-header needs E2B's header rules, which are not enabled for this team/)
      const oldEnvd = yield* withTeamFeature(provider(Effect.flip(Effect.flatMap(Backend, (backend) =>
        Effect.flatMap(metadataFor(computerId("rules-envd"), true, "legacy-0.5"), backend.create))), overrides))
      assert.match(oldEnvd.message, /--egress-header needs a template whose envd is 0\.5\.13 or newer \(this one has 0\.5\.0\): rebuild it/)
      assert.notInclude(oldEnvd.message, "egress-value")
    }), 60_000)

  it.live("with the team's feature, the rules reach the sandbox on the default template", () =>
    withTeamFeature(provider(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("rules-ok")
      const instance = yield* backend.create(yield* metadataFor(id, true))
      assert.deepStrictEqual(sandboxOf(fake, id)[0]?.network, network(["api.github.com"]))
      yield* backend.remove(instance)
    }), { network: network(["api.github.com"]) })), 60_000)
})
