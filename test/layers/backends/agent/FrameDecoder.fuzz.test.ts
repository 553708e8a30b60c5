/**
 * Fuzzing of the agent frame decoder, deterministic (a fixed seed): valid streams, the same streams
 * mutated (bit flips, insertions, deletions, duplications, huge lengths, truncation), and random
 * bytes, each cut into random chunks. For every case: the decoder never throws, reports at most one
 * violation and nothing after it, and whatever it reports obeys the protocol (a model checks it).
 * Valid streams must decode without a violation.
 */
import { assert, describe, it } from "@effect/vitest"
import { encodeFrame, FrameType, HEADER_SIZE, MAX_TEXT, SERVER_STREAM } from "../../../../src/layers/backends/agent/AgentProtocol.js"
import { FrameDecoder } from "../../../../src/layers/backends/agent/FrameDecoder.js"

const SEED = 0x6b746532
const CASES = 30_000

/** mulberry32: small, fast, deterministic. */
const prng = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

type Rng = () => number
const int = (rng: Rng, n: number) => Math.floor(rng() * n)
const bytes = (rng: Rng, n: number) => {
  const b = Buffer.allocUnsafe(n)
  for (let i = 0; i < n; i++) b[i] = int(rng, 256)
  return b
}
const u32 = (n: number) => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(n >>> 0)
  return b
}

interface Case {
  readonly frames: Array<Buffer>
  readonly ids: ReadonlyArray<number>
  /** Streams the server asked for (RELAY_CONNECT), with or without a relay port. */
  readonly connects: ReadonlyArray<number>
}

/** A protocol-valid stream: READY, then interleaved process lives and relay streams. */
const validCase = (rng: Rng): Case => {
  const relay = rng() < 0.5
  const frames = [encodeFrame(FrameType.Ready, 0, Buffer.concat([u32(2), u32(relay ? 3128 : 0)]))]
  const ids: Array<number> = []
  for (let i = 1 + int(rng, 4), id = 0; i > 0; i--) ids.push(id += 1 + int(rng, 5))
  // Each life: a script of frames, played out interleaved.
  const lives: Array<Array<Buffer>> = ids.map((id) => {
    if (rng() < 0.15) return [encodeFrame(FrameType.SpawnFailed, id, bytes(rng, int(rng, 40)))]
    const life = [encodeFrame(FrameType.Started, id, u32(1 + int(rng, 30000)))]
    const output = () => encodeFrame(rng() < 0.7 ? FrameType.Stdout : FrameType.Stderr, id, bytes(rng, 1 + int(rng, 64)))
    for (let i = int(rng, 5); i > 0; i--) life.push(output())
    life.push(encodeFrame(FrameType.Exit, id, Buffer.concat([Buffer.from([0]), u32(int(rng, 256)), u32(int(rng, 5))])))
    for (let i = int(rng, 3); i > 0; i--) life.push(output())
    if (rng() < 0.9) life.push(encodeFrame(FrameType.Closed, id, u32(int(rng, 3))))
    return life
  })
  if (relay) {
    for (let stream = 1; stream <= 1 + int(rng, 3); stream++) {
      const life = [encodeFrame(FrameType.RelayOpen, stream)]
      for (let i = int(rng, 4); i > 0; i--) life.push(encodeFrame(FrameType.RelayData, stream, bytes(rng, 1 + int(rng, 100))))
      if (rng() < 0.7) life.push(encodeFrame(FrameType.RelayEof, stream))
      life.push(encodeFrame(FrameType.RelayClosed, stream, Buffer.from([int(rng, 2)])))
      lives.push(life)
    }
  }
  const connects: Array<number> = []
  for (let n = int(rng, 3); n > 0; n--) {
    const stream = SERVER_STREAM + 1 + connects.length
    connects.push(stream)
    if (rng() < 0.3) {
      lives.push([encodeFrame(FrameType.RelayClosed, stream, Buffer.from([2]))])
      continue
    }
    const life = [encodeFrame(FrameType.RelayOpen, stream)]
    for (let i = int(rng, 4); i > 0; i--) life.push(encodeFrame(FrameType.RelayData, stream, bytes(rng, 1 + int(rng, 100))))
    life.push(encodeFrame(FrameType.RelayClosed, stream, Buffer.from([int(rng, 2)])))
    lives.push(life)
  }
  if (rng() < 0.3) lives.push([encodeFrame(FrameType.Log, 0, bytes(rng, int(rng, 50)))])
  // Relay ids must appear in increasing order: interleave, but keep each life's order and open streams in order.
  const cursors = lives.map(() => 0)
  for (;;) {
    const open = lives.map((life, i) => (cursors[i]! < life.length ? i : -1)).filter((i) => i >= 0)
    if (open.length === 0) break
    // The first unfinished relay life goes before later ones start (RELAY_OPEN ids increase).
    const pick = open[int(rng, open.length)]!
    const life = lives[pick]!
    const isRelayOpen = life[0]!.readUInt8(4) === FrameType.RelayOpen && cursors[pick] === 0
    const earlierUnopened = isRelayOpen && lives.some((other, j) => j < pick && other[0]!.readUInt8(4) === FrameType.RelayOpen && cursors[j] === 0)
    if (earlierUnopened) continue
    frames.push(life[cursors[pick]!]!)
    cursors[pick]!++
  }
  return { frames, ids, connects }
}

const mutate = (rng: Rng, stream: Buffer): Buffer => {
  const copy = Buffer.from(stream)
  switch (int(rng, 7)) {
    case 0: { // flip bits
      for (let i = 1 + int(rng, 4); i > 0; i--) copy[int(rng, copy.length)]! ^= 1 << int(rng, 8)
      return copy
    }
    case 1: { // insert random bytes
      const at = int(rng, copy.length + 1)
      return Buffer.concat([copy.subarray(0, at), bytes(rng, 1 + int(rng, 20)), copy.subarray(at)])
    }
    case 2: { // delete a range
      const at = int(rng, copy.length)
      return Buffer.concat([copy.subarray(0, at), copy.subarray(at + 1 + int(rng, 20))])
    }
    case 3: { // duplicate a range (frames replayed)
      const at = int(rng, copy.length)
      const end = Math.min(copy.length, at + 1 + int(rng, 60))
      return Buffer.concat([copy.subarray(0, end), copy.subarray(at, end), copy.subarray(end)])
    }
    case 4: { // a huge or odd length somewhere
      if (copy.length < 4) return copy
      const at = int(rng, Math.max(1, copy.length - 4))
      copy.writeUInt32LE([0xffffffff, 0x80000000, MAX_TEXT + 1, 1 << 21, int(rng, 1 << 30)][int(rng, 5)]!, at)
      return copy
    }
    case 5: // truncate
      return copy.subarray(0, int(rng, copy.length))
    default: { // a type byte replaced
      const at = int(rng, copy.length)
      copy[at] = int(rng, 40)
      return copy
    }
  }
}

/** Feeds the input in random chunks and checks the protocol invariants of what comes out. */
const run = (rng: Rng, input: Buffer, ids: ReadonlyArray<number>, connects: ReadonlyArray<number>) => {
  const asked = new Set(connects)
  const started = new Set<number>()
  const exited = new Set<number>()
  const closed = new Set<number>()
  const streams = new Set<number>()
  let violations = 0
  let afterViolation = 0
  let broken: string | undefined
  const check = (ok: boolean, what: string) => {
    if (violations > 0) afterViolation++
    if (!ok && broken === undefined) broken = what
  }
  const decoder = new FrameDecoder({
    ready: () => check(true, ""),
    started: (id) => {
      check(ids.includes(id) && !started.has(id), `started ${id}`)
      started.add(id)
    },
    spawnFailed: (id) => check(ids.includes(id) && !started.has(id), `spawnFailed ${id}`),
    output: (id, _stream, data) => check(started.has(id) && !closed.has(id) && data.byteLength > 0, `output ${id}`),
    exit: (id, exit) => {
      check(started.has(id) && !exited.has(id) && (exit.exitCode === null) !== (exit.signal === null), `exit ${id}`)
      exited.add(id)
    },
    closed: (id) => {
      check(exited.has(id) && !closed.has(id), `closed ${id}`)
      closed.add(id)
    },
    released: () => check(false, "released without a release"),
    log: (text) => check(Buffer.byteLength(text) <= 4 * MAX_TEXT, "log"),
    relayOpen: (id) => {
      // A server's stream opens only when asked for, and once.
      check(!streams.has(id) && (id < SERVER_STREAM || asked.delete(id)), `relayOpen ${id}`)
      streams.add(id)
    },
    relayData: (id, data) => check(streams.has(id) && data.byteLength > 0, `relayData ${id}`),
    relayEof: (id) => check(streams.has(id), `relayEof ${id}`),
    relayCredit: () => check(false, "credit for data never sent"),
    relayClosed: (id, _reset, refused) => {
      check(refused ? asked.delete(id) : streams.has(id) || asked.delete(id), `relayClosed ${id}`)
      streams.delete(id)
    },
    violation: () => {
      violations++
    }
  })
  for (const id of ids) decoder.expectSpawn(id)
  for (const id of connects) decoder.expectConnect(id)
  let offset = 0
  while (offset < input.length) {
    const n = 1 + int(rng, rng() < 0.5 ? 16 : HEADER_SIZE * 40)
    decoder.push(input.subarray(offset, offset + n))
    offset += n
  }
  return { violations, afterViolation, broken }
}

describe("FrameDecoder fuzz", () => {
  it(`holds its invariants over ${CASES} valid, mutated and random inputs (seed ${SEED.toString(16)})`, () => {
    const rng = prng(SEED)
    const tally = { valid: 0, mutated: 0, random: 0, violations: 0 }
    const started = performance.now()
    for (let i = 0; i < CASES; i++) {
      const kind = i % 10 < 2 ? "valid" : i % 10 < 9 ? "mutated" : "random"
      const { connects, frames, ids } = validCase(rng)
      let input: Buffer = Buffer.concat(frames)
      if (kind === "mutated") for (let m = 1 + int(rng, 3); m > 0; m--) input = mutate(rng, input)
      if (kind === "random") input = bytes(rng, int(rng, 400))
      const result = run(rng, input, ids, connects)
      tally[kind]++
      if (result.violations > 0) tally.violations++
      // Plain checks first: chai's assertions cost more than a case.
      if (result.broken !== undefined || result.violations > 1 || result.afterViolation > 0 || (kind === "valid" && result.violations > 0)) {
        assert.fail(`case ${i} (${kind}): ${JSON.stringify(result)}`)
      }
    }
    const seconds = (performance.now() - started) / 1000
    // Most mutations must be caught (the rest are still protocol-valid), and all of it fast.
    assert.isAbove(tally.violations, tally.mutated * 0.5)
    assert.isBelow(seconds, 30)
  })
})
