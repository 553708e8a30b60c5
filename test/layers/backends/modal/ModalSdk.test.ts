import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Logger, LogLevel, Option } from "effect"
import type { App, Image, Sandbox } from "modal"
import { NotFoundError } from "modal"
import * as ModalSdk from "../../../../src/layers/backends/modal/ModalSdk.js"

// The SDK adapter against hand-made stand-ins of the SDK's objects: the cases the real service (and
// the fake) cannot produce on demand — a create that resolves after we gave up, a write interrupted
// while the SDK still holds the stream.

const request = {
  appName: "kilntainers",
  image: "debian:bookworm-slim",
  cpu: 1,
  memoryMiB: 512,
  gpu: undefined,
  region: undefined,
  timeoutMs: 60_000,
  blockNetwork: true,
  name: "kilntainer-a",
  tags: { kilntainers: "true", "kilntainers-computer-id": "a" }
}

interface Stub {
  readonly calls: Array<[string, ...Array<unknown>]>
  /** The profile's sandboxV2 at each create, as the SDK reads it when `create` is called. */
  readonly v2AtCreate: Array<unknown>
  readonly client: ModalSdk.ModalClientLike
  readonly sandbox: (id: string, tags: Record<string, string>) => Sandbox
}

const stub = (overrides: Partial<ModalSdk.ModalClientLike["sandboxes"]> = {}): Stub => {
  const calls: Array<[string, ...Array<unknown>]> = []
  const v2AtCreate: Array<unknown> = []
  const profile = { sandboxV2: true }
  const sandbox = (id: string, tags: Record<string, string>) =>
    ({
      sandboxId: id,
      exec: (argv: Array<string>, params: unknown) => {
        calls.push(["exec", argv, params])
        return Promise.resolve({})
      },
      getTags: () => Promise.resolve(tags),
      terminate: () => {
        calls.push(["terminate", id])
        return Promise.resolve()
      },
      detach: () => {}
    }) as unknown as Sandbox
  const app = { appId: "ap-1" } as App
  const image = { imageId: "" } as unknown as Image
  const client: ModalSdk.ModalClientLike = {
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
      },
      fromId: () => Promise.reject(new Error("not used")),
      delete: () => Promise.reject(new Error("not used"))
    },
    sandboxes: {
      create: (_app, _image, params) => {
        calls.push(["sandboxes.create", params])
        v2AtCreate.push(profile.sandboxV2)
        return Promise.resolve(sandbox("sb-1", { ...params?.tags }))
      },
      fromId: (sandboxId) => {
        calls.push(["sandboxes.fromId", sandboxId])
        return Promise.resolve(sandbox(sandboxId, {}))
      },
      fromName: (appName, name) => {
        calls.push(["sandboxes.fromName", appName, name])
        return Promise.reject(new NotFoundError(`Sandbox with name '${name}' not found`))
      },
      list: (params) => {
        calls.push(["sandboxes.list", params])
        return (async function*() {
          yield sandbox("sb-1", {})
        })()
      },
      ...overrides
    },
    close: () => calls.push(["close"]),
    profile
  }
  return { calls, v2AtCreate, client, sandbox }
}

describe("the Modal SDK adapter", () => {
  it.effect("makes the right SDK calls, with Modal's parameters", () =>
    Effect.gen(function*() {
      const { calls, client } = stub()
      const gateway = ModalSdk.fromClient(client)
      const handle = yield* gateway.create({ ...request, gpu: "T4", region: "us-east" })
      assert.strictEqual(handle.sandboxId, "sb-1")
      assert.isTrue(Option.isNone(yield* gateway.fromName("kilntainers", "kilntainer-b")))
      assert.strictEqual((yield* gateway.list("kilntainers", { kilntainers: "true" })).length, 1)
      assert.strictEqual((yield* gateway.fromId("sb-2")).sandboxId, "sb-2")
      yield* handle.exec({ argv: ["echo", "hi"], env: { KT_N: "1" }, pty: true }).pipe(Effect.ignore)
      yield* handle.terminate
      assert.deepStrictEqual(calls, [
        ["apps.fromName", "kilntainers", { createIfMissing: true }],
        ["images.fromRegistry", "debian:bookworm-slim"],
        ["sandboxes.create", {
          cpu: 1,
          memoryMiB: 512,
          timeoutMs: 60_000,
          blockNetwork: true,
          name: "kilntainer-a",
          tags: request.tags,
          gpu: "T4",
          regions: ["us-east"]
        }],
        ["sandboxes.fromName", "kilntainers", "kilntainer-b"],
        ["sandboxes.list", { appId: "ap-1", tags: { kilntainers: "true" } }],
        ["sandboxes.fromId", "sb-2"],
        ["exec", ["echo", "hi"], { mode: "binary", stdout: "pipe", stderr: "pipe", pty: true, env: { KT_N: "1" } }],
        ["terminate", "sb-1"]
      ])
    }))

  it.effect("a sandbox without network or with an allowlist is asked of V1 (its policy is documented there); an open one of the SDK's default", () =>
    Effect.gen(function*() {
      const { client, v2AtCreate } = stub()
      const gateway = ModalSdk.fromClient(client)
      yield* gateway.create(request)
      yield* gateway.create({ ...request, blockNetwork: false, outbound: { domains: ["pypi.org"], cidrs: [] } })
      yield* gateway.create({ ...request, blockNetwork: false })
      assert.deepStrictEqual(v2AtCreate, [false, false, true])
      assert.strictEqual(client.profile?.sandboxV2, true, "the profile is as it was")
      const { profile: _profile, ...withoutProfile } = client
      const bare = ModalSdk.fromClient(withoutProfile)
      const refused = yield* Effect.flip(bare.create(request))
      assert.match(refused.message, /cannot be asked for a V1 sandbox/)
    }))

  it.effect("refuses what Modal would refuse without calling it", () =>
    Effect.gen(function*() {
      const { calls, client } = stub()
      const gateway = ModalSdk.fromClient(client)
      const name = yield* Effect.flip(gateway.create({ ...request, name: "kilntainer-" + "x".repeat(60) }))
      assert.strictEqual(name.reason, "Invalid")
      assert.deepStrictEqual(calls, [])
    }))

  it.live("a create given up on is terminated by name when the sandbox there carries our tags", () =>
    Effect.gen(function*() {
      const { calls, client, sandbox } = stub({
        create: () => new Promise<Sandbox>(() => {}), // the SDK still waiting for scheduling
        fromName: (_app, name) => Promise.resolve(sandbox(`sb-${name}`, request.tags))
      })
      const gateway = ModalSdk.fromClient(client)
      const error = yield* Effect.flip(gateway.create(request).pipe(Effect.timeout("50 millis")))
      assert.strictEqual(error._tag, "TimeoutException")
      assert.deepStrictEqual(calls.filter((c) => c[0] === "terminate"), [["terminate", "sb-kilntainer-a"]])
    }))

  it.live("…but not a sandbox of that name with other tags", () =>
    Effect.gen(function*() {
      const { calls, client, sandbox } = stub({
        create: () => new Promise<Sandbox>(() => {}),
        fromName: (_app, name) => Promise.resolve(sandbox(`sb-${name}`, { ...request.tags, "kilntainers-created": "another attempt" }))
      })
      yield* Effect.flip(ModalSdk.fromClient(client).create(request).pipe(Effect.timeout("50 millis")))
      assert.deepStrictEqual(calls.filter((c) => c[0] === "terminate"), [])
    }))

  it.live("a sandbox the SDK returns after we gave up is terminated then", () =>
    Effect.gen(function*() {
      let resolve!: (sandbox: Sandbox) => void
      const logged: Array<string> = []
      const { calls, client, sandbox } = stub({ create: () => new Promise<Sandbox>((done) => (resolve = done)) })
      const gateway = ModalSdk.fromClient(client, (message) => logged.push(message))
      yield* Effect.flip(gateway.create(request).pipe(Effect.timeout("50 millis")))
      assert.deepStrictEqual(calls.filter((c) => c[0] === "terminate"), [], "nothing to cancel by name yet")
      resolve(sandbox("sb-late", request.tags))
      yield* Effect.promise(() => new Promise((done) => setImmediate(done)))
      yield* Effect.promise(() => new Promise((done) => setImmediate(done)))
      assert.deepStrictEqual(calls.filter((c) => c[0] === "terminate"), [["terminate", "sb-late"]])
      assert.match(logged.join("\n"), /terminated the sandbox kilntainer-a \(sb-late\), created after its create call was given up/)
    }))

  it.effect("stdin writes wait their turn, even behind a write whose caller was interrupted", () =>
    Effect.gen(function*() {
      const releases: Array<() => void> = []
      let inFlight = 0
      let overlapped = false
      const written: Array<string> = []
      const command = {
        stdin: {
          // Like the SDK's WritableStream writer: one write at a time.
          writeBytes: (data: Uint8Array) => {
            if (inFlight > 0) overlapped = true
            inFlight++
            return new Promise<void>((done) =>
              releases.push(() => {
                written.push(Buffer.from(data).toString())
                inFlight--
                done()
              })
            )
          },
          close: () => Promise.resolve()
        },
        stdout: new ReadableStream(),
        stderr: new ReadableStream(),
        wait: () => Promise.resolve(0)
      }
      const { client, sandbox } = stub()
      const made = sandbox("sb-1", {}) as unknown as { exec: () => Promise<unknown> }
      made.exec = () => Promise.resolve(command)
      const handle = yield* ModalSdk.fromClient({
        ...client,
        sandboxes: { ...client.sandboxes, create: () => Promise.resolve(made as unknown as Sandbox) }
      }).create(request)
      const exec = yield* handle.exec({ argv: ["cat"], pty: false })
      const first = yield* Effect.fork(exec.writeStdin(Buffer.from("a")))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(first)
      const second = yield* Effect.fork(exec.writeStdin(Buffer.from("b")))
      const done = yield* Deferred.make<void>()
      yield* Effect.fork(Fiber.join(second).pipe(Effect.andThen(Deferred.succeed(done, undefined))))
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.strictEqual(releases.length, 1, "the second write waits for the first, interrupted or not")
      releases.shift()!()
      yield* Effect.promise(() => new Promise((resolve) => setImmediate(resolve)))
      assert.strictEqual(releases.length, 1)
      releases.shift()!()
      yield* Deferred.await(done)
      assert.deepStrictEqual(written, ["a", "b"])
      assert.isFalse(overlapped)
    }))

  it.effect("the SDK's logger writes to our log", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const capture = Logger.make(({ logLevel, message }) => lines.push(`${logLevel.label} ${String(message)}`))
      const logger = yield* Effect.runtime<never>().pipe(
        Effect.map(ModalSdk.sdkLogger),
        Effect.provide(Layer.merge(Logger.replace(Logger.defaultLogger, capture), Logger.minimumLogLevel(LogLevel.Debug)))
      )
      logger.warn("Using insecure TLS", "task_id", "ta-1", "token", "as-abcdefghijklmnop")
      logger.debug("detail")
      assert.strictEqual(lines[0], "WARN modal sdk: Using insecure TLS (task_id=ta-1, token=as-abcd…)")
      assert.strictEqual(lines[1], "DEBUG modal sdk: detail")
    }))
})
