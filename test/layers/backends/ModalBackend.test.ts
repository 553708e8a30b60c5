import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Option, Redacted, Scope, Stream } from "effect"
import type { App, Image, Sandbox } from "modal"
import { NotFoundError } from "modal"
import { afterAll } from "vitest"
import * as ModalBackend from "../../../src/layers/backends/ModalBackend.js"
import * as ModalExec from "../../../src/layers/backends/ModalExec.js"
import * as ModalGateway from "../../../src/layers/backends/ModalGateway.js"
import type { BackendComputer, BackendProcess, ExitInfo, ProcessEvent, SpawnSpec } from "../../../src/services/Backend.js"
import { Backend } from "../../../src/services/Backend.js"
import { fakeWorks, ModalFake } from "../../support/ModalFake.js"
import { describeIf } from "../../support/Requirements.js"

const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }
const fake = new ModalFake()
afterAll(() => fake.shutdown())

/** Only the Modal backend's own options: no Docker --image anywhere (Kilntainers' startup bug). */
const options = (overrides: Partial<ModalBackend.ModalBackendOptions> = {}): ModalBackend.ModalBackendOptions => ({
  tokenId: undefined,
  tokenSecret: undefined,
  appName: ModalBackend.DEFAULT_APP_NAME,
  image: ModalBackend.DEFAULT_IMAGE,
  cpu: ModalBackend.DEFAULT_CPU,
  memoryMb: ModalBackend.DEFAULT_MEMORY_MB,
  gpu: undefined,
  region: undefined,
  sandboxTimeoutSec: ModalBackend.DEFAULT_SANDBOX_TIMEOUT_SEC,
  network: false,
  instanceId: `test-${Math.random().toString(36).slice(2, 8)}`,
  gateway: fake,
  ...overrides
})

let counter = 0
const computerId = (what: string) => `m${process.pid}-${what}-${counter++}`

interface Result {
  readonly stdout: string
  readonly stderr: string
  readonly exit: ExitInfo | undefined
  readonly order: ReadonlyArray<ProcessEvent["_tag"]>
}

const collect = (process: BackendProcess) =>
  process.events.pipe(
    Stream.runFold({ stdout: "", stderr: "", exit: undefined, order: [] } as Result, (acc, event) => ({
      stdout: acc.stdout + (event._tag === "Stdout" ? Buffer.from(event.data).toString() : ""),
      stderr: acc.stderr + (event._tag === "Stderr" ? Buffer.from(event.data).toString() : ""),
      exit: event._tag === "Exit" ? event.exit : acc.exit,
      order: [...acc.order, event._tag]
    })),
    Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error("the process did not end within 20 s") })
  )

const spec = (argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}): SpawnSpec => ({
  argv,
  cwd: ModalBackend.HOME,
  env: ENV,
  ...extra
})

const exec = (computer: BackendComputer, argv: ReadonlyArray<string>, extra: Partial<SpawnSpec> = {}) =>
  Effect.scoped(Effect.flatMap(computer.spawn(spec(argv, extra)), collect))

const withBackend = <A, E>(body: Effect.Effect<A, E, Backend>, overrides: Partial<ModalBackend.ModalBackendOptions> = {}) =>
  body.pipe(Effect.provide(ModalBackend.layer(options(overrides))))

/** Opens a computer in a Scope of its own, closed by the caller. */
const openIn = (id: string, temporary: boolean) =>
  Effect.gen(function*() {
    const backend = yield* Backend
    const scope = yield* Scope.make()
    const computer = yield* backend.open({ id, temporary }).pipe(Scope.extend(scope))
    return { computer, scope }
  })

describe("ModalBackend options and the SDK adapter (no network)", () => {
  it.effect("builds from the Modal options alone: no Docker image is involved", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      assert.strictEqual(backend.name, "modal")
      assert.isFalse(backend.capabilities.restart)
      assert.isTrue(backend.capabilities.factoryReset)
    })))

  it.effect("without a gateway, missing tokens are a clear error at startup", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(Layer.build(ModalBackend.layer(options({ gateway: undefined }))).pipe(Effect.scoped))
      assert.strictEqual(error._tag, "BackendError")
      assert.match(error.reason, /--modal-token-id and --modal-token-secret/)
    }))

  it.effect("rejects a sandbox timeout beyond Modal's 24 h and other bad options", () =>
    Effect.gen(function*() {
      const long = yield* Effect.flip(Layer.build(ModalBackend.layer(options({ sandboxTimeoutSec: 86401 }))).pipe(Effect.scoped))
      assert.match(long.reason, /--sandbox-timeout .* 86400/)
      const memory = yield* Effect.flip(Layer.build(ModalBackend.layer(options({ memoryMb: 0.5 }))).pipe(Effect.scoped))
      assert.match(memory.reason, /--modal-memory/)
    }))

  it("maps requests to the SDK's parameters", () => {
    assert.deepStrictEqual(ModalGateway.clientParams({ tokenId: "ak-1", tokenSecret: "as-2" }), { tokenId: "ak-1", tokenSecret: "as-2" })
    assert.deepStrictEqual(
      ModalGateway.createParams({
        appName: "app",
        image: "debian:bookworm-slim",
        cpu: 2,
        memoryMiB: 1024,
        gpu: "T4",
        region: "us-east",
        timeoutMs: 3_600_000,
        blockNetwork: true,
        name: "kilntainer-x",
        tags: { kilntainers: "true" }
      }),
      {
        cpu: 2,
        memoryMiB: 1024,
        timeoutMs: 3_600_000,
        blockNetwork: true,
        name: "kilntainer-x",
        tags: { kilntainers: "true" },
        gpu: "T4",
        regions: ["us-east"]
      }
    )
    assert.deepStrictEqual(ModalGateway.execParams({ argv: ["true"], pty: false }), {
      mode: "binary",
      stdout: "pipe",
      stderr: "pipe",
      pty: false
    })
  })

  it.effect("the adapter makes the right SDK calls", () =>
    Effect.gen(function*() {
      const calls: Array<[string, ...Array<unknown>]> = []
      const sandbox = {
        sandboxId: "sb-1",
        exec: (argv: Array<string>, params: unknown) => {
          calls.push(["exec", argv, params])
          return Promise.resolve({})
        },
        getTags: () => Promise.resolve({ kilntainers: "true" }),
        terminate: () => {
          calls.push(["terminate"])
          return Promise.resolve()
        },
        detach: () => {}
      } as unknown as Sandbox
      const app = { appId: "ap-1" } as App
      const image = { imageId: "" } as unknown as Image
      const client: ModalGateway.ModalClientLike = {
        apps: {
          fromName: (name, params) => {
            calls.push(["apps.fromName", name, params])
            return Promise.resolve(app)
          }
        },
        images: {
          fromRegistry: (tag) => {
            calls.push(["images.fromRegistry", tag])
            return image
          }
        },
        sandboxes: {
          create: (a, i, params) => {
            calls.push(["sandboxes.create", a, i, params])
            return Promise.resolve(sandbox)
          },
          fromName: (appName, name) => {
            calls.push(["sandboxes.fromName", appName, name])
            return Promise.reject(new NotFoundError(`Sandbox with name '${name}' not found`))
          },
          list: (params) => {
            calls.push(["sandboxes.list", params])
            return (async function*() {
              yield sandbox
            })()
          }
        },
        close: () => calls.push(["close"])
      }
      const gateway = ModalGateway.fromClient(client)
      const handle = yield* gateway.create({
        appName: "kilntainers",
        image: "debian:bookworm-slim",
        cpu: 1,
        memoryMiB: 512,
        gpu: undefined,
        region: undefined,
        timeoutMs: 60_000,
        blockNetwork: true,
        name: "kilntainer-a",
        tags: { kilntainers: "true" }
      })
      assert.strictEqual(handle.sandboxId, "sb-1")
      const missing = yield* gateway.fromName("kilntainers", "kilntainer-b")
      assert.isTrue(Option.isNone(missing))
      const listed = yield* gateway.list("kilntainers", { kilntainers: "true" })
      assert.strictEqual(listed.length, 1)
      yield* handle.exec({ argv: ["echo", "hi"], pty: true }).pipe(Effect.ignore)
      yield* handle.terminate
      assert.deepStrictEqual(calls, [
        ["apps.fromName", "kilntainers", { createIfMissing: true }],
        ["images.fromRegistry", "debian:bookworm-slim"],
        ["sandboxes.create", app, image, {
          cpu: 1,
          memoryMiB: 512,
          timeoutMs: 60_000,
          blockNetwork: true,
          name: "kilntainer-a",
          tags: { kilntainers: "true" }
        }],
        ["sandboxes.fromName", "kilntainers", "kilntainer-b"],
        ["sandboxes.list", { appId: "ap-1", tags: { kilntainers: "true" } }],
        ["exec", ["echo", "hi"], { mode: "binary", stdout: "pipe", stderr: "pipe", pty: true }],
        ["terminate"]
      ])
    }))

  it("the end marker is found across chunks and only a possible marker prefix is held back", () => {
    const out: Array<string> = []
    const scanner = new ModalExec.MarkerScanner("n1", (data) => out.push(Buffer.from(data).toString("latin1")))
    scanner.push(Buffer.from("name? "))
    assert.deepStrictEqual(out, ["name? "])
    scanner.push(Buffer.from("abc\0KT"))
    scanner.push(Buffer.from("Xn1:4"))
    assert.isUndefined(scanner.code)
    scanner.push(Buffer.from("2\0after"))
    assert.strictEqual(scanner.code, 42)
    assert.strictEqual(out.join(""), "name? abcafter")
  })
})

describeIf(fakeWorks, "bubblewrap and nsenter (the Modal fake runs commands in them)")("ModalBackend against the fake", () => {
  it.live("creates a tagged, named sandbox with the configured resources", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("create")
      const { computer, scope } = yield* openIn(id, true)
      const request = fake.created[fake.created.length - 1]!
      assert.strictEqual(request.name, `kilntainer-${id}`)
      assert.strictEqual(request.image, "debian:bookworm-slim")
      assert.strictEqual(request.cpu, 2)
      assert.strictEqual(request.memoryMiB, 768)
      assert.strictEqual(request.gpu, "T4")
      assert.strictEqual(request.region, "eu-west")
      assert.strictEqual(request.timeoutMs, 600_000)
      assert.isTrue(request.blockNetwork)
      assert.strictEqual(request.tags["kilntainers"], "true")
      assert.strictEqual(request.tags["kilntainers-computer-id"], id)
      assert.strictEqual(request.tags["kilntainers-temporary"], "true")
      assert.strictEqual(request.tags["kilntainers-image"], "debian:bookworm-slim")
      const pwd = yield* exec(computer, ["pwd"])
      assert.strictEqual(pwd.stdout, "/home/agent\n")
      yield* Scope.close(scope, Exit.void)
      assert.notInclude(fake.running(), `kilntainer-${id}`, "a temporary sandbox is terminated with its scope")
    }), { cpu: 2, memoryMb: 768, gpu: "T4", region: "eu-west", sandboxTimeoutSec: 600 }), 60_000)

  it.live("a permanent computer is found again by name and tags from a fresh layer", () =>
    Effect.gen(function*() {
      const id = computerId("keep")
      const first = yield* withBackend(Effect.gen(function*() {
        const { computer, scope } = yield* openIn(id, false)
        yield* exec(computer, ["sh", "-c", "echo kept > /home/agent/file; echo tmp > /tmp/t"])
        yield* Scope.close(scope, Exit.void)
        return computer.providerId
      }))
      assert.include(fake.running(), `kilntainer-${id}`, "a permanent sandbox stays running")
      yield* withBackend(Effect.gen(function*() {
        const backend = yield* Backend
        const listed = (yield* backend.list).find((c) => c.id === id)
        assert.isDefined(listed)
        assert.isFalse(listed!.temporary)
        assert.strictEqual(listed!.providerId, first)
        assert.strictEqual(listed!.image, "debian:bookworm-slim")
        const wrong = yield* Effect.flip(Effect.scoped(backend.open({ id, temporary: true })))
        assert.match(wrong.reason, /exists as a permanent computer/)
        const { computer, scope } = yield* openIn(id, false)
        assert.strictEqual(computer.providerId, first)
        const read = yield* exec(computer, ["cat", "/home/agent/file", "/tmp/t"])
        assert.strictEqual(read.stdout, "kept\ntmp\n")
        yield* computer.destroy
        yield* Scope.close(scope, Exit.void)
        assert.notInclude(fake.running(), `kilntainer-${id}`)
        assert.isUndefined((yield* backend.list).find((c) => c.id === id))
      }))
    }), 60_000)

  it.live("a running sandbox of that name that is not ours is left alone", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("foreign")
      yield* fake.create({
        appName: ModalBackend.DEFAULT_APP_NAME,
        image: "other",
        cpu: 1,
        memoryMiB: 256,
        gpu: undefined,
        region: undefined,
        timeoutMs: 60_000,
        blockNetwork: true,
        name: `kilntainer-${id}`,
        tags: { owner: "someone" }
      })
      const backend = yield* Backend
      const error = yield* Effect.flip(Effect.scoped(backend.open({ id, temporary: true })))
      assert.match(error.reason, /not created by kilntainers/)
      assert.include(fake.running(), `kilntainer-${id}`)
      fake.terminateFromOutside(`kilntainer-${id}`)
    })), 60_000)

  it.live("streams, stdin and its close, exit code, and Exit after all output", () =>
    withBackend(Effect.gen(function*() {
      const { computer, scope } = yield* openIn(computerId("streams"), true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "cat; echo \"$FOO\" >&2; printf 'no newline'; exit 3"], {
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
      // exact environment: nothing of the sandbox's own (HOME, LANG) leaks in
      const env = yield* exec(computer, ["env"])
      assert.strictEqual(env.stdout, `PATH=${ENV.PATH}\n`)
      // a background child holding the pipes does not delay Exit
      const started = Date.now()
      const background = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "sleep 3 & echo parent done"]))
        return yield* process.events.pipe(
          Stream.takeUntil((event) => event._tag === "Exit"),
          Stream.runCollect
        )
      }))
      assert.isBelow(Date.now() - started, 2500)
      assert.strictEqual([...background].pop()?._tag, "Exit")
      const missing = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["no-such-command"]))))
      assert.strictEqual(missing._tag, "SpawnFailed")
      assert.match(missing.message, /command not found/)
      const badDir = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"], { cwd: "/no/such/dir" }))))
      assert.match(badDir.message, /working directory/)
      yield* Scope.close(scope, Exit.void)
    })), 60_000)

  it.live("signals reach the whole process group", () =>
    withBackend(Effect.gen(function*() {
      const { computer, scope } = yield* openIn(computerId("signals"), true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "sleep 271 & sleep 271; echo not reached"]))
        yield* Effect.sleep("300 millis")
        const before = yield* exec(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 271'"])
        assert.strictEqual(before.stdout.trim(), "2")
        yield* process.signal("SIGTERM")
        return yield* collect(process)
      }))
      assert.deepStrictEqual(result.exit, { exitCode: null, signal: "SIGTERM" })
      assert.notInclude(result.stdout, "not reached")
      const after = yield* exec(computer, ["sh", "-c", "ps -eo args | grep -c '^sleep 271' || true"])
      assert.strictEqual(after.stdout.trim(), "0")
      yield* Scope.close(scope, Exit.void)
    })), 60_000)

  it.live("a TTY process gets its size, and resize changes it", () =>
    withBackend(Effect.gen(function*() {
      const { computer, scope } = yield* openIn(computerId("tty"), true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sh", "-c", "stty size; read x; stty size"], { tty: { cols: 120, rows: 30 } }))
        yield* Effect.sleep("300 millis")
        yield* process.resize(90, 25)
        yield* process.write(new TextEncoder().encode("go\r"))
        return yield* collect(process)
      }))
      assert.match(result.stdout, /30 120\r\n/)
      assert.match(result.stdout, /25 90\r\n/)
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      yield* Scope.close(scope, Exit.void)
    })), 60_000)

  it.live("a sandbox terminated from outside is reported lost and its processes end", () =>
    withBackend(Effect.gen(function*() {
      const id = computerId("lost")
      const { computer, scope } = yield* openIn(id, true)
      const result = yield* Effect.scoped(Effect.gen(function*() {
        const process = yield* computer.spawn(spec(["sleep", "300"]))
        fake.terminateFromOutside(`kilntainer-${id}`)
        const reason = yield* computer.lost.pipe(Effect.timeout("10 seconds"))
        assert.match(reason, /ended outside kilntainers/)
        return yield* collect(process)
      }))
      assert.strictEqual(result.exit?.signal, "SIGKILL")
      const after = yield* Effect.flip(Effect.scoped(computer.spawn(spec(["true"]))))
      assert.match(after.message, /gone/)
      yield* Scope.close(scope, Exit.void)
    })), 60_000)

  it.live("provider errors are clear BackendErrors and leave nothing behind", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const before = fake.running().length
      fake.fail("create", "RESOURCE_EXHAUSTED: no capacity for T4 in eu-west")
      const create = yield* Effect.flip(Effect.scoped(backend.open({ id: computerId("err"), temporary: true })))
      assert.strictEqual(create._tag, "BackendError")
      assert.match(create.message, /modal backend: cannot create the sandbox .*: RESOURCE_EXHAUSTED: no capacity/)
      // the sandbox was made, but preparing it failed: it is terminated again
      fake.fail("exec", "INTERNAL: task failed")
      const prepare = yield* Effect.flip(Effect.scoped(backend.open({ id: computerId("err"), temporary: false })))
      assert.match(prepare.reason, /INTERNAL: task failed/)
      assert.strictEqual(fake.running().length, before)
      fake.fail("list", "UNAUTHENTICATED: invalid token")
      const list = yield* Effect.flip(backend.list)
      assert.match(list.reason, /UNAUTHENTICATED.*check --modal-token-id/)
      fake.hang("fromName")
      const hung = yield* Effect.flip(Effect.scoped(backend.open({ id: computerId("err"), temporary: true })))
      fake.unhang("fromName")
      assert.match(hung.reason, /no answer from Modal within 0.5 s/)
      assert.strictEqual(fake.running().length, before)
    }), { callTimeoutMs: 500 }), 60_000)

  it.live("factory reset recreates from the recorded image; restart is honestly unsupported", () =>
    withBackend(Effect.gen(function*() {
      const { computer, scope } = yield* openIn(computerId("reset"), true)
      yield* exec(computer, ["sh", "-c", "echo x > /home/agent/f"])
      const before = computer.providerId
      const restart = yield* Effect.flip(computer.restart)
      assert.strictEqual(restart._tag, "Unsupported")
      yield* computer.factoryReset
      assert.notStrictEqual(computer.providerId, before)
      const after = yield* exec(computer, ["sh", "-c", "ls /home/agent"])
      assert.strictEqual(after.stdout, "")
      yield* Scope.close(scope, Exit.void)
    })), 60_000)
})

const token = { id: process.env["MODAL_TOKEN_ID"], secret: process.env["MODAL_TOKEN_SECRET"] }
const haveToken = token.id !== undefined && token.id !== "" && token.secret !== undefined && token.secret !== ""
if (!haveToken) {
  process.stderr.write("skipping the real Modal smoke test: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET to run it\n")
}

describe.skipIf(!haveToken)("ModalBackend against real Modal (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET)", () => {
  it.live("creates a sandbox, runs a command in it, and terminates it", () =>
    withBackend(Effect.gen(function*() {
      const { computer, scope } = yield* openIn(computerId("real"), true)
      const result = yield* exec(computer, ["sh", "-c", "echo hello from modal; uname -s"])
      assert.strictEqual(result.stdout, "hello from modal\nLinux\n")
      assert.deepStrictEqual(result.exit, { exitCode: 0, signal: null })
      yield* Scope.close(scope, Exit.void)
    }), {
      gateway: undefined,
      tokenId: Redacted.make(token.id ?? ""),
      tokenSecret: Redacted.make(token.secret ?? ""),
      appName: "kilntainers-test",
      sandboxTimeoutSec: 600
    }), 300_000)
})
