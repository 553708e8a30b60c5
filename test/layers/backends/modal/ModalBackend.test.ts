import { status } from "@grpc/grpc-js"
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, Layer, Scope, Stream } from "effect"
import { createServer, type AddressInfo } from "node:net"
import { afterAll, beforeAll } from "vitest"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import * as ModalBackend from "../../../../src/layers/backends/modal/ModalBackend.js"
import { AGENT_KEY_TAG } from "../../../../src/layers/backends/modal/SandboxIdentity.js"
import { type BackendProcess, type Connection, type ExitInfo, type Instance, type ProcessEvent, type SpawnSpec, ownedEvents } from "../../../../src/services/Backend.js"
import { Backend } from "../../../../src/services/Backend.js"
import { backendOptions, fakeWorks, ModalFake } from "../../../support/ModalFake.js"
import { describeIf } from "../../../support/Requirements.js"

// The Modal provider's own calls, driving the real `modal` SDK against the local gRPC fake of Modal:
// what it asks Modal for, what it finds, how its processes and connections behave, its errors and
// limits. Lifecycles (attach or create, loss and recovery, release, reset) are the kernel's, tested
// through it in ModalKernel.test.ts.

const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }
let fake: ModalFake
beforeAll(async () => {
  fake = await ModalFake.start()
})
afterAll(() => fake.close())

const options = (overrides: Partial<ModalBackend.ModalBackendOptions> = {}) => backendOptions(fake, overrides)

let counter = 0
const computerId = (what: string) => `m${process.pid}-${what}-${counter++}`

/** What the kernel would record on a new computer. */
const metadataFor = (id: string, temporary = true) =>
  Effect.map(Clock.currentTimeMillis, (now): ComputerMetadata => ({
    id,
    temporary,
    image: ModalBackend.DEFAULT_IMAGE,
    created: new Date(now).toISOString(),
    instance: "test-server",
    owner: { host: "test-host", pid: process.pid, start: "1" },
    nonce: `n${counter++}`
  }))

interface Result {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
  readonly order: ReadonlyArray<ProcessEvent["_tag"]>
}

const collect = (process: BackendProcess) =>
  ownedEvents(process).pipe(
    Stream.runFold({ stdout: "", stderr: "", exit: undefined, order: [] } as Result, (acc, event) => ({
      stdout: acc.stdout + (event._tag === "Stdout" ? Buffer.from(event.data).toString() : ""),
      stderr: acc.stderr + (event._tag === "Stderr" ? Buffer.from(event.data).toString() : ""),
      exit: event._tag === "Exit" ? event.exit : acc.exit,
      order: [...acc.order, event._tag]
    })),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the process did not end within 20 s") })
  )

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({ argv, cwd: ModalBackend.HOME, env: ENV, ...extra })

const exec = (connection: Connection, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(connection.spawn(spec(argv, extra)), collect))

const withBackend = <A, E>(body: Effect.Effect<A, E, Backend>, overrides: Partial<ModalBackend.ModalBackendOptions> = {}) =>
  body.pipe(Effect.provide(ModalBackend.layer(options(overrides))))

/**
 * A new sandbox, connected in a Scope of its own; `done` disconnects and removes it. `wrapped`: as
 * made by an older kilntainers (no agent key tag), so its processes run under the wrapper.
 */
const connected = (id: string, temporary = true, wrapped = false) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const instance = yield* backend.create(yield* metadataFor(id, temporary))
    if (wrapped) delete fake.named(ModalBackend.sandboxName(id))!.tags[AGENT_KEY_TAG]
    const scope = yield* Scope.make()
    const connection = yield* backend.connect(instance).pipe(Scope.extend(scope))
    const done = Scope.close(scope, Exit.void).pipe(Effect.zipRight(backend.remove(instance)))
    return { instance, connection, scope, done }
  })

const eventually = (check: () => boolean, what: string, ms = 10_000) =>
  Effect.gen(function*() {
    for (let waited = 0; !check(); waited += 100) {
      if (waited > ms) return assert.fail(`${what} within ${ms / 1000} s`)
      yield* Effect.sleep("100 millis")
    }
  })

const tagsOf = (request: Record<string, any>): Record<string, string> =>
  Object.fromEntries(request["tags"].map((t: Record<string, string>) => [t["tagName"], t["tagValue"]]))

describe("ModalBackend options", () => {
  it.effect("builds from the Modal options alone: its own image, dashed labels, no restart, no warm pool, no renewal", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      assert.strictEqual(backend.name, "modal")
      assert.strictEqual(backend.image, "python:3.12-slim")
      assert.strictEqual(backend.labelStyle, "dashed")
      assert.isFalse(backend.capabilities.restart)
      assert.isTrue(backend.capabilities.factoryReset)
      assert.isUndefined(backend.adopt, "a sandbox's name and tags are fixed: no warm pool")
      assert.isUndefined(backend.renewal, "Modal has no keep-alive")
      const restart = yield* Effect.flip(backend.restart({ providerId: "sb", metadata: yield* metadataFor("x"), state: "running" }))
      assert.strictEqual(restart._tag, "Unsupported")
    }), { image: "python:3.12-slim" }))

  it.effect("without a client, missing tokens are a clear error at startup", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(ModalBackend.layer(options({ client: undefined }))).pipe(Effect.scoped))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Denied")
      assert.match(error.message, /--modal-token-id and --modal-token-secret/)
    }))

  it.effect("rejects a sandbox timeout beyond Modal's 24 h, an app name Modal refuses, and other bad options", () =>
    Effect.gen(function*() {
      const build = (overrides: Partial<ModalBackend.ModalBackendOptions>) =>
        Effect.flip(Layer.build(ModalBackend.layer(options(overrides))).pipe(Effect.scoped))
      const timeout = yield* build({ sandboxTimeoutSec: 86401 })
      assert.strictEqual(timeout.reason, "Invalid")
      assert.match(timeout.message, /--sandbox-timeout .* 86400/)
      assert.match((yield* build({ memoryMb: 0.5 })).message, /--modal-memory/)
      assert.match((yield* build({ appName: "a".repeat(65) })).message, /--modal-app-name must be 1 to 64 characters/)
      assert.match((yield* build({ appName: "my app" })).message, /--modal-app-name/)
    }))
})

describeIf(fakeWorks, "bubblewrap and nsenter (the Modal fake runs commands in them)")("the Modal provider on the real SDK against the fake", () => {
  it.live("create makes a named sandbox with the resources and the kernel's metadata as tags (a GPU: the SDK's V1 path)", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("create")
      const metadata = yield* metadataFor(id)
      const instance = yield* backend.create(metadata)
      const request = fake.callsOf("SandboxCreate").pop()!
      const definition = request["definition"]
      assert.strictEqual(definition["name"], `kilntainer-${id}`)
      assert.strictEqual(definition["resources"]["milliCpu"], 2000)
      assert.strictEqual(definition["resources"]["memoryMb"], 768)
      assert.strictEqual(definition["resources"]["gpuConfig"]["gpuType"], "T4")
      assert.deepStrictEqual(definition["schedulerPlacement"]["regions"], ["eu-west"])
      assert.strictEqual(definition["timeoutSecs"], 600)
      assert.strictEqual(definition["networkAccess"]["networkAccessType"], 2, "blocked network")
      const tags = tagsOf(request)
      assert.strictEqual(tags["kilntainers"], "true")
      assert.strictEqual(tags["kilntainers-computer-id"], id)
      assert.strictEqual(tags["kilntainers-temporary"], "true")
      assert.strictEqual(tags["kilntainers-image"], "debian:bookworm-slim")
      assert.strictEqual(tags["kilntainers-instance"], "test-server")
      assert.strictEqual(tags["kilntainers-owner-pid"], String(process.pid))
      assert.strictEqual(tags["kilntainers-create-nonce"], metadata.nonce)
      // The end is counted from the create call, a few ms after the metadata was made (real clock here).
      const lifetime = Date.parse(tags["kilntainers-ends"]!) - Date.parse(metadata.created)
      assert.isTrue(lifetime >= 600_000 && lifetime < 605_000, `its end of life is recorded (${lifetime} ms after creation)`)
      assert.strictEqual(instance.endsAt, Date.parse(tags["kilntainers-ends"]!))
      assert.deepStrictEqual(fake.callsOf("ImageGetOrCreate").pop()!["image"]["dockerfileCommands"], ["FROM debian:bookworm-slim"])
      const scope = yield* Scope.make()
      const connection = yield* backend.connect(instance).pipe(Scope.extend(scope))
      assert.strictEqual(connection.home, "/home/agent")
      assert.strictEqual((yield* exec(connection, ["pwd"])).stdout, "/home/agent\n")
      yield* Scope.close(scope, Exit.void)
      yield* backend.remove(instance)
      assert.notInclude(fake.running(), `kilntainer-${id}`)
      yield* backend.remove(instance)
    }), { cpu: 2, memoryMb: 768, gpu: "T4", region: "eu-west", sandboxTimeoutSec: 600 }), 60_000)

  it.live("an allowlist (or no network) is asked of Modal's V1 backend, whose network policy Modal documents: nothing else is reachable", () =>
    Effect.scoped(Effect.gen(function*() {
      // The probe closes at once, so the greeting may meet a reset connection: that is no failure.
      const listener = createServer((socket) => socket.on("error", () => {}).end("hello\n"))
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void listener.listen(0, "127.0.0.1", () => resume(Effect.void))),
        () => Effect.sync(() => listener.close())
      )
      const port = (listener.address() as AddressInfo).port
      const probe = ["bash", "-c", `(echo > /dev/tcp/127.0.0.1/${port}) 2>/dev/null && echo reachable || echo unreachable`]
      const reach = (id: string, overrides: Partial<ModalBackend.ModalBackendOptions>) =>
        withBackend(Effect.gen(function*() {
          const { connection, done } = yield* connected(id)
          const said = (yield* exec(connection, probe)).stdout
          yield* done
          return said
        }), overrides)
      const allowId = computerId("allow")
      const allowed = yield* reach(allowId, { outbound: { domains: ["pypi.org", "*.github.com"], cidrs: ["10.9.8.7/32"] } })
      assert.strictEqual(allowed, "unreachable\n", "an address not on the allowlist cannot be reached")
      const request = fake.callsOf("SandboxCreate").find((r) => r["definition"]["name"] === `kilntainer-${allowId}`)
      assert.isDefined(request, "created on V1")
      assert.deepStrictEqual(request!["definition"]["networkAccess"], {
        networkAccessType: 3,
        allowedCidrs: ["10.9.8.7/32"],
        allowedDomains: ["pypi.org", "*.github.com"]
      })
      assert.strictEqual(yield* reach(computerId("blocked"), {}), "unreachable\n", "no network at all")
      // The probe itself works: an open sandbox (V2, no policy to keep) reaches the listener.
      const openId = computerId("open")
      assert.strictEqual(yield* reach(openId, { network: true }), "reachable\n")
      assert.isTrue(fake.callsOf("SandboxCreateV2").some((r) => r["definition"]["name"] === `kilntainer-${openId}`))
    })), 60_000)

  it.live("Modal refuses an allowlist CIDR it cannot read ('Invalid CIDR'); the adapter refuses it before asking", () =>
    Effect.gen(function*() {
      const client = fake.client()
      const app = yield* Effect.promise(() => client.apps.fromName("kilntainers", { createIfMissing: true }))
      const image = client.images.fromRegistry("debian:bookworm-slim")
      const said = yield* Effect.flip(Effect.tryPromise(() => client.sandboxes.create(app, image, { outboundCidrAllowlist: ["10.0.0.300/32"] })))
      assert.match(String(said.error), /Invalid CIDR: 10\.0\.0\.300\/32/)
      const asked = () => fake.callsOf("SandboxCreate").length + fake.callsOf("SandboxCreateV2").length
      const before = asked()
      const refused = yield* withBackend(
        Effect.flip(Effect.flatMap(Backend, (backend) => Effect.flatMap(metadataFor(computerId("cidr")), backend.create))),
        { outbound: { domains: ["pypi.org"], cidrs: ["10.0.0.300/32", "fd00::/200"] } }
      )
      assert.strictEqual(refused.reason, "Invalid")
      assert.match(refused.message, /'10\.0\.0\.300\/32' is not a CIDR Modal takes/)
      assert.strictEqual(asked(), before, "Modal was not asked")
      const badDomain = yield* withBackend(
        Effect.flip(Effect.flatMap(Backend, (backend) => Effect.flatMap(metadataFor(computerId("domain")), backend.create))),
        { outbound: { domains: ["10.0.0.1"], cidrs: [] } }
      )
      assert.match(badDomain.message, /'10\.0\.0\.1' is not a domain Modal takes/)
    }), 60_000)

  it.live("find: one computer by its name (the longest id too), all of ours across Modal's pages, one kind; never a foreign sandbox", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const longest = `${computerId("long")}-`.padEnd(62, "x") + "z"
      assert.strictEqual(longest.length, 63)
      const kept = yield* backend.create(yield* metadataFor(longest, false))
      assert.isAtMost(ModalBackend.sandboxName(longest).length, 64)
      assert.include(fake.running(), ModalBackend.sandboxName(longest))
      const byId = yield* backend.find({ id: longest })
      assert.deepStrictEqual(byId.map((found) => [found.providerId, found.metadata.id, found.metadata.temporary]), [[kept.providerId, longest, false]])
      assert.deepStrictEqual(yield* backend.find({ id: longest, temporary: true }), [])
      const ids = [0, 1, 2, 3, 4].map(() => computerId("page"))
      const made = yield* Effect.forEach(ids, (id) => Effect.flatMap(metadataFor(id), backend.create), { concurrency: 5 })
      const before = fake.callsOf("SandboxListV2").length
      const temporary = (yield* backend.find({ temporary: true })).map((found) => found.metadata.id)
      for (const id of ids) assert.include(temporary, id)
      assert.notInclude(temporary, longest)
      assert.isAtLeast(fake.callsOf("SandboxListV2").length - before, 3, "more than one page was read")
      assert.include((yield* backend.find({})).map((found) => found.metadata.id), longest)
      // A sandbox under a computer's name that someone else made is not ours: not found, not replaced.
      const foreign = computerId("foreign")
      const client = fake.client()
      const app = yield* Effect.promise(() => client.apps.fromName(ModalBackend.DEFAULT_APP_NAME, { createIfMissing: true }))
      yield* Effect.promise(() =>
        client.sandboxes.create(app, client.images.fromRegistry("other"), { name: `kilntainer-${foreign}`, tags: { owner: "someone" } })
      )
      assert.deepStrictEqual(yield* backend.find({ id: foreign }), [])
      const refused = yield* Effect.flip(Effect.flatMap(metadataFor(foreign), backend.create))
      assert.strictEqual(refused.reason, "Invalid")
      assert.match(refused.message, /not created by kilntainers for computer .*left untouched/)
      assert.include(fake.running(), `kilntainer-${foreign}`)
      fake.terminateFromOutside(`kilntainer-${foreign}`)
      yield* Effect.forEach([kept, ...made], backend.remove, { concurrency: 5, discard: true })
    })), 60_000)

  it.live("streams, stdin and its close, exit code, and Exit after all output (under the wrapper: a sandbox without the agent)", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("streams"), true, true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "cat; echo \"$FOO\" >&2; printf 'no newline'; exit 3"], {
          env: { ...ENV, FOO: "it's $HOME" }
        }))
        assert.isNumber(process.pid)
        yield* process.write(new TextEncoder().encode("line one\n"))
        yield* process.write(new TextEncoder().encode("line two\n"))
        yield* process.closeStdin
        return yield* collect(process)
      }))
      assert.strictEqual(result.stdout, "line one\nline two\nno newline")
      assert.strictEqual(result.stderr, "it's $HOME\n")
      assert.deepStrictEqual(result.exit, { exitCode: 3, signal: null })
      assert.strictEqual(result.order[result.order.length - 1], "Exit")
      // exact environment: nothing of the sandbox's own (HOME, LANG) or of the wrapper's (KT_*) leaks in
      const env = yield* exec(connection, ["env"])
      assert.strictEqual(env.stdout, `PATH=${ENV.PATH}\n`)
      // a background child holding the pipes does not delay Exit
      const started = Date.now()
      const background = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "sleep 20 & echo parent done"]))
        return yield* ownedEvents(process).pipe(Stream.takeUntil((event) => event._tag === "Exit"), Stream.runCollect)
      }))
      // well before the child's 20 s, with room for a loaded machine
      assert.isBelow(Date.now() - started, 12_000)
      assert.strictEqual([...background].pop()?._tag, "Exit")
      const missing = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["no-such-command"]))))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.match(missing.message, /command not found/)
      const badDir = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"], { cwd: "/no/such/dir" }))))
      assert.match(badDir.message, /working directory/)
      yield* done
    })), 60_000)

  it.live("large environments and arguments stay out of the exec's 64 KiB of arguments; too large is refused first (under the wrapper: a sandbox without the agent)", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("sizes"), true, true)
      const big = "y".repeat(70_000)
      const result = yield* exec(connection, ["sh", "-c", "printf %s \"$BIG\" | wc -c; printf %s \"$1\" | wc -c", "sh", "z".repeat(30_000)], {
        env: { ...ENV, BIG: big }
      })
      assert.strictEqual(result.stdout, "70000\n30000\n")
      const start = fake.callsOf("TaskExecStart").find((request) => request["secretSources"]?.[0]?.["env"]?.["contents"]?.["KT_AN"] === "4")
      assert.isDefined(start, "argv and env went in the exec's environment, in chunks")
      const argBytes = start!["commandArgs"].reduce((sum: number, arg: string) => sum + Buffer.byteLength(arg), 0)
      assert.isBelow(argBytes, 100)
      const before = fake.callsOf("TaskExecStart").length
      const refused = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"], { env: { ...ENV, HUGE: "h".repeat(130_000) } }))))
      assert.strictEqual(refused._tag, "SpawnFailed")
      assert.match(refused.message, /at most 122880 \(120 KiB/)
      assert.strictEqual(fake.callsOf("TaskExecStart").length, before, "nothing was sent to Modal")
      yield* done
    })), 60_000)

  it.live("concurrent stdin writes (terminal replies and input) are serialised, in order", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("stdin"))
      const lines = Array.from({ length: 40 }, (_, i) => `line ${i}\n`)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["cat"]))
        yield* Effect.forEach(lines, (line) => process.write(new TextEncoder().encode(line)), { concurrency: "unbounded", discard: true })
        yield* process.closeStdin
        return yield* collect(process)
      }))
      assert.strictEqual(result.stdout, lines.join(""))
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      yield* done
    })), 60_000)

  it.live("output over 2 MiB arrives whole through ProcessEvents, a slow reader holding the process back", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("bulk"))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' 'a'; echo; echo done >&2"]))
        let bytes = 0
        let exit: ExitInfo | undefined
        yield* ownedEvents(process).pipe(Stream.runForEach((event) =>
          Effect.sync(() => {
            if (event._tag === "Stdout") bytes += event.data.length
            if (event._tag === "Exit") exit = event.exit
          }).pipe(Effect.zipRight(bytes < 100_000 ? Effect.sleep("1 millis") : Effect.void))
        ), Effect.timeout("30 seconds"))
        return { bytes, exit }
      }))
      assert.strictEqual(result.bytes, 3_000_001)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      yield* done
    })), 60_000)

  it.live("signals reach the whole process group", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("signals"))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "sleep 271 & sleep 271; echo not reached"]))
        yield* Effect.sleep("300 millis")
        const before = yield* exec(connection, ["sh", "-c", "ps -eo args | grep -c '^sleep 271'"])
        assert.strictEqual(before.stdout.trim(), "2")
        yield* process.signal("SIGTERM")
        return yield* collect(process)
      }))
      // The agent may also count the descendants it tore down (descendantsKilled): timing, not the point here.
      assert.strictEqual(result.exit?.signal, "SIGTERM")
      assert.isNull(result.exit?.exitCode)
      assert.notInclude(result.stdout, "not reached")
      const after = yield* exec(connection, ["sh", "-c", "ps -eo args | grep -c '^sleep 271' || true"])
      assert.strictEqual(after.stdout.trim(), "0")
      yield* done
    })), 60_000)

  it.live("a TTY process gets its size, and resize changes it", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done } = yield* connected(computerId("tty"))
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sh", "-c", "stty size; read x; stty size"], { tty: { cols: 120, rows: 30 } }))
        yield* Effect.sleep("300 millis")
        yield* process.resize(90, 25)
        yield* process.write(new TextEncoder().encode("go\r"))
        return yield* collect(process)
      }))
      assert.match(result.stdout, /30 120\r\n/)
      assert.match(result.stdout, /25 90\r\n/)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      const piped = yield* Effect.scoped(Effect.flatMap(connection.spawn(spec(["true"])), (process) => Effect.flip(process.resize(80, 24))))
      assert.strictEqual(piped._tag, "Unsupported")
      yield* done
    })), 60_000)

  it.live("a sandbox terminated from outside: the connection's lost says so and its processes end (under the wrapper: a sandbox without the agent)", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("lost")
      const { connection, done } = yield* connected(id, true, true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* connection.spawn(spec(["sleep", "300"]))
        fake.terminateFromOutside(`kilntainer-${id}`)
        const reason = yield* connection.lost.pipe(Effect.timeout("10 seconds"))
        assert.match(reason, /ended outside kilntainers \(exit code 137\)/)
        return yield* collect(process)
      }))
      assert.strictEqual(result.exit?.signal, "SIGKILL")
      const after = yield* Effect.flip(Effect.scoped(connection.spawn(spec(["true"]))))
      assert.match(after.message, /the sandbox has ended/)
      assert.deepStrictEqual(yield* Effect.flatMap(Backend, (backend) => backend.find({ id })), [], "an ended sandbox is not found")
      yield* done
    })), 60_000)

  it.live("a sandbox that reaches its timeout: lost says so, at the end of life recorded at create", () =>
    withBackend(Effect.gen(function*() {
      const { connection, done, instance } = yield* connected(computerId("timeout"))
      const reason = yield* connection.lost.pipe(Effect.timeout("20 seconds"))
      assert.match(reason, /reached its timeout \(--sandbox-timeout, 6 s now\) and Modal ended it/)
      assert.isAtMost(instance.endsAt!, Date.now() + 500)
      yield* done
      // 6 s: long enough for the connection to be made on a loaded machine (2 s ran out during it)
    }), { sandboxTimeoutSec: 6 }), 60_000)

  it.live("closing a connection ends its watcher: no more polls of its sandbox, which stays", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("owner")
      const { instance, scope } = yield* connected(id, false)
      // A sandbox without network is a V1 one (ModalSdk.ts): the SDK polls it with SandboxWait.
      const polls = () => fake.calls.filter((c) => c.method.startsWith("SandboxWait") && c.request["sandboxId"] === instance.providerId).length
      yield* eventually(() => polls() >= 3, "the watcher polls the sandbox")
      yield* Scope.close(scope, Exit.void)
      const after = polls()
      yield* Effect.sleep("1 second")
      assert.isAtMost(polls(), after + 1, "at most a poll in flight when the scope closed")
      assert.include(fake.running(), `kilntainer-${id}`, "the sandbox itself stays")
      yield* Effect.flatMap(Backend, (backend) => backend.remove(instance))
    })), 60_000)

  it.live("provider errors are clear ProviderErrors with their reason, and leave nothing behind", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const before = fake.running().length
      fake.fail("SandboxCreate", "no capacity in eu-west", status.RESOURCE_EXHAUSTED)
      const create = yield* Effect.flip(Effect.flatMap(metadataFor(computerId("err")), backend.create))
      assert.strictEqual(create._tag, "ProviderError")
      assert.strictEqual(create.reason, "Quota")
      assert.match(create.message, /^modal backend: cannot create the sandbox .*: no capacity in eu-west; Modal is out of capacity/)
      // the sandbox was made, but preparing it failed: it is terminated again
      fake.fail("TaskExecStart", "task failed", status.FAILED_PRECONDITION)
      const prepare = yield* Effect.flip(Effect.flatMap(metadataFor(computerId("err"), false), backend.create))
      assert.match(prepare.message, /prepare the home directory: task failed/)
      assert.strictEqual(fake.running().length, before)
      fake.fail("SandboxListV2", "invalid token", status.UNAUTHENTICATED)
      const list = yield* Effect.flip(backend.find({}))
      assert.strictEqual(list.reason, "Denied")
      assert.match(list.message, /invalid token; the credentials are --modal-token-id/)
      // A short bound for the call that hangs only: a V1 create waits for its sandbox to be scheduled.
      fake.hang("SandboxGetFromNameV2")
      const hung = yield* withBackend(Effect.flip(Effect.flatMap(Backend, (short) => short.find({ id: computerId("err") }))), { callTimeoutMs: 500 })
      fake.unhang("SandboxGetFromNameV2")
      assert.strictEqual(hung.reason, "Timeout")
      assert.match(hung.message, /no answer from Modal within 0.5 s/)
      assert.strictEqual(fake.running().length, before)
    })), 60_000)

  it.live("wrong tokens are reported as such, without the secret", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const error = yield* Effect.flip(backend.find({}))
      assert.strictEqual(error.reason, "Denied")
      assert.match(error.message, /Token ID or secret is invalid; the credentials are --modal-token-id and --modal-token-secret/)
      assert.notInclude(error.message, "as-wrong")
    }), { client: fake.client({ tokenSecret: "as-wrong-secret" }) }), 60_000)

  it.live("a create our call gives up on is cancelled: the pending sandbox is terminated by name", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("late")
      fake.schedulingDelayMs = 3000
      const backend = yield* Backend
      const error = yield* Effect.flip(Effect.flatMap(metadataFor(id), backend.create)).pipe(
        Effect.ensuring(Effect.sync(() => (fake.schedulingDelayMs = 0)))
      )
      assert.strictEqual(error.reason, "Timeout")
      assert.match(error.message, /no answer from Modal within 1 s/)
      const made = [...fake.sandboxes.values()].find((s) => s.name === `kilntainer-${id}`)!
      assert.strictEqual(made.state, "finished", "terminated while still pending")
      assert.include(fake.callsOf("SandboxTerminate").map((r) => r["sandboxId"]), made.sandboxId)
    }), { gpu: "T4", callTimeoutMs: 1000 }), 60_000)

  it.live("a create given up on that cannot be cancelled at once is terminated when the SDK returns it", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("later")
      fake.schedulingDelayMs = 2500
      const backend = yield* Backend
      const creating = yield* Effect.fork(Effect.flip(Effect.flatMap(metadataFor(id), backend.create)))
      const made = () => [...fake.sandboxes.values()].find((s) => s.name === `kilntainer-${id}`)
      // Once the create is under way, the lookup by name (the immediate cancel) is refused.
      yield* eventually(() => made() !== undefined, "the create reaches Modal")
      fake.fail("SandboxGetFromNameV2", "no lookups now", status.PERMISSION_DENIED)
      yield* Fiber.join(creating).pipe(Effect.ensuring(Effect.sync(() => (fake.schedulingDelayMs = 0))))
      assert.notStrictEqual(made()?.state, "finished", "not cancelled by name")
      yield* eventually(() => made()?.state === "finished", "the late sandbox is terminated once scheduled")
      assert.include(fake.callsOf("SandboxTerminate").map((r) => r["sandboxId"]), made()!.sandboxId)
    }), { gpu: "T4", callTimeoutMs: 1000 }), 60_000)

  it.live("remove and start of an ended sandbox: removing is done already, starting is refused", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const id = computerId("ended")
      const instance: Instance = yield* backend.create(yield* metadataFor(id))
      fake.terminateFromOutside(`kilntainer-${id}`)
      yield* backend.remove(instance)
      const start = yield* Effect.flip(backend.start({ ...instance, state: "gone" }))
      assert.strictEqual(start.reason, "NotFound")
    })), 60_000)
})
