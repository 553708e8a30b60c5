import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option, Stream, TestClock } from "effect"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import type { CreateSandboxRequest, ExecHandle, ModalGatewayService, SandboxHandle } from "../../../../src/layers/backends/modal/ModalGateway.js"
import { modalError } from "../../../../src/layers/backends/modal/ModalError.js"
import * as ModalProvider from "../../../../src/layers/backends/modal/ModalProvider.js"
import { tagsFor } from "../../../../src/layers/backends/modal/SandboxIdentity.js"

const KEY = "ab".repeat(32)

// The provider's own logic over a scripted gateway, on the TestClock: no sandboxes, no sleeps.

/** A command that prints `stderr` and exits with `code`. */
const finished = (code: number, stderr = ""): ExecHandle => ({
  stdout: Stream.empty,
  stderr: stderr === "" ? Stream.empty : Stream.make(new TextEncoder().encode(stderr)),
  writeStdin: () => Effect.void,
  closeStdin: Effect.void,
  wait: Effect.succeed(code)
})

const handle = (options: {
  readonly id?: string
  readonly polls?: Array<number | null | "error">
  readonly tags?: Record<string, string>
  readonly exitCode?: number
  readonly terminate?: Effect.Effect<void, ReturnType<typeof modalError>>
} = {}) => {
  const state = { polls: 0, terminated: 0, detached: 0 }
  const sandbox: SandboxHandle = {
    sandboxId: options.id ?? "sb-1",
    exec: () => Effect.succeed(finished(options.exitCode ?? 0, options.exitCode ? "mkdir: read-only file system\n" : "")),
    tags: Effect.succeed(options.tags ?? {}),
    poll: Effect.suspend(() => {
      const answer = options.polls?.[Math.min(state.polls++, (options.polls?.length ?? 1) - 1)] ?? null
      return answer === "error" ? Effect.fail(modalError("poll", "Unavailable", "network")) : Effect.succeed(answer)
    }),
    terminate: Effect.suspend(() => {
      state.terminated++
      return options.terminate ?? Effect.void
    }),
    snapshotFilesystem: Effect.die("not used"),
    detach: Effect.sync(() => void state.detached++),
    tunnels: Effect.succeed(new Map())
  }
  return { sandbox, state }
}

const metadata = (id: string, temporary = true): ComputerMetadata => ({
  id,
  temporary,
  image: "img",
  created: "1970-01-01T00:00:00.000Z",
  instance: "i",
  nonce: "n"
})

const provider = (gateway: Partial<ModalGatewayService> = {}) =>
  ModalProvider.make({
    gateway: {
      create: () => Effect.die("not used"),
      fromId: () => Effect.die("not used"),
      fromName: () => Effect.succeed(Option.none()),
      list: () => Effect.succeed([]),
      deleteImage: () => Effect.die("not used"),
      close: Effect.void,
      ...gateway
    },
    appName: "kilntainers",
    cpu: 1,
    memoryMb: 512,
    gpu: undefined,
    region: undefined,
    sandboxTimeoutSec: 3600,
    network: false,
    callTimeoutMs: 10_000,
    watchIntervalMs: 5_000
  })

describe("ModalProvider", () => {
  it.effect("watch asks every interval (Clock) until the sandbox has ended, through failed polls", () =>
    Effect.gen(function*() {
      const { sandbox, state } = handle({ polls: [null, "error", null, 137] })
      const watching = yield* Effect.fork(provider().watch(sandbox))
      yield* TestClock.adjust("4999 millis")
      assert.strictEqual(state.polls, 1)
      yield* TestClock.adjust("1 millis")
      assert.strictEqual(state.polls, 2)
      yield* TestClock.adjust("10 seconds")
      assert.strictEqual(yield* Fiber.join(watching), 137)
      assert.strictEqual(state.polls, 4)
    }))

  it.effect("an interrupted watch (its computer closed) polls no more", () =>
    Effect.gen(function*() {
      const { sandbox, state } = handle({ polls: [null] })
      const watching = yield* Effect.fork(provider().watch(sandbox))
      yield* TestClock.adjust("15 seconds")
      assert.strictEqual(state.polls, 4)
      yield* Fiber.interrupt(watching)
      yield* TestClock.adjust("1 hour")
      assert.strictEqual(state.polls, 4)
    }))

  it.effect("find by id tells ours (tags naming this id, of the asked kind) from a foreign sandbox of the same name", () =>
    Effect.gen(function*() {
      const tags = tagsFor(metadata("a", false), 3_600_000, KEY)
      const ours = provider({ fromName: () => Effect.succeed(Option.some(handle({ tags }).sandbox)) })
      const [found] = yield* ours.find({ id: "a" })
      assert.deepStrictEqual(found, { providerId: "sb-1", metadata: metadata("a", false), state: "running", endsAt: 3_600_000 })
      assert.deepStrictEqual(yield* ours.find({ id: "b" }), [], "another computer's tags are not ours (a hash collision of long names)")
      assert.deepStrictEqual(yield* ours.find({ id: "a", temporary: true }), [], "not of the asked kind")
      const untagged = provider({ fromName: () => Effect.succeed(Option.some(handle({ tags: { owner: "x" } }).sandbox)) })
      assert.deepStrictEqual(yield* untagged.find({ id: "a" }), [])
    }))

  it.effect("find without an id lists by tags and keeps only ours", () =>
    Effect.gen(function*() {
      const asked: Array<Record<string, string>> = []
      const listed = provider({
        list: (_app, tags) =>
          Effect.sync(() => {
            asked.push({ ...tags })
            return [
              handle({ id: "sb-a", tags: tagsFor(metadata("a"), 1, KEY) }).sandbox,
              handle({ id: "sb-x", tags: { kilntainers: "true" } }).sandbox
            ]
          })
      })
      const found = yield* listed.find({ temporary: true })
      assert.deepStrictEqual(found.map((instance) => instance.providerId), ["sb-a"])
      assert.deepStrictEqual(asked, [{ kilntainers: "true", "kilntainers-temporary": "true" }])
    }))

  it.effect("create records when Modal ends the sandbox (from Clock), and prepares the home directory", () =>
    Effect.gen(function*() {
      const requests: Array<CreateSandboxRequest> = []
      const made = handle({ id: "sb-new" })
      const creating = provider({
        create: (request) =>
          Effect.sync(() => {
            requests.push(request)
            return made.sandbox
          })
      })
      yield* TestClock.adjust("10 seconds")
      const instance = yield* creating.create(metadata("a"))
      assert.deepStrictEqual(instance, { providerId: "sb-new", metadata: metadata("a"), state: "running", endsAt: 10_000 + 3_600_000 })
      assert.strictEqual(requests[0]!.name, "kilntainer-a")
      assert.strictEqual(requests[0]!.tags["kilntainers-ends"], "1970-01-01T01:00:10.000Z")
      assert.strictEqual(requests[0]!.tags["kilntainers-create-nonce"], "n")
      assert.strictEqual(made.state.detached, 1, "the create's handle is let go; connections open their own")
    }))

  it.effect("a create whose home directory cannot be made removes the sandbox again", () =>
    Effect.gen(function*() {
      const made = handle({ id: "sb-bad", exitCode: 1, polls: [137] })
      const creating = provider({ create: () => Effect.succeed(made.sandbox), fromId: () => Effect.succeed(made.sandbox) })
      const error = yield* Effect.flip(creating.create(metadata("a")))
      assert.strictEqual(error.message, "modal backend: cannot prepare the home directory: mkdir /home/agent failed with exit code 1: mkdir: read-only file system")
      assert.strictEqual(made.state.terminated, 1)
    }))

  it.effect("a name taken by our own sandbox is a Conflict (the kernel attaches it); by someone else's, a clear refusal", () =>
    Effect.gen(function*() {
      const taken = () => Effect.fail(modalError("create", "Conflict", "Sandbox with name 'kilntainer-a' already exists"))
      const ours = provider({ create: taken, fromName: () => Effect.succeed(Option.some(handle({ tags: tagsFor(metadata("a"), 1, KEY) }).sandbox)) })
      assert.strictEqual((yield* Effect.flip(ours.create(metadata("a")))).reason, "Conflict")
      const foreign = handle({ tags: { owner: "someone" } })
      const theirs = provider({ create: taken, fromName: () => Effect.succeed(Option.some(foreign.sandbox)) })
      const refused = yield* Effect.flip(theirs.create(metadata("a")))
      assert.strictEqual(refused.reason, "Invalid")
      assert.match(refused.message, /a sandbox named kilntainer-a is running in the Modal app 'kilntainers' but was not created by kilntainers for computer 'a'.*left untouched/)
      assert.strictEqual(foreign.state.terminated, 0)
    }))

  it.effect("remove: an ended or unknown sandbox is fine; a failed terminate of a running one is an error", () =>
    Effect.gen(function*() {
      const instance = { providerId: "sb-1", metadata: metadata("a"), state: "running" } as const
      const removing = (options: Parameters<typeof handle>[0]) => {
        const made = handle(options)
        return { made, provider: provider({ fromId: () => Effect.succeed(made.sandbox) }) }
      }
      const unknown = removing({ terminate: Effect.fail(modalError("terminate", "NotFound", "no such sandbox")) })
      yield* unknown.provider.remove(instance)
      assert.strictEqual(unknown.made.state.detached, 1)
      yield* removing({ terminate: Effect.fail(modalError("terminate", "Unavailable", "busy")), polls: [137] }).provider.remove(instance)
      const running = removing({ terminate: Effect.fail(modalError("terminate", "Unavailable", "busy")), polls: [null] })
      assert.strictEqual((yield* Effect.flip(running.provider.remove(instance))).detail, "busy")
    }))

  it.effect("remove waits (on Clock, bounded) until Modal says the terminated sandbox has ended: its name is free then", () =>
    Effect.gen(function*() {
      const instance = { providerId: "sb-1", metadata: metadata("a"), state: "running" } as const
      const slow = handle({ polls: [null, null, 137] })
      const removing = yield* Effect.fork(provider({ fromId: () => Effect.succeed(slow.sandbox) }).remove(instance))
      yield* TestClock.adjust("500 millis")
      assert.isNull(yield* Fiber.poll(removing).pipe(Effect.map((exit) => exit._tag === "Some" ? "done" : null)))
      yield* TestClock.adjust("500 millis")
      yield* Fiber.join(removing)
      assert.deepStrictEqual([slow.state.terminated, slow.state.polls], [1, 3])
      const stuck = handle({ polls: [null] })
      const waiting = yield* Effect.fork(Effect.flip(provider({ fromId: () => Effect.succeed(stuck.sandbox) }).remove(instance)))
      yield* TestClock.adjust("30 seconds")
      const error = yield* Fiber.join(waiting)
      assert.strictEqual(error.reason, "Timeout")
      assert.match(error.message, /cannot terminate the sandbox sb-1: Modal has not ended it within 30s/)
    }))

  it.effect("start accepts a running sandbox only: an ended one cannot be started again", () =>
    Effect.gen(function*() {
      const instance = { providerId: "sb-1", metadata: metadata("a"), state: "running" } as const
      assert.strictEqual(yield* provider().start(instance), instance)
      const error = yield* Effect.flip(provider().start({ ...instance, state: "gone" }))
      assert.strictEqual(error.reason, "NotFound")
    }))

  it.effect("a call that gets no answer fails with a Timeout named after what we were doing", () =>
    Effect.gen(function*() {
      const hung = provider({ list: () => Effect.never })
      const fiber = yield* Effect.fork(Effect.flip(hung.find({})))
      yield* TestClock.adjust("10 seconds")
      const error = yield* Fiber.join(fiber)
      assert.strictEqual(error.reason, "Timeout")
      assert.strictEqual(error.message, "modal backend: cannot list sandboxes: no answer from Modal within 10 s (no answer in time)")
    }))

  it.effect("signal: exit 1 (no such group) is not an error, anything else is", () =>
    Effect.gen(function*() {
      const exec = (code: number) => ({ ...handle().sandbox, exec: () => Effect.succeed(finished(code, "kill: permission denied\n")) })
      yield* provider().signal(exec(1), 42, "SIGTERM", false)
      const error = yield* Effect.flip(provider().signal(exec(2), 42, "SIGTERM", false))
      assert.strictEqual(error.message, "modal backend: cannot deliver SIGTERM: kill: permission denied")
    }))
})
