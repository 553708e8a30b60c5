import { assert, describe, it } from "@effect/vitest"
import { formatSize, parseSize } from "../../src/domain/Size.js"

describe("sizes", () => {
  it("reads the spellings of the command line and of docker run, in powers of 1024", () => {
    assert.strictEqual(parseSize("256m"), 256 * 1024 * 1024)
    assert.strictEqual(parseSize("1g"), 1024 ** 3)
    assert.strictEqual(parseSize("2G"), 2 * 1024 ** 3)
    assert.strictEqual(parseSize("512KiB"), 512 * 1024)
    assert.strictEqual(parseSize("512kb"), 512 * 1024)
    assert.strictEqual(parseSize("1.5m"), 1.5 * 1024 * 1024)
    assert.strictEqual(parseSize("64b"), 64)
    assert.strictEqual(parseSize(" 4096 "), 4096)
    assert.strictEqual(parseSize("0"), 0)
  })

  it("refuses what is not a size", () => {
    for (const text of ["lots", "-1m", "1x", "m", "", "1ib", "1e9", "1mm"]) assert.isUndefined(parseSize(text), text)
    assert.isUndefined(parseSize(`${Number.MAX_SAFE_INTEGER}t`))
  })

  it("prints sizes for people", () => {
    assert.strictEqual(formatSize(256 * 1024 * 1024), "256 MiB")
    assert.strictEqual(formatSize(1.5 * 1024 ** 3), "1.5 GiB")
    assert.strictEqual(formatSize(800), "800 bytes")
  })
})
