/**
 * A Modal sandbox holds its processes through its agent (ModalAgent.ts), on the real SDK against the
 * fake: the agent's key is in the sandbox's tags (the servers' side of Modal's API), never anywhere
 * the guest can read, and a connector the guest runs without it is refused; a sandbox of an older
 * kilntainers (no key tag) keeps its processes under the wrapper, held by the server.
 */
import { assert, it } from "@effect/vitest"
import { Clock, Effect, Exit, Scope, Stream } from "effect"
import { afterAll, beforeAll } from "vitest"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import { newKey } from "../../../../src/layers/backends/agent/AgentHandshake.js"
import * as ProcessAgent from "../../../../src/layers/backends/agent/ProcessAgent.js"
import * as ModalAgent from "../../../../src/layers/backends/modal/ModalAgent.js"
import * as ModalBackend from "../../../../src/layers/backends/modal/ModalBackend.js"
import { AGENT_KEY_TAG, sandboxName } from "../../../../src/layers/backends/modal/SandboxIdentity.js"
import { Backend, type Connection, ownedEvents } from "../../../../src/services/Backend.js"
import { backendOptions, fakeWorks, ModalFake } from "../../../support/ModalFake.js"
import { describeIf } from "../../../support/Requirements.js"

const ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }
let fake: ModalFake
beforeAll(async () => {
  fake = await ModalFake.start()
})
afterAll(() => fake.close())

let counter = 0
const metadataFor = (what: string) =>
  Effect.map(Clock.currentTimeMillis, (now): ComputerMetadata => ({
    id: `ma${process.pid}-${what}-${counter++}`,
    temporary: false,
    image: ModalBackend.DEFAULT_IMAGE,
    created: new Date(now).toISOString(),
    instance: "test-server",
    owner: { host: "test-host", pid: process.pid, start: "1" },
    nonce: `n${counter++}`
  }))

const withBackend = <A, E>(body: Effect.Effect<A, E, Backend | Scope.Scope>) =>
  Effect.scoped(body).pipe(Effect.provide(ModalBackend.layer(backendOptions(fake, { appName: "kilntainers-agent-test" }))))

/** A command's stdout, run as the guest (a process of the connection). */
const output = (connection: Connection, script: string) =>
  Effect.scoped(
    Effect.flatMap(connection.spawn({ argv: ["sh", "-c", script], cwd: "/", env: ENV }), (process) =>
      ownedEvents(process).pipe(
        Stream.runFold("", (said, event) => (event._tag === "Stdout" ? said + Buffer.from(event.data).toString() : said)),
        Effect.timeout("30 seconds")
      ))
  )

describeIf(fakeWorks, "bubblewrap and nsenter (the Modal fake runs commands in them)")("a Modal sandbox's agent", () => {
  it.live("is keyed by a tag only servers read: a connector the guest runs without the key is refused, and the key is nowhere inside", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const metadata = yield* metadataFor("key")
      const instance = yield* backend.create(metadata)
      yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
      const connection = yield* backend.connect(instance)
      assert.isDefined(connection.held, "the sandbox holds its processes")
      const key = fake.named(sandboxName(metadata.id))!.tags[AGENT_KEY_TAG]!
      assert.match(key, /^[0-9a-f]{64}$/)

      // The guest's own connector (a process of the sandbox), with a key it made up: refused.
      const guest: ProcessAgent.ProcessHost = { backend: "modal", spawn: connection.spawn, dir: ModalAgent.AGENT_DIR, cwd: "/", env: ENV }
      const forged = yield* Effect.either(Effect.scoped(ProcessAgent.attach(guest, newKey())))
      assert.strictEqual(forged._tag, "Left", "a connector without the key is refused")
      // What the guest can read: every process's arguments and environment, the agent's files.
      // The key in halves, joined only inside the shell (a here-document on fd 3 is grep's pattern), so
      // that no command line of this search holds it.
      const [head, tail] = [key.slice(0, 32), key.slice(32)]
      const seen = yield* output(
        connection,
        `a=${head}; b=${tail}\n` +
          `cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -cF -f /dev/fd/3 3<<EOF\n$a$b\nEOF\n` +
          `grep -rlF -f /dev/fd/3 /.kilntainers /tmp /home/agent 3<<EOF 2>/dev/null | wc -l\n$a$b\nEOF`
      )
      assert.deepStrictEqual(seen.trim().split("\n"), ["0", "0"], "the key is in no process's arguments or environment, nor in a file")
      // The servers' connection still works after the refused attempt.
      assert.strictEqual(yield* output(connection, "echo still"), "still\n")
    })), 120_000)

  it.live("is not started in a sandbox of an older kilntainers (no key tag): its processes are the server's, as before", () =>
    withBackend(Effect.gen(function*() {
      const backend = yield* Backend
      const metadata = yield* metadataFor("older")
      const instance = yield* backend.create(metadata)
      yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
      delete fake.named(sandboxName(metadata.id))!.tags[AGENT_KEY_TAG]
      const scope = yield* Scope.make()
      const connection = yield* backend.connect(instance).pipe(Scope.extend(scope))
      assert.isUndefined(connection.held, "nothing held without a key")
      assert.strictEqual(yield* output(connection, "echo wrapped; test -e /.kilntainers && echo agent"), "wrapped\n")
      yield* Scope.close(scope, Exit.void)
    })), 120_000)
})

