import { assert, describe, it } from "@effect/vitest"
import { encodeFrame, encodeSpawn, FrameType, MAX_OUTPUT, RELAY_WINDOW, SERVER_STREAM } from "../../../../src/layers/backends/agent/AgentProtocol.js"
import { type DecoderHandler, FrameDecoder } from "../../../../src/layers/backends/agent/FrameDecoder.js"

type Seen = { readonly event: string; readonly id: number; readonly data: string }

/** A decoder whose events are recorded as strings; output pieces of one frame are merged. */
const recorder = (overrides: Partial<DecoderHandler> = {}) => {
  const seen: Array<Seen> = []
  const add = (event: string, id: number, data = "") => {
    const last = seen[seen.length - 1]
    if ((event === "stdout" || event === "stderr" || event === "relayData") && last?.event === event && last.id === id) {
      seen[seen.length - 1] = { ...last, data: last.data + data }
    } else {
      seen.push({ event, id, data })
    }
  }
  const decoder = new FrameDecoder({
    ready: (version, port) => add("ready", 0, `${version}/${port}`),
    started: (id, pid) => add("started", id, String(pid)),
    spawnFailed: (id, reason) => add("spawnFailed", id, reason),
    output: (id, stream, data) => add(stream, id, Buffer.from(data).toString("latin1")),
    exit: (id, exit, ended) => add("exit", id, `${exit.exitCode}/${exit.signal}/${ended}`),
    closed: (id, ended) => add("closed", id, String(ended)),
    released: (id) => add("released", id),
    log: (text) => add("log", 0, text),
    relayOpen: (id) => add("relayOpen", id),
    relayData: (id, data) => add("relayData", id, Buffer.from(data).toString("latin1")),
    relayEof: (id) => add("relayEof", id),
    relayCredit: (id, bytes) => add("relayCredit", id, String(bytes)),
    relayClosed: (id, reset, refused) => add("relayClosed", id, refused ? "refused" : String(reset)),
    violation: (reason) => add("violation", 0, reason),
    ...overrides
  })
  return { decoder, seen }
}

const u32 = (n: number) => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(n)
  return b
}
const ready = (port = 0) => encodeFrame(FrameType.Ready, 0, Buffer.concat([u32(2), u32(port)]))
const exitFrame = (id: number, kind: number, value: number, ended = 0) =>
  encodeFrame(FrameType.Exit, id, Buffer.concat([Buffer.from([kind]), u32(value), u32(ended)]))
const violations = (seen: ReadonlyArray<Seen>) => seen.filter((s) => s.event === "violation").map((s) => s.data)

describe("FrameDecoder", () => {
  const stream = Buffer.concat([
    ready(),
    encodeFrame(FrameType.Started, 7, u32(4242)),
    encodeFrame(FrameType.Stdout, 7, Buffer.from("hello world")),
    encodeFrame(FrameType.Stderr, 7, Buffer.from("oops")),
    encodeFrame(FrameType.Log, 0, Buffer.from("note")),
    exitFrame(7, 0, 3, 2),
    encodeFrame(FrameType.Stdout, 7, Buffer.from("late")),
    encodeFrame(FrameType.Closed, 7, u32(1))
  ])
  const expected: Array<Seen> = [
    { event: "ready", id: 0, data: "2/0" },
    { event: "started", id: 7, data: "4242" },
    { event: "stdout", id: 7, data: "hello world" },
    { event: "stderr", id: 7, data: "oops" },
    { event: "log", id: 0, data: "note" },
    { event: "exit", id: 7, data: "3/null/2" },
    { event: "stdout", id: 7, data: "late" },
    { event: "closed", id: 7, data: "1" }
  ]

  it("decodes a process's frames delivered in one chunk", () => {
    const { decoder, seen } = recorder()
    decoder.expectSpawn(7)
    decoder.push(stream)
    assert.deepStrictEqual(seen, expected)
  })

  it("decodes frames split at every possible byte boundary, and byte by byte", () => {
    for (let cut = 1; cut < stream.length; cut++) {
      const { decoder, seen } = recorder()
      decoder.expectSpawn(7)
      decoder.push(stream.subarray(0, cut))
      decoder.push(stream.subarray(cut))
      assert.deepStrictEqual(seen, expected, `cut at ${cut}`)
    }
    const { decoder, seen } = recorder()
    decoder.expectSpawn(7)
    for (const byte of stream) decoder.push(Buffer.from([byte]))
    assert.deepStrictEqual(seen, expected)
  })

  it("hands output over as views of the input, without copying", () => {
    let view: Uint8Array | undefined
    const { decoder } = recorder({ output: (_id, _stream, data) => (view = data) })
    decoder.expectSpawn(1)
    const input = Buffer.concat([ready(), encodeFrame(FrameType.Started, 1, u32(9)), encodeFrame(FrameType.Stdout, 1, Buffer.alloc(1000, 120))])
    decoder.push(input)
    assert.strictEqual(view?.buffer, input.buffer)
    assert.strictEqual(view?.byteLength, 1000)
  })

  it("reports a signal death by name, and the teardown counts of EXIT and CLOSED", () => {
    const { decoder, seen } = recorder()
    decoder.expectSpawn(1)
    decoder.push(Buffer.concat([ready(), encodeFrame(FrameType.Started, 1, u32(9)), exitFrame(1, 1, 9, 3), encodeFrame(FrameType.Closed, 1, u32(2))]))
    assert.deepStrictEqual(seen.slice(2), [{ event: "exit", id: 1, data: "null/SIGKILL/3" }, { event: "closed", id: 1, data: "2" }])
  })

  it("accepts SPAWN_FAILED for a requested spawn", () => {
    const { decoder, seen } = recorder()
    decoder.expectSpawn(3)
    decoder.push(Buffer.concat([ready(), encodeFrame(FrameType.SpawnFailed, 3, Buffer.from("No such file"))]))
    assert.deepStrictEqual(seen[1], { event: "spawnFailed", id: 3, data: "No such file" })
    assert.deepStrictEqual(violations(seen), [])
  })

  it("drops a released process's frames until RELEASED, and rejects anything for it afterwards", () => {
    const { decoder, seen } = recorder()
    decoder.expectSpawn(5)
    decoder.push(Buffer.concat([ready(), encodeFrame(FrameType.Started, 5, u32(9)), encodeFrame(FrameType.Stdout, 5, Buffer.from("a"))]))
    decoder.releasing(5)
    assert.isFalse(decoder.isLive(5))
    decoder.push(Buffer.concat([
      encodeFrame(FrameType.Stdout, 5, Buffer.from("dropped")),
      exitFrame(5, 0, 0),
      encodeFrame(FrameType.Closed, 5, u32(0)),
      encodeFrame(FrameType.Released, 5)
    ]))
    assert.deepStrictEqual(seen.map((s) => s.event), ["ready", "started", "stdout", "released"])
    decoder.push(encodeFrame(FrameType.Stdout, 5, Buffer.from("forged")))
    assert.match(violations(seen)[0]!, /STDOUT for process 5, which was never started/)
  })

  const rejects = (name: string, frames: ReadonlyArray<Buffer>, pattern: RegExp, setup: (d: FrameDecoder) => void = (d) => d.expectSpawn(1)) =>
    it(`rejects ${name}`, () => {
      const { decoder, seen } = recorder()
      setup(decoder)
      decoder.push(Buffer.concat(frames))
      const found = violations(seen)
      assert.strictEqual(found.length, 1, JSON.stringify(seen))
      assert.match(found[0]!, pattern)
      assert.isTrue(decoder.broken)
      // Nothing more, whatever follows.
      const before = seen.length
      decoder.push(Buffer.concat([ready(), encodeFrame(FrameType.Started, 1, u32(1))]))
      assert.strictEqual(seen.length, before)
    })

  const started = encodeFrame(FrameType.Started, 1, u32(100))
  const header = (length: number, type: number, id: number) => {
    const h = Buffer.alloc(9)
    h.writeUInt32LE(length, 0)
    h.writeUInt8(type, 4)
    h.writeUInt32LE(id, 5)
    return h
  }
  rejects("a frame before READY", [started], /STARTED before READY/)
  rejects("a second READY", [ready(), ready()], /second READY/)
  rejects("another protocol version", [encodeFrame(FrameType.Ready, 0, Buffer.concat([u32(1), u32(0)]))], /protocol 1/)
  rejects("an unknown frame type", [ready(), header(0, 99, 1)], /unknown frame type 99/)
  rejects("a server frame type", [ready(), encodeFrame(FrameType.Spawn, 1, encodeSpawn({ argv: ["x"], cwd: "/", env: {} }))], /unknown frame type 1/)
  rejects("a 4 GiB output length before reading a byte of it", [ready(), started, header(0xffffffff, FrameType.Stdout, 1)], /STDOUT frame of 4294967295 bytes/)
  rejects("output bigger than the agent can send", [ready(), started, header(MAX_OUTPUT + 1, FrameType.Stdout, 1)], /allowed: 1\.\.1048576/)
  rejects("an empty output frame", [ready(), started, header(0, FrameType.Stderr, 1)], /STDERR frame of 0 bytes/)
  rejects("a long text", [ready(), header(5000, FrameType.Log, 0)], /LOG frame of 5000 bytes/)
  rejects("a short STARTED", [ready(), header(2, FrameType.Started, 1), Buffer.alloc(2)], /STARTED frame of 2 bytes/)
  rejects("output for a process never started", [ready(), encodeFrame(FrameType.Stdout, 2, Buffer.from("x"))], /process 2, which was never started/)
  rejects("output before STARTED", [ready(), encodeFrame(FrameType.Stdout, 1, Buffer.from("x"))], /process 1, which has not started/)
  rejects("STARTED for a spawn never requested", [ready(), encodeFrame(FrameType.Started, 9, u32(5))], /STARTED for process 9, which the server never started/)
  rejects("a second STARTED", [ready(), started, started], /second STARTED/)
  rejects("pid 0", [ready(), encodeFrame(FrameType.Started, 1, u32(0))], /pid 0/)
  rejects("a second EXIT", [ready(), started, exitFrame(1, 0, 0), exitFrame(1, 0, 0)], /second EXIT for process 1/)
  rejects("EXIT before STARTED", [ready(), exitFrame(1, 0, 0)], /EXIT for process 1 before STARTED/)
  rejects("an exit code above 255", [ready(), started, exitFrame(1, 0, 256)], /kind 0 and value 256/)
  rejects("an unknown exit kind", [ready(), started, exitFrame(1, 7, 1)], /kind 7/)
  rejects("signal 0", [ready(), started, exitFrame(1, 1, 0)], /kind 1 and value 0/)
  rejects("CLOSED before EXIT", [ready(), started, encodeFrame(FrameType.Closed, 1, u32(0))], /CLOSED for process 1 before its EXIT/)
  rejects("frames after CLOSED", [ready(), started, exitFrame(1, 0, 0), encodeFrame(FrameType.Closed, 1, u32(0)), encodeFrame(FrameType.Stdout, 1, Buffer.from("x"))], /never started/)
  rejects("RELEASED without a release", [ready(), started, encodeFrame(FrameType.Released, 1)], /RELEASED for process 1, which was not released/)
  rejects("SPAWN_FAILED after STARTED", [ready(), started, encodeFrame(FrameType.SpawnFailed, 1, Buffer.from("x"))], /had started/)
  rejects("LOG with a process id", [ready(), encodeFrame(FrameType.Log, 4, Buffer.from("x"))], /LOG with id 4/)
  rejects("RELAY_OPEN without a relay", [ready(), encodeFrame(FrameType.RelayOpen, 1)], /without a relay/)
  rejects("a reused relay stream id", [ready(3128), encodeFrame(FrameType.RelayOpen, 2), encodeFrame(FrameType.RelayOpen, 2)], /not a new id/)
  rejects("relay data beyond the window", [
    ready(3128),
    encodeFrame(FrameType.RelayOpen, 1),
    ...Array.from({ length: RELAY_WINDOW / 65536 }, () => encodeFrame(FrameType.RelayData, 1, Buffer.alloc(65536))),
    encodeFrame(FrameType.RelayData, 1, Buffer.alloc(1))
  ], /beyond the window of stream 1/)
  rejects("relay data for a stream not open", [ready(3128), encodeFrame(FrameType.RelayData, 4, Buffer.from("x"))], /stream 4, which is not open/)
  rejects("relay data after its EOF", [ready(3128), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayEof, 1), encodeFrame(FrameType.RelayData, 1, Buffer.from("x"))], /after its EOF/)
  rejects("a relay credit for data never sent", [ready(3128), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayCredit, 1, u32(10))], /has 0 in flight/)

  it("accepts relay data within the window once credited, and credits for data sent", () => {
    const { decoder, seen } = recorder()
    decoder.push(Buffer.concat([ready(3128), encodeFrame(FrameType.RelayOpen, 1)]))
    for (let i = 0; i < 3 * RELAY_WINDOW / 65536; i++) {
      decoder.push(encodeFrame(FrameType.RelayData, 1, Buffer.alloc(65536, 97)))
      decoder.relayConsumed(1, 65536)
    }
    decoder.relaySent(1, 100)
    decoder.push(Buffer.concat([encodeFrame(FrameType.RelayCredit, 1, u32(60)), encodeFrame(FrameType.RelayEof, 1), encodeFrame(FrameType.RelayClosed, 1, Buffer.from([0]))]))
    assert.deepStrictEqual(violations(seen), [])
    assert.strictEqual(seen.find((s) => s.event === "relayData")?.data.length, 3 * RELAY_WINDOW)
    assert.deepStrictEqual(seen.slice(-3).map((s) => `${s.event}:${s.data}`), ["relayCredit:60", "relayEof:", "relayClosed:false"])
  })

  it("drops a reset stream's frames until RELAY_CLOSED", () => {
    const { decoder, seen } = recorder()
    decoder.push(Buffer.concat([ready(3128), encodeFrame(FrameType.RelayOpen, 1)]))
    decoder.relayReset(1)
    decoder.push(Buffer.concat([encodeFrame(FrameType.RelayData, 1, Buffer.from("x")), encodeFrame(FrameType.RelayEof, 1), encodeFrame(FrameType.RelayClosed, 1, Buffer.from([1]))]))
    assert.deepStrictEqual(seen.map((s) => s.event), ["ready", "relayOpen", "relayClosed"])
  })

  // Streams the server opens (RELAY_CONNECT, for preview URLs): ids with the top bit, answered once.
  const connect = SERVER_STREAM + 1
  const expectConnect = (d: FrameDecoder) => d.expectConnect(connect)
  rejects("a RELAY_OPEN with a server's id that was never asked for", [ready(), encodeFrame(FrameType.RelayOpen, SERVER_STREAM + 9)], /did not ask for/, expectConnect)
  rejects("relay data before the asked-for stream connected", [ready(), encodeFrame(FrameType.RelayData, connect, Buffer.from("x"))], /not open/, expectConnect)
  rejects("a refusal of a stream the agent opened itself", [ready(3128), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayClosed, 1, Buffer.from([2]))], /reason 2/, () => {})
  rejects("a credit on a stream still connecting", [ready(), encodeFrame(FrameType.RelayCredit, connect, u32(1))], /not connected yet/, expectConnect)

  it("opens an asked-for stream without a relay port, and lets it carry data both ways", () => {
    const { decoder, seen } = recorder()
    decoder.expectConnect(connect)
    decoder.push(Buffer.concat([ready(0), encodeFrame(FrameType.RelayOpen, connect), encodeFrame(FrameType.RelayData, connect, Buffer.from("HTTP/1.0 200"))]))
    decoder.relaySent(connect, 10)
    decoder.push(Buffer.concat([encodeFrame(FrameType.RelayCredit, connect, u32(10)), encodeFrame(FrameType.RelayClosed, connect, Buffer.from([0]))]))
    assert.deepStrictEqual(violations(seen), [])
    assert.deepStrictEqual(seen.slice(1).map((s) => `${s.event}:${s.data}`), ["relayOpen:", "relayData:HTTP/1.0 200", "relayCredit:10", "relayClosed:false"])
  })

  it("reports a stream that could not connect as refused, and an abandoned one not at all", () => {
    const { decoder, seen } = recorder()
    decoder.expectConnect(connect)
    decoder.expectConnect(connect + 1)
    decoder.relayReset(connect + 1)
    decoder.push(Buffer.concat([
      ready(0),
      encodeFrame(FrameType.RelayClosed, connect, Buffer.from([2])),
      encodeFrame(FrameType.RelayOpen, connect + 1),
      encodeFrame(FrameType.RelayData, connect + 1, Buffer.from("dropped")),
      encodeFrame(FrameType.RelayClosed, connect + 1, Buffer.from([1]))
    ]))
    assert.deepStrictEqual(violations(seen), [])
    assert.deepStrictEqual(seen.slice(1).map((s) => `${s.event}:${s.id - SERVER_STREAM}:${s.data}`), ["relayClosed:1:refused", "relayClosed:2:true"])
  })
})
