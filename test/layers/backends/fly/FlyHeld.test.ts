import { assert, it } from "@effect/vitest"
import { Duration, Effect, Exit } from "effect"
import { beforeEach } from "vitest"
import type { FlyFake } from "../../../support/FlyFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { APP, collect, metadata, open, options, spec, TOKEN, useFake, withBackend, withKernel } from "./FlyTestSupport.js"

/** Processes in the machine whose command line matches `needle` (a grep pattern that does not match itself), counted from inside. */
const countInside = (needle: string) =>
  spec(["sh", "-c", `n=0; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q -- "${needle}" && n=$((n+1)); done; echo $n`])

/** Polls `read` until `done` holds (at most `tries` times, 100 ms apart). */
const eventually = <A, E, R>(read: Effect.Effect<A, E, R>, done: (a: A) => boolean, tries = 100) =>
  Effect.gen(function*() {
    let last = yield* read
    for (let i = 0; i < tries && !done(last); i++) {
      yield* Effect.sleep(Duration.millis(100))
      last = yield* read
    }
    return last
  })

/**
 * A command run in the machine by the Machines API's exec alone (no round of ours: nothing of a
 * server runs), again after the rate limit's wait (Fly's: 1 exec a second per machine).
 */
const machineExec = async (fakeUrl: string, machineId: string, script: string) => {
  for (let attempt = 0; attempt < 10; attempt++) {
    const response = await fetch(`${fakeUrl}/v1/apps/${APP}/machines/${machineId}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ command: ["sh", "-c", script], timeout: 20 })
    })
    if (response.status === 429) {
      await new Promise((resolve) => setTimeout(resolve, 1000))
      continue
    }
    assert.strictEqual(response.status, 200, await response.clone().text())
    return (await response.json()) as { stdout: string; exit_code: number }
  }
  return assert.fail("the Machines API kept answering 429")
}

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("the Fly machine holds its processes (HeldProcesses)", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
  })

  it.live("a process started through one connection is listed, followed, written to and killed through another, under the machine's handle", () =>
    withBackend(options(fake.url), (backend) =>
      Effect.gen(function*() {
        const instance = yield* backend.create(metadata(`held-beside-${process.pid}`, false))
        yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
        const a = yield* backend.connect(instance)
        const b = yield* backend.connect(instance)
        assert.isDefined(a.held)
        assert.strictEqual(a.held!.boot, b.held!.boot, "one machine, one boot")
        const started = yield* a.spawn({ ...spec(["sh", "-c", "echo ready; while read l; do echo got $l; done"]), label: "the echo loop" })
        assert.isNumber(started.handle)
        const seenByA = yield* Effect.fork(collect(started))
        const listed = yield* eventually(b.held!.list, (all) => all.some((one) => one.handle === started.handle && one.totals.stdout === 6))
        const record = listed.find((one) => one.handle === started.handle)!
        assert.deepInclude(record, { command: "the echo loop", cwd: spec([]).cwd, exit: undefined, closed: false, note: "" })
        assert.isAbove(record.startedAt, 0)
        assert.isFalse(b.held!.following(record.handle))
        const head = yield* b.held!.read(record.handle, "stdout", 0, 100)
        assert.deepStrictEqual({ ...head, data: Buffer.from(head.data).toString() }, { start: 0, total: 6, data: "ready\n" })
        const attached = yield* b.held!.attach(record.handle, record.totals)
        assert.isTrue(b.held!.following(record.handle))
        const seenByB = yield* Effect.fork(collect(attached.process))
        yield* attached.process.write(new TextEncoder().encode("from-b\n"))
        yield* eventually(b.held!.read(record.handle, "stdout", 6, 100), (read) => read.total === 17)
        yield* b.held!.note(record.handle, "killed by server B")
        yield* attached.process.signal("SIGKILL")
        const byB = yield* seenByB
        assert.strictEqual(byB.stdout, "got from-b\n", "B follows from the offsets it attached at")
        assert.deepStrictEqual(byB.exits, [{ exitCode: null, signal: "SIGKILL" }])
        const byA = yield* seenByA
        assert.strictEqual(byA.stdout, "ready\ngot from-b\n")
        assert.deepStrictEqual(byA.exits, [{ exitCode: null, signal: "SIGKILL" }], "A decodes a signal B sent as B does")
        const after = (yield* b.held!.list).find((one) => one.handle === record.handle)!
        assert.deepInclude(after, { exit: { exitCode: null, signal: "SIGKILL" }, closed: true, note: "killed by server B" })
        assert.isAtLeast(after.endedAt!, after.startedAt)
      })), 90_000)

  it.live("closing the connection of a permanent machine leaves its processes running; another connection kills one", () =>
    withBackend(options(fake.url), (backend) =>
      Effect.gen(function*() {
        const instance = yield* backend.create(metadata(`held-after-${process.pid}`, false))
        yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
        const handle = yield* Effect.scoped(Effect.gen(function*() {
          const a = yield* backend.connect(instance)
          const started = yield* a.spawn(spec(["sh", "-c", "echo up; exec sleep 1002"]))
          yield* Effect.sleep(Duration.millis(300))
          return started.handle!
        }))
        const b = yield* backend.connect(instance)
        const running = yield* b.spawn(countInside("^sleep 100[2]")).pipe(Effect.flatMap(collect))
        assert.strictEqual(running.stdout.trim(), "1", "the process runs on after its connection closed")
        const record = (yield* b.held!.list).find((one) => one.handle === handle)
        assert.deepInclude(record, { exit: undefined, closed: false, totals: { stdout: 3, stderr: 0 } })
        const attached = yield* b.held!.attach(handle, { stdout: 0, stderr: 0 })
        const events = yield* Effect.fork(collect(attached.process))
        yield* attached.process.signal("SIGKILL")
        const seen = yield* events
        assert.strictEqual(seen.stdout, "up\n", "attached from offset 0, it gets the output from the start")
        assert.deepStrictEqual(seen.exits, [{ exitCode: null, signal: "SIGKILL" }])
        const left = yield* b.spawn(countInside("^sleep 100[2]")).pipe(Effect.flatMap(collect))
        assert.strictEqual(left.stdout.trim(), "0")
        const missing = yield* Effect.exit(b.held!.read(9999, "stdout", 0, 10))
        assert.isTrue(Exit.isFailure(missing), "a handle the machine never gave is refused")
      })), 90_000)

  it.live("a server that shut down leaves a permanent computer's background process to the next server, which lists and kills it", () =>
    Effect.gen(function*() {
      const id = `held-kernel-${process.pid}`
      const pid = yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          yield* computers.create("a", { computer_id: id, temporary: false })
          const spawned = yield* processes.spawn("a", { computer_id: id, command: "echo up; exec sleep 1003", background: true })
          assert.strictEqual(spawned.status, "running")
          return spawned.pid
        }))
      yield* withKernel(options(fake.url), ({ computers, processes }) =>
        Effect.gen(function*() {
          const count = () => processes.exec("b", { computer_id: id, command: "n=0; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^sleep 100[3]' && n=$((n+1)); done; echo $n" })
          assert.strictEqual((yield* count()).stdout, "1\n")
          const listed = yield* processes.list("b", { computer_id: id })
          const found = listed.processes.find((one) => one.pid === pid)
          assert.strictEqual(found?.status, "running", JSON.stringify(listed))
          assert.match(found!.command, /echo up; exec sleep 1003$/)
          const killed = yield* processes.kill("b", { id: pid, computer_id: id, signal: "SIGKILL" })
          assert.strictEqual(killed.status, "terminated")
          assert.strictEqual((yield* count()).stdout, "0\n")
          yield* computers.delete("b", id)
        }))
    }), 120_000)

  it.live("each stream keeps its first quarter and its last bytes on the machine's disk; a read into what fell out moves past it, exactly", () =>
    withBackend(options(fake.url, { tuning: { retainBytes: 4096 } }), (backend) =>
      Effect.gen(function*() {
        const { connection } = yield* open(backend, "held-retain")
        const expected = Buffer.from(Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join(""))
        const long = yield* connection.spawn(spec(["seq", "1", "20000"]))
        const handle = long.handle!
        yield* collect(long)
        // The machine's supervisor trims its streams once a second, with the retention a round wrote.
        const cut = yield* eventually(
          Effect.flatMap(connection.spawn(spec(["sh", "-c", "cat /tmp/.kt/p/*/out.cut 2>/dev/null"])), collect),
          (seen) => seen.stdout !== "",
          50
        )
        assert.strictEqual(cut.stdout, `1024 ${expected.length - 3072}\n`)
        const held = connection.held!
        assert.deepStrictEqual(held.retention, { headBytes: 1024, tailBytes: 3072 })
        const head = yield* held.read(handle, "stdout", 0, 1_000_000)
        assert.deepStrictEqual({ start: head.start, total: head.total }, { start: 0, total: expected.length })
        assert.isTrue(Buffer.from(head.data).equals(expected.subarray(0, 1024)), "a read stops where the head ends")
        const into = yield* held.read(handle, "stdout", 5000, 1_000_000)
        assert.strictEqual(into.start, expected.length - 3072, "a read from what fell out starts where the tail does")
        assert.isTrue(Buffer.from(into.data).equals(expected.subarray(expected.length - 3072)))
        const disk = yield* collect(yield* connection.spawn(spec(["sh", "-c", `du -k /tmp/.kt/p/*/out | sort -n | tail -1 | cut -f1`])))
        assert.isAtMost(Number(disk.stdout.trim()), 12, "the machine's disk holds the retained bytes, not the whole stream")
        // A follower that attaches from the start gets the head, then the tail after a counted gap.
        const attached = yield* held.attach(handle, { stdout: 0, stderr: 0 })
        const replay = yield* collect(attached.process)
        assert.strictEqual(replay.stdout, Buffer.concat([expected.subarray(0, 1024), expected.subarray(expected.length - 3072)]).toString())
        assert.deepStrictEqual(replay.exits, [{ exitCode: 0, signal: null }])
      })), 90_000)

  it.live("a machine no server follows keeps its streams to the retention: its supervisor trims them itself", () =>
    withBackend(options(fake.url, { tuning: { retainBytes: 4096 } }), (backend) =>
      Effect.gen(function*() {
        const instance = yield* backend.create(metadata(`held-keeper-${process.pid}`, false))
        yield* Effect.addFinalizer(() => Effect.ignore(backend.remove(instance)))
        // A server starts a process that writes 108,894 bytes once the server is gone, then stays.
        yield* Effect.scoped(Effect.gen(function*() {
          const connection = yield* backend.connect(instance)
          const writer = yield* connection.spawn(spec(["sh", "-c", "sleep 2; seq 1 20000; exec sleep 1000"]))
          assert.isDefined(writer.handle)
        }))
        const sizes = () =>
          Effect.promise(() =>
            machineExec(fake.url, instance.providerId, "for f in /tmp/.kt/p/*/out; do echo $(wc -c < $f) $(du -k $f | cut -f1); done")
          )
        // Nothing of a server runs now: only the machine's own supervisor can trim.
        const trimmed = yield* eventually(sizes(), (answer) => /^108894 \d+\n$/.test(answer.stdout) && Number(answer.stdout.split(" ")[1]) <= 12, 20)
        const [size, kib] = trimmed.stdout.trim().split(" ").map(Number)
        assert.strictEqual(size, 108894, `the stream keeps its length (offsets stay valid): ${trimmed.stdout}`)
        assert.isAtMost(kib!, 12, `the machine's disk holds the retained 4 KiB, not 106 KiB: ${trimmed.stdout}`)
        const cut = yield* Effect.promise(() => machineExec(fake.url, instance.providerId, "cat /tmp/.kt/p/*/out.cut"))
        assert.strictEqual(cut.stdout, `1024 ${108894 - 3072}\n`, "the cut is recorded: its head and where its tail starts")
      })), 90_000)
})
