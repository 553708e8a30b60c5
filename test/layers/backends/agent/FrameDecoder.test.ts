import { assert, describe, it } from "@effect/vitest"
import { encodeFrame, FrameType, MAX_OUTPUT, MAX_READ, RELAY_WINDOW, SERVER_STREAM } from "../../../../src/layers/backends/agent/AgentProtocol.js"
import { type DecoderHandler, FrameDecoder } from "../../../../src/layers/backends/agent/FrameDecoder.js"
import { closed, exit, greeting, hello, output, proc, readResult, started, u32, u64, watching, welcome } from "../../../support/AgentFrames.js"

type Seen = { readonly event: string; readonly id: number; readonly data: string }

/** A decoder whose events are recorded as strings; streamed pieces of one frame are merged. */
const recorder = (overrides: Partial<DecoderHandler> = {}) => {
  const seen: Array<Seen> = []
  const add = (event: string, id: number, data = "") => {
    const last = seen[seen.length - 1]
    if (["stdout", "stderr", "relayData", "readData"].includes(event) && last?.event === event && last.id === id) {
      seen[seen.length - 1] = { ...last, data: last.data + data }
    } else {
      seen.push({ event, id, data })
    }
  }
  let at = -1
  const decoder = new FrameDecoder({
    hello: () => add("hello", 0),
    welcome: () => add("welcome", 0),
    started: (tag, handle, pid) => add("started", tag, `p${handle}/${pid}`),
    spawnFailed: (tag, reason) => add("spawnFailed", tag, reason),
    output: (handle, stream, offset, data) => {
      // Offsets of a frame's pieces continue each other; a new frame says where it starts.
      add(stream, handle, `${offset === at ? "" : `@${offset}:`}${Buffer.from(data).toString("latin1")}`)
      at = offset + data.length
    },
    exit: (handle, info, ended, totals) => add("exit", handle, `${info.exitCode}/${info.signal}/${ended}/${totals.stdout}+${totals.stderr}`),
    closed: (handle, ended) => add("closed", handle, String(ended)),
    unwatched: (handle) => add("unwatched", handle),
    watching: (tag, record) => add("watching", tag, `p${record.handle}/${record.state}`),
    readStart: (tag, start, total) => add("readStart", tag, `${start}/${total}`),
    readData: (tag, data) => add("readData", tag, Buffer.from(data).toString("latin1")),
    readEnd: (tag) => add("readEnd", tag),
    record: (tag, record) => add("record", tag, `p${record.handle}/${record.state}/${record.meta}/${record.note}`),
    listEnd: (tag) => add("listEnd", tag),
    failed: (tag, reason) => add("failed", tag, reason),
    stepResult: (tag, granted, holder) => add("step", tag, `${granted}/${holder}`),
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

const violations = (seen: ReadonlyArray<Seen>) => seen.filter((s) => s.event === "violation").map((s) => s.data)

describe("FrameDecoder", () => {
  const life = Buffer.concat([
    greeting(),
    started(7, 3, 4242),
    output(3, 0, "hello world"),
    output(3, 0, "oops", "stderr"),
    encodeFrame(FrameType.Log, 0, Buffer.from("note")),
    exit(3, 0, 3, 2, [11, 4]),
    output(3, 11, "late"),
    closed(3, 1)
  ])
  const expected: Array<Seen> = [
    { event: "hello", id: 0, data: "" },
    { event: "welcome", id: 0, data: "" },
    { event: "started", id: 7, data: "p3/4242" },
    { event: "stdout", id: 3, data: "@0:hello world" },
    { event: "stderr", id: 3, data: "@0:oops" },
    { event: "log", id: 0, data: "note" },
    { event: "exit", id: 3, data: "3/null/2/11+4" },
    { event: "stdout", id: 3, data: "@11:late" },
    { event: "closed", id: 3, data: "1" }
  ]

  it("decodes a process's life delivered in one chunk", () => {
    const { decoder, seen } = recorder()
    decoder.answers.expect(7, { kind: "spawn" })
    decoder.push(life)
    assert.deepStrictEqual(seen, expected)
  })

  it("decodes frames split at every possible byte boundary, and byte by byte", () => {
    for (let cut = 1; cut < life.length; cut++) {
      const { decoder, seen } = recorder()
      decoder.answers.expect(7, { kind: "spawn" })
      decoder.push(life.subarray(0, cut))
      decoder.push(life.subarray(cut))
      assert.deepStrictEqual(seen, expected, `cut at ${cut}`)
    }
    const { decoder, seen } = recorder()
    decoder.answers.expect(7, { kind: "spawn" })
    for (const byte of life) decoder.push(Buffer.from([byte]))
    assert.deepStrictEqual(seen, expected)
  })

  it("hands output over as views of the input, without copying", () => {
    let view: Uint8Array | undefined
    const { decoder } = recorder({ output: (_handle, _stream, _offset, data) => (view = data) })
    decoder.answers.expect(1, { kind: "spawn" })
    const input = Buffer.concat([greeting(), started(1, 1), output(1, 0, Buffer.alloc(1000, 120))])
    decoder.push(input)
    assert.strictEqual(view?.buffer, input.buffer)
    assert.strictEqual(view?.byteLength, 1000)
  })

  it("passes on an offset past a gap (bytes that fell out of the computer's store before they were sent)", () => {
    const { decoder, seen } = recorder()
    decoder.answers.expect(1, { kind: "spawn" })
    decoder.push(Buffer.concat([greeting(), started(1, 1), output(1, 0, "head"), output(1, 1000, "tail"), exit(1, 0, 0, 0, [1004, 0])]))
    assert.deepStrictEqual(seen.slice(3).map((s) => s.data), ["@0:head@1000:tail", "0/null/0/1004+0"])
    assert.deepStrictEqual(violations(seen), [])
  })

  it("follows a watched process from the offsets asked, with its record", () => {
    const { decoder, seen } = recorder()
    decoder.answers.expect(4, { kind: "watch", handle: 9, stdout: 50, stderr: 7 })
    decoder.push(Buffer.concat([greeting(), watching(4, { handle: 9 }), output(9, 50, "x"), output(9, 7, "y", "stderr")]))
    assert.deepStrictEqual(seen.slice(2), [
      { event: "watching", id: 4, data: "p9/running" },
      { event: "stdout", id: 9, data: "@50:x" },
      { event: "stderr", id: 9, data: "@7:y" }
    ])
  })

  it("answers reads, listings, failures and steps by their tags", () => {
    const { decoder, seen } = recorder()
    decoder.answers.expect(1, { kind: "read", from: 10, most: 100 })
    decoder.answers.expect(2, { kind: "list" })
    decoder.answers.expect(3, { kind: "watch", handle: 5, stdout: 0, stderr: 0 })
    decoder.answers.expect(4, { kind: "step" })
    decoder.push(Buffer.concat([
      greeting(),
      readResult(1, 10, 40, "0123456789"),
      proc(2, { handle: 1, state: 2, meta: "{\"command\":\"ls\",\"cwd\":\"/\"}", note: "killed" }),
      proc(2, { handle: 2 }),
      encodeFrame(FrameType.ListEnd, 2),
      encodeFrame(FrameType.Failed, 3, Buffer.from("no process p5")),
      encodeFrame(FrameType.StepResult, 4, Buffer.concat([Buffer.from([0]), Buffer.from("restart")]))
    ]))
    assert.deepStrictEqual(seen.slice(2), [
      { event: "readStart", id: 1, data: "10/40" },
      { event: "readData", id: 1, data: "0123456789" },
      { event: "readEnd", id: 1, data: "" },
      { event: "record", id: 2, data: "p1/closed/{\"command\":\"ls\",\"cwd\":\"/\"}/killed" },
      { event: "record", id: 2, data: "p2/running//" },
      { event: "listEnd", id: 2, data: "" },
      { event: "failed", id: 3, data: "no process p5" },
      { event: "step", id: 4, data: "false/restart" }
    ])
  })

  it("drops an unwatched process's frames until UNWATCHED, then rejects anything for it", () => {
    const { decoder, seen } = recorder()
    decoder.answers.expect(1, { kind: "spawn" })
    decoder.push(Buffer.concat([greeting(), started(1, 5), output(5, 0, "a")]))
    decoder.answers.unwatch(5)
    assert.isFalse(decoder.answers.watched(5))
    decoder.push(Buffer.concat([output(5, 1, "dropped"), exit(5, 0, 0), closed(5), encodeFrame(FrameType.Unwatched, 5)]))
    assert.deepStrictEqual(seen.map((s) => s.event), ["hello", "welcome", "started", "stdout", "unwatched"])
    decoder.push(output(5, 9, "forged"))
    assert.match(violations(seen)[0]!, /STDOUT for p5, which this connection does not watch/)
  })

  const rejects = (name: string, frames: ReadonlyArray<Buffer>, pattern: RegExp, setup: (d: FrameDecoder) => void = (d) => d.answers.expect(1, { kind: "spawn" })) =>
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
      decoder.push(Buffer.concat([greeting(), started(1, 1)]))
      assert.strictEqual(seen.length, before)
    })

  const header = (length: number, type: number, id: number) => {
    const h = Buffer.alloc(9)
    h.writeUInt32LE(length, 0)
    h.writeUInt8(type, 4)
    h.writeUInt32LE(id, 5)
    return h
  }

  rejects("anything before HELLO", [started(1, 1)], /STARTED before HELLO/)
  rejects("anything between HELLO and WELCOME", [hello(), encodeFrame(FrameType.Log, 0, Buffer.from("x"))], /LOG before WELCOME/)
  rejects("another protocol version", [hello(2)], /protocol 2, not 3/)
  rejects("a second HELLO", [greeting(), hello()], /a second HELLO/)
  rejects("an unknown frame type", [greeting(), header(0, 99, 1)], /unknown frame type 99/)
  rejects("output larger than its bound, before buffering it", [greeting(), started(1, 1), header(MAX_OUTPUT + 1, FrameType.Stdout, 1)], /STDOUT frame of 1048577 bytes/)
  rejects("a read larger than its bound", [greeting(), header(16 + MAX_READ + 1, FrameType.ReadResult, 1)], /READ_RESULT frame of/)
  rejects("output without an offset", [greeting(), started(1, 1), encodeFrame(FrameType.Stdout, 1, Buffer.alloc(8))], /STDOUT frame of 8 bytes/)
  rejects("STARTED for a tag that asked nothing", [greeting(), started(2, 1)], /STARTED for tag 2, which asked nothing/)
  rejects("a second STARTED for a tag", [greeting(), started(1, 1), started(1, 2)], /STARTED for tag 1, which asked nothing/)
  rejects("STARTED with a handle this connection watches", [greeting(), started(1, 1), started(2, 1)], /p1, which is watched already/, (d) => {
    d.answers.expect(1, { kind: "spawn" })
    d.answers.expect(2, { kind: "spawn" })
  })
  rejects("STARTED with pid 0", [greeting(), started(1, 1, 0)], /handle 1 and pid 0/)
  rejects("output for a process nobody watches", [greeting(), output(4, 0, "x")], /STDOUT for p4, which this connection does not watch/)
  rejects("output that goes back", [greeting(), started(1, 1), output(1, 0, "abc"), output(1, 2, "c")], /at offset 2, before 3/)
  rejects("an offset beyond what the server can count", [greeting(), started(1, 1), output(1, 2 ** 53, "x")], /at offset/)
  rejects("a second EXIT", [greeting(), started(1, 1), exit(1, 0, 0), exit(1, 0, 0)], /a second EXIT for p1/)
  rejects("CLOSED before EXIT", [greeting(), started(1, 1), closed(1)], /CLOSED for p1 before its EXIT/)
  rejects("an exit code over 255", [greeting(), started(1, 1), exit(1, 0, 256)], /kind 0 and value 256/)
  rejects("signal 0", [greeting(), started(1, 1), exit(1, 1, 0)], /kind 1 and value 0/)
  rejects("an unknown exit kind", [greeting(), started(1, 1), exit(1, 2, 1)], /kind 2/)
  rejects("UNWATCHED that was not asked", [greeting(), encodeFrame(FrameType.Unwatched, 3)], /UNWATCHED for p3, which was not unwatched/)
  rejects("WATCHING for another process than asked", [greeting(), watching(1, { handle: 6 })], /p6, which was not asked/, (d) => d.answers.expect(1, { kind: "watch", handle: 5, stdout: 0, stderr: 0 }))
  rejects("a record with a bad state", [greeting(), proc(1, { handle: 1, state: 3 })], /state 3/, (d) => d.answers.expect(1, { kind: "list" }))
  rejects("a record whose sizes do not add up", [greeting(), encodeFrame(FrameType.Proc, 1, Buffer.concat([proc(1, { handle: 1, meta: "x" }).subarray(9), Buffer.from("extra")]))], /do not add up/, (d) => d.answers.expect(1, { kind: "list" }))
  rejects("a record of a finished process with a bad exit", [greeting(), proc(1, { handle: 1, state: 1, kind: 1, value: 99 })], /exit 1\/99/, (d) => d.answers.expect(1, { kind: "list" }))
  rejects("records for a tag that asked no listing", [greeting(), proc(1, { handle: 1 })], /PROC for tag 1, which asked no listing/, () => {})
  rejects("a read that starts before what was asked", [greeting(), readResult(1, 5, 40, "x")], /not what was asked/, (d) => d.answers.expect(1, { kind: "read", from: 10, most: 100 }))
  rejects("a read longer than asked", [greeting(), readResult(1, 10, 40, "0123")], /not what was asked/, (d) => d.answers.expect(1, { kind: "read", from: 10, most: 3 }))
  rejects("a read beyond the stream's total", [greeting(), readResult(1, 38, 40, "0123")], /start 38, 4 bytes and total 40/, (d) => d.answers.expect(1, { kind: "read", from: 38, most: 10 }))
  rejects("FAILED for a spawn", [greeting(), encodeFrame(FrameType.Failed, 1, Buffer.from("x"))], /FAILED for tag 1, which asked a spawn/)
  rejects("STEP_RESULT that is neither yes nor no", [greeting(), encodeFrame(FrameType.StepResult, 1, Buffer.from([2]))], /with 2/, (d) => d.answers.expect(1, { kind: "step" }))
  rejects("LOG with a process id", [greeting(), encodeFrame(FrameType.Log, 3, Buffer.from("x"))], /LOG with id 3/)
  rejects("RELAY_OPEN on a connection without relay streams", [greeting(), encodeFrame(FrameType.RelayOpen, 1)], /carries no relay streams/)

  describe("relay streams", () => {
    const relayed = (setup: (d: FrameDecoder) => void = () => {}) => {
      const { decoder, seen } = recorder()
      decoder.relay.enable()
      setup(decoder)
      return { decoder, seen }
    }

    it("checks ids, windows and credits", () => {
      const { decoder, seen } = relayed()
      decoder.push(Buffer.concat([greeting(), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayData, 1, Buffer.from("GET /"))]))
      decoder.relay.relaySent(1, 10)
      decoder.push(Buffer.concat([encodeFrame(FrameType.RelayCredit, 1, u32(10)), encodeFrame(FrameType.RelayEof, 1), encodeFrame(FrameType.RelayClosed, 1, Buffer.from([0]))]))
      assert.deepStrictEqual(seen.slice(2).map((s) => s.event), ["relayOpen", "relayData", "relayCredit", "relayEof", "relayClosed"])
      decoder.push(encodeFrame(FrameType.RelayOpen, 1))
      assert.match(violations(seen)[0]!, /RELAY_OPEN for stream 1, not a new id/)
    })

    it("rejects data beyond the window, and credit for data never sent", () => {
      const a = relayed()
      a.decoder.push(Buffer.concat([greeting(), encodeFrame(FrameType.RelayOpen, 1)]))
      for (let i = 0; i < RELAY_WINDOW / 65536; i++) a.decoder.push(encodeFrame(FrameType.RelayData, 1, Buffer.alloc(65536)))
      a.decoder.push(encodeFrame(FrameType.RelayData, 1, Buffer.alloc(1)))
      assert.match(violations(a.seen)[0]!, /beyond the window of stream 1/)
      const b = relayed()
      b.decoder.push(Buffer.concat([greeting(), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayCredit, 1, u32(1))]))
      assert.match(violations(b.seen)[0]!, /RELAY_CREDIT of 1 bytes for stream 1, which has 0 in flight/)
    })
  })

  it("never throws, whatever the bytes", () => {
    const { decoder } = recorder()
    assert.doesNotThrow(() => decoder.push(Buffer.concat([welcome(), u64(7), Buffer.alloc(100, 255)])))
    assert.isTrue(decoder.broken)
  })

  // Streams the server opens (RELAY_CONNECT, for preview URLs): ids with the top bit, answered once,
  // on the connection that asked, whether or not it carries the relay.
  const connect = SERVER_STREAM + 1
  const expectConnect = (d: FrameDecoder) => d.relay.expectConnect(connect)
  rejects("a RELAY_OPEN with a server's id that was never asked for", [greeting(), encodeFrame(FrameType.RelayOpen, SERVER_STREAM + 9)], /did not ask for/, expectConnect)
  rejects("relay data before the asked-for stream connected", [greeting(), encodeFrame(FrameType.RelayData, connect, Buffer.from("x"))], /not open/, expectConnect)
  rejects("a refusal of a stream the agent opened itself", [greeting(), encodeFrame(FrameType.RelayOpen, 1), encodeFrame(FrameType.RelayClosed, 1, Buffer.from([2]))], /reason 2/, (d) => d.relay.enable())
  rejects("a credit on a stream still connecting", [greeting(), encodeFrame(FrameType.RelayCredit, connect, u32(1))], /not connected yet/, expectConnect)
  rejects("a second RELAY_OPEN of an asked-for stream", [greeting(), encodeFrame(FrameType.RelayOpen, connect), encodeFrame(FrameType.RelayOpen, connect)], /did not ask for/, expectConnect)

  it("opens an asked-for stream on a connection without relay streams, and lets it carry data both ways", () => {
    const { decoder, seen } = recorder()
    decoder.relay.expectConnect(connect)
    decoder.push(Buffer.concat([greeting(), encodeFrame(FrameType.RelayOpen, connect), encodeFrame(FrameType.RelayData, connect, Buffer.from("HTTP/1.0 200"))]))
    decoder.relay.relaySent(connect, 10)
    decoder.push(Buffer.concat([encodeFrame(FrameType.RelayCredit, connect, u32(10)), encodeFrame(FrameType.RelayClosed, connect, Buffer.from([0]))]))
    assert.deepStrictEqual(violations(seen), [])
    assert.deepStrictEqual(seen.slice(2).map((s) => `${s.event}:${s.data}`), ["relayOpen:", "relayData:HTTP/1.0 200", "relayCredit:10", "relayClosed:false"])
  })

  it("reports a stream that could not connect as refused, and an abandoned one not at all", () => {
    const { decoder, seen } = recorder()
    decoder.relay.expectConnect(connect)
    decoder.relay.expectConnect(connect + 1)
    decoder.relay.relayReset(connect + 1)
    decoder.push(Buffer.concat([
      greeting(),
      encodeFrame(FrameType.RelayClosed, connect, Buffer.from([2])),
      encodeFrame(FrameType.RelayOpen, connect + 1),
      encodeFrame(FrameType.RelayData, connect + 1, Buffer.from("dropped")),
      encodeFrame(FrameType.RelayClosed, connect + 1, Buffer.from([1]))
    ]))
    assert.deepStrictEqual(violations(seen), [])
    assert.deepStrictEqual(seen.slice(2).map((s) => `${s.event}:${s.id - SERVER_STREAM}:${s.data}`), ["relayClosed:1:refused", "relayClosed:2:true"])
  })
})
