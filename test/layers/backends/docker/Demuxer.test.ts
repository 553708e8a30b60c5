import { assert, describe, it } from "@effect/vitest"
import { Demuxer } from "../../../../src/layers/backends/docker/Demuxer.js"

const frame = (type: number, payload: string) => {
  const body = Buffer.from(payload)
  const header = Buffer.alloc(8)
  header[0] = type
  header.writeUInt32BE(body.length, 4)
  return Buffer.concat([header, body])
}

const collect = (chunks: ReadonlyArray<Buffer>) => {
  const out: Record<number, string> = {}
  const order: Array<number> = []
  const demuxer = new Demuxer((type, piece) => {
    out[type] = (out[type] ?? "") + piece.toString()
    if (order[order.length - 1] !== type) order.push(type)
  })
  for (const chunk of chunks) demuxer.push(chunk)
  return { out, order }
}

describe("the engine's multiplexed stream", () => {
  it("splits stdout and stderr frames in order", () => {
    const { out, order } = collect([Buffer.concat([frame(1, "out1 "), frame(2, "err"), frame(1, "out2")])])
    assert.deepStrictEqual(out, { 1: "out1 out2", 2: "err" })
    assert.deepStrictEqual(order, [1, 2, 1])
  })

  it("a stream cut at every byte gives the same result, header and payload alike", () => {
    const whole = Buffer.concat([frame(1, "hello "), frame(2, "warning"), frame(1, ""), frame(1, "world")])
    const bytes = Array.from(whole, (_, i) => whole.subarray(i, i + 1))
    assert.deepStrictEqual(collect(bytes).out, { 1: "hello world", 2: "warning" })
  })

  it("passes a frame's pieces on as they arrive, without waiting for the whole frame", () => {
    const big = frame(1, "x".repeat(100_000))
    const pieces: Array<number> = []
    const demuxer = new Demuxer((_type, piece) => pieces.push(piece.length))
    demuxer.push(big.subarray(0, 8 + 10))
    assert.deepStrictEqual(pieces, [10])
    demuxer.push(big.subarray(8 + 10))
    assert.deepStrictEqual(pieces, [10, 99_990])
  })
})
