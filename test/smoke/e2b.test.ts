// The E2B backend against the real service: what E2B's own engineer would check, in one command.
//
//   E2B_API_KEY=e2b_… npx vitest run test/smoke/e2b.test.ts
//
// Optional: E2B_SMOKE_TEMPLATE (default "base"), E2B_SMOKE_MAX_RUNTIME (the plan's maximum in
// seconds, default 3600), E2B_SMOKE_RECORD_DIR (default test/smoke/recordings), E2B_SMOKE_HOME
// (default /home/user), and the SDK's own E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL (pointed at
// the fake, they dry-run this test: `npx vite-node test/smoke/e2b-fake.ts` prints the variables).
// Without E2B_API_KEY it is skipped with a message, also under CI=true: credentials never exist
// there. It creates and removes two small sandboxes and takes about a minute.
//
// Sequence, through the provider's own calls (the kernel's sequencing is tested on fakes): create →
// connect → start a process → 5 s later it is still alive → output over 2 MiB (exact bytes) →
// stdin + EOF → a signal ends a process (the runtime reports 128+n) → restart keeps files, ends
// processes and starts a new runtime period (a later startedAt) → remove; then a permanent
// computer: paused (suspend) and resumed (start) with its files. Raw answers the fake must match are recorded, with status, headers and body, to a
// JSON file (a running, a paused and a killed sandbox; a second pause: 409; the timeout of a paused
// sandbox; a create above the plan's maximum: 400 with E2B's words), so E2BFake.ts can be checked
// against them later. (The SDK's own requests go through its private undici client and are not
// recorded: a 429 there is retried by the SDK when it carries Retry-After.)
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Redacted, Stream } from "effect"
import { createHash } from "node:crypto"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import * as E2BBackend from "../../src/layers/backends/e2b/E2BBackend.js"
import { type Connection, type ExitInfo, type SpawnSpec, ownedEvents } from "../../src/services/Backend.js"
import { Backend } from "../../src/services/Backend.js"

const key = process.env.E2B_API_KEY ?? ""
if (key === "") process.stderr.write("skipping the E2B smoke test against the real service: E2B_API_KEY is not set\n")

const template = process.env.E2B_SMOKE_TEMPLATE ?? "base"
const maxRuntimeSec = Number(process.env.E2B_SMOKE_MAX_RUNTIME ?? 3600)
const api = process.env.E2B_API_URL ?? `https://api.${process.env.E2B_DOMAIN ?? "e2b.app"}`
const home = process.env.E2B_SMOKE_HOME ?? E2BBackend.DEFAULT_HOME
const run = Math.random().toString(36).slice(2, 8)

interface Recorded {
  readonly what: string
  readonly method: string
  readonly path: string
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: unknown
}
const recorded: Array<Recorded> = []

/** A raw control-plane call, recorded (the key is sent, never stored). */
const raw = (what: string, method: string, path: string, body?: unknown) =>
  Effect.promise(async () => {
    const res = await fetch(`${api}${path}`, {
      method,
      headers: { "X-API-KEY": key, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {})
    })
    const text = await res.text()
    let parsed: unknown = text
    try {
      parsed = text === "" ? null : JSON.parse(text)
    } catch {
      // kept as text
    }
    const headers: Record<string, string> = {}
    res.headers.forEach((value, name) => (headers[name] = value))
    const entry: Recorded = { what, method, path, status: res.status, headers, body: parsed }
    recorded.push(entry)
    return entry
  })

const layer = E2BBackend.layer({
  apiKey: Redacted.make(key),
  template,
  sandboxTimeoutSec: 600,
  maxRuntimeSec,
  metadata: { purpose: "kilntainers-smoke-test" },
  envs: {},
  apiUrl: undefined,
  sandboxUrl: undefined,
  domain: process.env.E2B_DOMAIN,
  home
})

/** A new sandbox as the kernel would make it, removed with the scope. */
const created = (id: string, temporary: boolean) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const now = yield* Clock.currentTimeMillis
    return yield* Effect.acquireRelease(
      backend.create({ id, temporary, image: template, created: new Date(now).toISOString(), instance: `smoke-${run}`, nonce: run }),
      (instance) => Effect.ignore(backend.remove(instance))
    )
  })

const spec = (argv: ReadonlyArray<string>): SpawnSpec => ({
  argv,
  cwd: home,
  env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: home, LANG: "C.UTF-8" }
})

const collect = (computer: Connection, argv: ReadonlyArray<string>, input?: Uint8Array) =>
  Effect.scoped(Effect.gen(function*() {
    const process = yield* computer.spawn(spec(argv))
    if (input) {
      yield* process.write(input)
      yield* process.closeStdin
    }
    const out: Array<Uint8Array> = []
    let err = ""
    let exit: ExitInfo | undefined
    yield* ownedEvents(process).pipe(Stream.runForEach((event) =>
      Effect.sync(() => {
        if (event._tag === "Stdout") out.push(Uint8Array.from(event.data))
        else if (event._tag === "Stderr") err += Buffer.from(event.data).toString()
        else exit = event.exit
      })
    ))
    return { stdout: Buffer.concat(out), stderr: err, exit }
  }))

const save = () => {
  const dir = process.env.E2B_SMOKE_RECORD_DIR ?? join("test", "smoke", "recordings")
  mkdirSync(dir, { recursive: true })
  const file = join(dir, `e2b-${new Date().toISOString().replace(/[:.]/g, "-")}.json`)
  writeFileSync(file, JSON.stringify({ service: api, template, maxRuntimeSec, recorded }, null, 2))
  process.stderr.write(`E2B smoke test: raw answers recorded in ${file}\n`)
}

describe.skipIf(key === "")("E2B against the real service (E2B_API_KEY)", () => {
  it.live("a temporary computer: processes, output, stdin, signals, restart, destroy", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const started = Date.now()
      const instance = yield* created(`smoke-${run}-temp`, true)
      yield* Effect.scoped(Effect.gen(function*() {
      const computer = yield* backend.connect(instance)
      process.stderr.write(`E2B smoke test: sandbox ${instance.providerId} ready in ${Date.now() - started} ms\n`)

      // A process outlives the call that started it.
      const sleeper = yield* computer.spawn(spec(["sh", "-c", "echo started; exec sleep 600"]))
      const exited = yield* Deferred.make<ExitInfo>()
      const reading = yield* ownedEvents(sleeper).pipe(
        Stream.runForEach((event) => (event._tag === "Exit" ? Deferred.succeed(exited, event.exit) : Effect.void)),
        Effect.fork
      )
      yield* Effect.sleep("5 seconds")
      assert.isFalse(yield* Deferred.isDone(exited), "the process is still alive 5 s later")
      const ps = yield* collect(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 600' || true"])
      assert.strictEqual(ps.stdout.toString().trim(), "1")

      // Over 2 MiB of binary output, exact.
      const big = yield* collect(computer, ["sh", "-c", "head -c 2500000 /dev/urandom > /tmp/r; cat /tmp/r; sha256sum /tmp/r | cut -d' ' -f1 >&2"])
      assert.strictEqual(big.stdout.length, 2_500_000)
      assert.strictEqual(createHash("sha256").update(big.stdout).digest("hex"), big.stderr.trim())

      // stdin, then EOF.
      const counted = yield* collect(computer, ["wc", "-c"], new Uint8Array(100_000).fill(7))
      assert.strictEqual(counted.stdout.toString().trim(), "100000")
      assert.deepStrictEqual(counted.exit, { exitCode: 0, signal: null })

      // A signal ends the process: SIGUSR1 is signal 10, reported to agents as exit 138.
      yield* sleeper.signal("SIGUSR1")
      assert.deepStrictEqual(yield* Deferred.await(exited).pipe(Effect.timeout("30 seconds")), { exitCode: null, signal: "SIGUSR1" })
      yield* Fiber.join(reading)

      // Restart keeps files, ends processes, and starts a new runtime period (RuntimeCap.ts relies on it).
      // As the kernel does it: the connection goes first, then the provider restarts, then a new connection.
      // The sleeper is out of every process group: only a cold boot ends it.
      yield* collect(computer, ["sh", "-c", "echo kept > kept.txt; setsid sleep 601 >/dev/null 2>&1 &"])
      const detached = yield* collect(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 601' || true"])
      assert.strictEqual(detached.stdout.toString().trim(), "1")
      }))
      const before = yield* raw("a running sandbox", "GET", `/sandboxes/${instance.providerId}`)
      const restarted = yield* backend.restart(instance)
      const resumed = yield* raw("a resumed sandbox", "GET", `/sandboxes/${instance.providerId}`)
      const startedAt = (entry: Recorded) => Date.parse((entry.body as { startedAt: string }).startedAt)
      assert.isAbove(startedAt(resumed), startedAt(before), "a resume starts a new period")
      assert.isAbove(restarted.endsAt!, instance.endsAt!, "and the end of the runtime moves with it")
      yield* Effect.scoped(Effect.gen(function*() {
        const again = yield* backend.connect(restarted)
        assert.strictEqual((yield* collect(again, ["cat", "kept.txt"])).stdout.toString(), "kept\n")
        const after = yield* collect(again, ["sh", "-c", "ps -eo args | grep -c '^sleep 601' || true"])
        assert.strictEqual(after.stdout.toString().trim(), "0")
      }))

      yield* backend.remove(restarted)
      const gone = yield* raw("a killed sandbox", "GET", `/sandboxes/${instance.providerId}`)
      assert.include([404, 410], gone.status)
    }).pipe(Effect.scoped, Effect.provide(layer)), 300_000)

  it.live("a permanent computer is paused on release and resumed with its files; E2B's refusals recorded", () =>
    Effect.gen(function*() {
      const backend = yield* Backend
      const instance = yield* created(`smoke-${run}-perm`, false)
      yield* Effect.scoped(Effect.flatMap(backend.connect(instance), (computer) => collect(computer, ["sh", "-c", "echo persisted > mine.txt"])))
      yield* backend.suspend!(instance)
      const paused = yield* raw("a paused sandbox", "GET", `/sandboxes/${instance.providerId}`)
      assert.strictEqual((paused.body as { state?: string }).state, "paused")
      const [found] = yield* backend.find({ id: instance.metadata.id })
      assert.strictEqual(found?.state, "paused")
      const again = yield* raw("pausing a paused sandbox", "POST", `/sandboxes/${instance.providerId}/pause`, {})
      assert.strictEqual(again.status, 409)
      yield* raw("the timeout of a paused sandbox", "POST", `/sandboxes/${instance.providerId}/timeout`, { timeout: 60 })
      const resumed = yield* backend.start(found!)
      assert.strictEqual(resumed.providerId, instance.providerId)
      const read = yield* Effect.scoped(Effect.flatMap(backend.connect(resumed), (computer) => collect(computer, ["cat", "mine.txt"])))
      assert.strictEqual(read.stdout.toString(), "persisted\n")
      // Above the plan's maximum (25 h is above every plan E2B documents).
      const tooLong = yield* raw("a create above the plan's maximum", "POST", "/v2/sandboxes", { templateID: template, timeout: 25 * 3600 })
      if (tooLong.status < 300) yield* raw("removing it", "DELETE", `/sandboxes/${(tooLong.body as { sandboxID: string }).sandboxID}`)
      assert.strictEqual(tooLong.status, 400)
      assert.match(JSON.stringify(tooLong.body), /Timeout cannot be greater than \d+ hours/)
    }).pipe(Effect.scoped, Effect.provide(layer), Effect.ensuring(Effect.sync(save))), 300_000)
})
