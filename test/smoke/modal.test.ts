/**
 * Smoke test of the Modal backend against the real Modal — run it with one command:
 *
 *   MODAL_TOKEN_ID=ak-… MODAL_TOKEN_SECRET=as-… npx vitest run test/smoke/modal.test.ts
 *
 * (optional: MODAL_SMOKE_APP, default "kilntainers-smoke"; MODAL_SMOKE_RECORD, the file for the
 * recorded answers, default test/smoke/recordings/modal-<time>.jsonl). Without the two tokens it is
 * skipped with a message, also under CI=true: CI never has credentials. It costs a few cents: two
 * small sandboxes (0.25 CPU, 256 MiB) for about a minute, each with a 10-minute timeout as a bound.
 *
 * The sequence a provider's engineer would check: create → wait (first command) → start a process
 * → 5 s later it is still alive → output over 2 MiB → stdin + EOF → a signal (exit 128+n) → what
 * Modal offers instead of restart (it has none: refused clearly) — re-attaching from a new server
 * keeps the files → destroy. Then the answers the fake must match: a terminated sandbox's poll,
 * lookups and execs, an exec over 64 KiB of arguments, a 64-character name, a large exec
 * environment. Every control-plane answer (method, status code, details, trailers) is written as
 * JSON lines so that the fake can be compared with it later.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope, Stream } from "effect"
import { ModalClient } from "modal"
import { mkdirSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import * as ModalBackend from "../../src/layers/backends/modal/ModalBackend.js"
import type { ComputerMetadata } from "../../src/domain/ComputerMetadata.js"
import { type BackendProcess, type Connection, type ExitInfo, ownedEvents } from "../../src/services/Backend.js"
import { Backend } from "../../src/services/Backend.js"

const tokenId = process.env["MODAL_TOKEN_ID"] ?? ""
const tokenSecret = process.env["MODAL_TOKEN_SECRET"] ?? ""
const haveTokens = tokenId !== "" && tokenSecret !== ""
if (!haveTokens) {
  process.stderr.write("skipping the real Modal smoke test: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET to run it (see test/smoke/modal.test.ts)\n")
}
const appName = process.env["MODAL_SMOKE_APP"] ?? "kilntainers-smoke"
const recordPath = process.env["MODAL_SMOKE_RECORD"] ??
  join("test", "smoke", "recordings", `modal-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`)

const records: Array<Record<string, unknown>> = []
const record = (entry: Record<string, unknown>) => records.push({ at: new Date().toISOString(), ...entry })
const save = () => {
  mkdirSync(dirname(recordPath), { recursive: true })
  writeFileSync(recordPath, records.map((entry) => JSON.stringify(entry)).join("\n") + "\n")
  process.stderr.write(`modal smoke: ${records.length} answers recorded in ${recordPath}\n`)
}

/** Records every control-plane call's outcome (nice-grpc client middleware, appended after the SDK's own). */
async function* recorder(call: any, options: any): AsyncGenerator<any, any, any> {
  const method: string = call.method.path
  let trailer: Record<string, string> = {}
  const onTrailer = (metadata: Iterable<[string, unknown]>) => {
    trailer = Object.fromEntries([...metadata].map(([key, value]) => [key, String(value)]))
    options.onTrailer?.(metadata)
  }
  try {
    const result = yield* call.next(call.request, { ...options, onTrailer })
    record({ method, code: 0, trailer, response: call.responseStream ? "(stream)" : summarize(result) })
    return result
  } catch (error: any) {
    record({ method, code: error?.code, details: error?.details ?? String(error), trailer })
    throw error
  }
}
const summarize = (value: unknown) => JSON.parse(JSON.stringify(value ?? null, (_key, v) => (typeof v === "string" && v.length > 200 ? `${v.slice(0, 200)}…` : v)))

const client = () => new ModalClient({ tokenId, tokenSecret, grpcMiddleware: [recorder] })

const options = (): ModalBackend.ModalBackendOptions => ({
  tokenId: undefined,
  tokenSecret: undefined,
  appName,
  image: ModalBackend.DEFAULT_IMAGE,
  cpu: 0.25,
  memoryMb: 256,
  gpu: undefined,
  region: undefined,
  sandboxTimeoutSec: 600,
  network: false,
  client: client(),
  watchIntervalMs: 2000
})

const collect = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold({ stdout: 0, text: "", exit: undefined as ExitInfo | undefined }, (acc, event) => ({
      stdout: acc.stdout + (event._tag === "Stdout" ? event.data.length : 0),
      text: acc.text.length < 4096 && event._tag !== "Exit" ? acc.text + Buffer.from(event.data).toString() : acc.text,
      exit: event._tag === "Exit" ? event.exit : acc.exit
    })),
    Effect.timeout("120 seconds")
  )
const spec = (argv: ReadonlyArray<string>, env: Record<string, string> = {}) => ({
  argv,
  cwd: ModalBackend.HOME,
  env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", ...env }
})
const run = (connection: Connection, argv: ReadonlyArray<string>) => Effect.scoped(Effect.flatMap(connection.spawn(spec(argv)), collect))
const timed = <A, E, R>(what: string, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const start = performance.now()
    const result = yield* effect
    record({ step: what, ms: Math.round(performance.now() - start) })
    return result
  })

describe.skipIf(!haveTokens)("the Modal backend against the real Modal", () => {
  it.live("create → run → stay alive → 2 MiB → stdin/EOF → signal → re-attach keeps files → destroy; then record Modal's answers", () =>
    Effect.gen(function*() {
      const id = `smoke-${Math.random().toString(36).slice(2, 8)}`
      // What the kernel records on a permanent computer it creates.
      const metadata: ComputerMetadata = {
        id,
        temporary: false,
        image: ModalBackend.DEFAULT_IMAGE,
        created: new Date().toISOString(),
        instance: "smoke",
        nonce: "smoke"
      }
      const scope = yield* Scope.make()
      const { computer, instance } = yield* timed("create and wait (first command done)", Effect.gen(function*() {
        const backend = yield* Backend
        const instance = yield* backend.create(metadata)
        const computer = yield* backend.connect(instance)
        assert.strictEqual((yield* Effect.flip(backend.restart(instance)))._tag, "Unsupported", "Modal has no restart that keeps files")
        return { computer, instance }
      }).pipe(Effect.provide(ModalBackend.layer(options())), Scope.extend(scope)))

      // a process started now is still alive 5 s later
      const alive = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sleep", "60"]))
        yield* Effect.sleep("5 seconds")
        const ps = yield* run(computer, ["sh", "-c", `kill -0 ${process.pid} && echo alive`])
        return ps.text
      }))
      assert.strictEqual(alive, "alive\n")

      const bulk = yield* timed("3 MB of output", run(computer, ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' 'a'"]))
      assert.strictEqual(bulk.stdout, 3_000_000)

      const echoed = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["cat"]))
        yield* process.write(new TextEncoder().encode("to stdin\n"))
        yield* process.closeStdin
        return yield* collect(process)
      }))
      assert.strictEqual(echoed.text, "to stdin\n")
      assert.deepStrictEqual(echoed.exit, { exitCode: 0, signal: null })

      const signalled = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sleep", "60"]))
        yield* process.signal("SIGTERM")
        return yield* collect(process)
      }))
      assert.deepStrictEqual(signalled.exit, { exitCode: null, signal: "SIGTERM" })
      const selfKilled = yield* run(computer, ["sh", "-c", "kill -TERM $$"])
      assert.deepStrictEqual(selfKilled.exit, { exitCode: 143, signal: null }, "exit 128+n")

      yield* run(computer, ["sh", "-c", "echo kept > /home/agent/f"])
      const providerId = instance.providerId
      yield* Scope.close(scope, Exit.void)
      // What Modal offers instead of restart: another server finds the same sandbox, files kept.
      const again = yield* Effect.gen(function*() {
        const backend = yield* Backend
        const [found] = yield* backend.find({ id })
        assert.strictEqual(found?.providerId, providerId)
        const reconnected = yield* backend.connect(found!)
        const read = yield* run(reconnected, ["cat", "/home/agent/f"])
        yield* timed("destroy", backend.remove(found!))
        return read.text
      }).pipe(Effect.provide(ModalBackend.layer(options())), Effect.scoped)
      assert.strictEqual(again, "kept\n")

      // What Modal answers for a terminated sandbox, and for requests at its limits.
      const sdk = client()
      const probe = <A>(what: string, run: () => Promise<A>) =>
        Effect.promise(() =>
          run().then(
            (value) => record({ probe: what, ok: true, value: summarize(value) }),
            (error: any) => record({ probe: what, ok: false, error: error?.constructor?.name, code: error?.code, message: String(error?.message ?? error) })
          )
        )
      const gone = yield* Effect.promise(() => sdk.sandboxes.fromId(providerId))
      yield* probe("poll a terminated sandbox", () => gone.poll())
      yield* probe("look up a terminated sandbox by name", () => sdk.sandboxes.fromName(appName, ModalBackend.sandboxName(id)))
      yield* probe("exec in a terminated sandbox", () => gone.exec(["true"]))
      const app = yield* Effect.promise(() => sdk.apps.fromName(appName, { createIfMissing: true }))
      const image = sdk.images.fromRegistry(ModalBackend.DEFAULT_IMAGE)
      yield* probe("a 65-character sandbox name", () => sdk.sandboxes.create(app, image, { name: "k".repeat(65), timeoutMs: 60_000 }))
      const limits = yield* Effect.promise(() => sdk.sandboxes.create(app, image, { name: `${id}-limits`, cpu: 0.25, memoryMiB: 256, timeoutMs: 600_000 }))
      yield* probe("an exec with 70000 bytes of arguments", () => limits.exec(["echo", "x".repeat(70_000)]))
      for (const size of [60_000, 120_000, 200_000, 1_000_000]) {
        yield* probe(`an exec with a ${size}-byte environment variable`, async () => {
          const p = await limits.exec(["sh", "-c", "printf %s \"$BIG\" | wc -c"], { env: { BIG: "e".repeat(size) } })
          return { stdout: await p.stdout.readText(), code: await p.wait() }
        })
      }
      yield* probe("terminate", () => limits.terminate())
      yield* probe("poll after terminate", () => limits.poll())
    }).pipe(Effect.ensuring(Effect.sync(save))), 600_000)
})
