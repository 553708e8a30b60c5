import { assert, describe, it } from "@effect/vitest"
import { OutputLog } from "../../src/actors/OutputLog.js"
import { omittedMarker, truncateMiddle } from "../../src/actors/OutputSlice.js"

const utf8 = (s: string) => new TextEncoder().encode(s)
const bytesOf = (s: string) => Buffer.byteLength(s, "utf8")

/** A deterministic pseudo-random generator (xorshift32), so failures reproduce. */
const rng = (seed: number) => {
  let x = seed | 0 || 1
  return () => {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    return (x >>> 0) / 0x1_0000_0000
  }
}

/** `size` bytes of printable ASCII that encode their own offset, so any slice is checkable. */
const patterned = (size: number) => {
  const out = Buffer.alloc(size)
  for (let i = 0; i < size; i++) out[i] = 0x21 + ((i * 7 + (i >>> 8)) % 94)
  return out
}

const appendInRandomChunks = (log: OutputLog, data: Uint8Array, maxChunk: number, seed = 7) => {
  const random = rng(seed)
  let at = 0
  while (at < data.length) {
    const n = Math.min(data.length - at, 1 + Math.floor(random() * maxChunk))
    log.append(data.subarray(at, at + n))
    at += n
  }
}

const latin = (b: Uint8Array) => Buffer.from(b).toString("latin1")

describe("OutputLog", () => {
  it("a small log returns everything, with exact counts", () => {
    const log = new OutputLog()
    log.append(utf8("hello "))
    log.append(utf8("world\n"))
    assert.strictEqual(log.total, 12)
    assert.strictEqual(log.retained, 12)
    assert.deepStrictEqual(log.read(), { text: "hello world\n", from: 0, next: 12, omitted: 0 })
  })

  it("an empty log reads as empty", () => {
    const log = new OutputLog()
    assert.deepStrictEqual(log.read(), { text: "", from: 0, next: 0, omitted: 0 })
    assert.deepStrictEqual(log.lastLines(5), { text: "", from: 0, next: 0, omitted: 0 })
    log.append(new Uint8Array(0))
    assert.strictEqual(log.total, 0)
  })

  it("keeps everything while the stream fits in head + tail", () => {
    const log = new OutputLog({ headBytes: 10, tailBytes: 20 })
    const data = patterned(30)
    appendInRandomChunks(log, data, 4)
    assert.strictEqual(log.retained, 30)
    const slice = log.read()
    assert.strictEqual(slice.text, latin(data))
    assert.strictEqual(slice.omitted, 0)
  })

  it("keeps the exact head and tail of 10 MiB written in random-size chunks", () => {
    const headBytes = 64 * 1024
    const tailBytes = 1024 * 1024
    const log = new OutputLog({ headBytes, tailBytes })
    const data = patterned(10 * 1024 * 1024)
    appendInRandomChunks(log, data, 200_000)
    assert.strictEqual(log.total, data.length)
    assert.strictEqual(log.retained, headBytes + tailBytes)
    assert.strictEqual(log.evicted, data.length - headBytes - tailBytes)

    const slice = log.read()
    const gap = data.length - headBytes - tailBytes
    assert.strictEqual(slice.from, 0)
    assert.strictEqual(slice.next, data.length)
    assert.strictEqual(slice.omitted, gap)
    const marker = `\n${omittedMarker(gap)}\n`
    assert.strictEqual(
      slice.text,
      latin(data.subarray(0, headBytes)) + marker + latin(data.subarray(data.length - tailBytes))
    )
  })

  it("wraps the tail ring correctly at every chunk size around its capacity", () => {
    for (const chunk of [1, 3, 7, 15, 16, 17, 31, 40]) {
      const log = new OutputLog({ headBytes: 5, tailBytes: 16 })
      const data = patterned(500)
      for (let at = 0; at < data.length; at += chunk) log.append(data.subarray(at, at + chunk))
      const slice = log.read()
      assert.strictEqual(slice.text, latin(data.subarray(0, 5)) + `\n${omittedMarker(500 - 21)}\n` + latin(data.subarray(484)), `chunk ${chunk}`)
      assert.strictEqual(slice.omitted, 479)
    }
  })

  it("copies appended chunks, so the caller may reuse its buffer", () => {
    const log = new OutputLog({ headBytes: 2, tailBytes: 4 })
    const buf = utf8("abcd")
    log.append(buf)
    buf.fill(0x7a)
    log.append(utf8("ef"))
    assert.strictEqual(log.read().text, "abcdef")
  })

  describe("cursors", () => {
    it("reading from 0 then from next returns only the new bytes", () => {
      const log = new OutputLog()
      log.append(utf8("one\n"))
      const first = log.read(0)
      assert.strictEqual(first.text, "one\n")
      assert.strictEqual(first.next, 4)
      log.append(utf8("two\n"))
      const second = log.read(first.next)
      assert.deepStrictEqual(second, { text: "two\n", from: 4, next: 8, omitted: 0 })
      const third = log.read(second.next)
      assert.deepStrictEqual(third, { text: "", from: 8, next: 8, omitted: 0 })
    })

    it("a cursor past the end is clamped to the end, a negative one to 0", () => {
      const log = new OutputLog()
      log.append(utf8("abc"))
      assert.deepStrictEqual(log.read(99), { text: "", from: 3, next: 3, omitted: 0 })
      assert.deepStrictEqual(log.read(-5), { text: "abc", from: 0, next: 3, omitted: 0 })
    })

    it("a cursor inside the head returns the rest of the head, the gap marker and the tail", () => {
      const log = new OutputLog({ headBytes: 10, tailBytes: 10 })
      const data = patterned(100)
      log.append(data)
      const slice = log.read(4)
      assert.strictEqual(slice.from, 4)
      assert.strictEqual(slice.omitted, 80)
      assert.strictEqual(slice.text, latin(data.subarray(4, 10)) + `\n${omittedMarker(80)}\n` + latin(data.subarray(90)))
    })

    it("a cursor in the evicted middle resumes at the start of the tail and reports the gap", () => {
      const log = new OutputLog({ headBytes: 10, tailBytes: 10 })
      const data = patterned(100)
      appendInRandomChunks(log, data, 9)
      const slice = log.read(50)
      assert.strictEqual(slice.from, 50)
      assert.strictEqual(slice.next, 100)
      assert.strictEqual(slice.omitted, 40)
      assert.strictEqual(slice.text, `${omittedMarker(40)}\n` + latin(data.subarray(90)))
    })

    it("a cursor inside the tail returns exactly the bytes after it", () => {
      const log = new OutputLog({ headBytes: 10, tailBytes: 10 })
      const data = patterned(100)
      log.append(data)
      assert.deepStrictEqual(log.read(95), { text: latin(data.subarray(95)), from: 95, next: 100, omitted: 0 })
    })

    it("following cursors across evictions accounts for every byte exactly once", () => {
      const log = new OutputLog({ headBytes: 16, tailBytes: 64 })
      const data = patterned(5000)
      const random = rng(3)
      let cursor = 0
      let seen = 0
      let omitted = 0
      let at = 0
      while (at < data.length) {
        const n = Math.min(data.length - at, 1 + Math.floor(random() * 100))
        log.append(data.subarray(at, at + n))
        at += n
        if (random() < 0.3) {
          const slice = log.read(cursor)
          assert.strictEqual(slice.from, cursor)
          const marker = slice.omitted > 0 ? `${omittedMarker(slice.omitted)}\n` : ""
          assert.isTrue(slice.text.startsWith(marker) || slice.from < 16)
          seen += slice.next - slice.from - slice.omitted
          omitted += slice.omitted
          cursor = slice.next
        }
      }
      const last = log.read(cursor)
      seen += last.next - last.from - last.omitted
      omitted += last.omitted
      assert.strictEqual(seen + omitted, data.length)
      assert.strictEqual(last.next, data.length)
    })
  })

  it("every read agrees with the original bytes (random sizes, cursors and limits)", () => {
    const random = rng(11)
    const markers = /\n?\[… (\d+) bytes omitted …\]\n?/g
    for (let round = 0; round < 200; round++) {
      const headBytes = Math.floor(random() * 40)
      const tailBytes = Math.floor(random() * 60)
      const log = new OutputLog({ headBytes, tailBytes })
      const data = patterned(Math.floor(random() * 300))
      appendInRandomChunks(log, data, 50, round + 1)
      const cursor = Math.floor(random() * (data.length + 10))
      const maxBytes = random() < 0.3 ? Number.POSITIVE_INFINITY : Math.floor(random() * 80)
      const slice = log.read(cursor, maxBytes)
      const context = JSON.stringify({ headBytes, tailBytes, size: data.length, cursor, maxBytes })
      assert.strictEqual(slice.from, Math.min(cursor, data.length), context)
      assert.strictEqual(slice.next, data.length, context)
      const fragments = slice.text.split(markers).filter((_, i) => i % 2 === 0)
      const counted = [...slice.text.matchAll(markers)].reduce((n, m) => n + Number(m[1]), 0)
      assert.strictEqual(counted, slice.omitted, context)
      const kept = fragments.reduce((n, f) => n + f.length, 0)
      assert.strictEqual(kept + slice.omitted, slice.next - slice.from, context)
      assert.isAtMost(kept, maxBytes, context)
      // the first fragment starts the range (unless the range starts with a hole), the last ends it
      const original = latin(data)
      if (!slice.text.startsWith("[…")) assert.isTrue(original.startsWith(fragments[0]!, slice.from), context)
      assert.isTrue(original.endsWith(fragments[fragments.length - 1]!), context)
      for (const f of fragments) assert.isTrue(original.includes(f), context)
    }
  })

  it("with valid UTF-8, cuts anywhere never produce U+FFFD and every byte is accounted for", () => {
    const random = rng(5)
    const markers = /\n?\[… (\d+) bytes omitted …\]\n?/g
    const alphabet = ["a", "é", "€", "😀", "\n"]
    for (let round = 0; round < 300; round++) {
      let text = ""
      const boundaries = [0]
      const length = Math.floor(random() * 120)
      for (let i = 0; i < length; i++) {
        text += alphabet[Math.floor(random() * alphabet.length)]
        boundaries.push(bytesOf(text))
      }
      const log = new OutputLog({ headBytes: Math.floor(random() * 30), tailBytes: Math.floor(random() * 50) })
      appendInRandomChunks(log, utf8(text), 7, round + 1)
      const cursor = boundaries[Math.floor(random() * boundaries.length)]!
      const maxBytes = random() < 0.3 ? Number.POSITIVE_INFINITY : Math.floor(random() * 60)
      const slice = random() < 0.2 ? log.lastLines(1 + Math.floor(random() * 5), maxBytes) : log.read(cursor, maxBytes)
      const context = JSON.stringify({ text, cursor, maxBytes, slice })
      assert.isFalse(slice.text.includes("\uFFFD"), context)
      const kept = slice.text.split(markers).filter((_, i) => i % 2 === 0).reduce((n, f) => n + bytesOf(f), 0)
      assert.strictEqual(kept + slice.omitted, slice.next - slice.from, context)
      assert.isAtMost(kept, maxBytes, context)
    }
  })

  describe("maxBytes", () => {
    it("keeps the head and the tail of the range, half each (the tail gets the odd byte)", () => {
      const log = new OutputLog()
      const data = patterned(1000)
      log.append(data)
      const slice = log.read(0, 101)
      assert.strictEqual(slice.omitted, 899)
      assert.strictEqual(slice.next, 1000)
      assert.strictEqual(slice.text, latin(data.subarray(0, 50)) + `\n${omittedMarker(899)}\n` + latin(data.subarray(949)))
    })

    it("applies to the range after the cursor", () => {
      const log = new OutputLog()
      const data = patterned(1000)
      log.append(data)
      const slice = log.read(500, 10)
      assert.strictEqual(slice.from, 500)
      assert.strictEqual(slice.omitted, 490)
      assert.strictEqual(slice.text, latin(data.subarray(500, 505)) + `\n${omittedMarker(490)}\n` + latin(data.subarray(995)))
    })

    it("counts both the evicted middle and the cut bytes, in their own markers", () => {
      const log = new OutputLog({ headBytes: 100, tailBytes: 100 })
      const data = patterned(1000)
      log.append(data)
      const slice = log.read(0, 40)
      // head 0..20, cut 20..100, evicted 100..900, cut 900..980, tail 980..1000: one hole
      assert.strictEqual(slice.omitted, 960)
      assert.strictEqual(slice.text, latin(data.subarray(0, 20)) + `\n${omittedMarker(960)}\n` + latin(data.subarray(980)))
    })

    it("a range that fits is not cut", () => {
      const log = new OutputLog()
      log.append(utf8("short"))
      assert.deepStrictEqual(log.read(0, 5), { text: "short", from: 0, next: 5, omitted: 0 })
    })

    it("maxBytes 0 returns only the marker", () => {
      const log = new OutputLog()
      log.append(utf8("abc"))
      assert.deepStrictEqual(log.read(0, 0), { text: omittedMarker(3), from: 0, next: 3, omitted: 3, firstGap: 0, cutAt: 0 })
    })
  })

  describe("binary and invalid UTF-8", () => {
    it("all 256 byte values never throw and counts stay exact", () => {
      const log = new OutputLog({ headBytes: 100, tailBytes: 100 })
      const all = Uint8Array.from({ length: 256 }, (_, i) => i)
      for (let i = 0; i < 10; i++) log.append(all)
      assert.strictEqual(log.total, 2560)
      assert.strictEqual(log.retained, 200)
      const slice = log.read()
      assert.isAtLeast(slice.omitted, 2360)
      assert.isAtMost(slice.omitted, 2360 + 6)
      assert.isTrue(slice.text.includes("\uFFFD"))
      assert.isTrue(slice.text.includes("\u0000"))
      assert.strictEqual(log.read(0, 7).next, 2560)
      log.lastLines(3)
      log.lastLines(3, 5)
    })

    it("invalid sequences decode to U+FFFD", () => {
      const log = new OutputLog()
      log.append(Uint8Array.of(0x61, 0xff, 0xfe, 0x62, 0xc3))
      const slice = log.read()
      assert.strictEqual(slice.text, "a\uFFFD\uFFFDb\uFFFD")
      assert.strictEqual(slice.next, 5)
    })
  })

  describe("UTF-8 at the cuts", () => {
    it("a multibyte character across the head/tail boundary is not split", () => {
      // "é" is 2 bytes; head 5 bytes ends in its middle: "abcd" + 0xC3 | 0xA9 ...
      const log = new OutputLog({ headBytes: 5, tailBytes: 6 })
      log.append(utf8("abcdé" + "x".repeat(20) + "€€"))
      const slice = log.read()
      // the head loses the half "é", the tail (last 6 bytes = "€€") is whole
      assert.strictEqual(slice.text, `abcd\n${omittedMarker(log.total - 4 - 6)}\n€€`)
      assert.strictEqual(slice.omitted, log.total - 10)
      assert.isFalse(slice.text.includes("\uFFFD"))
    })

    it("the start of the tail does not begin inside a character", () => {
      const log = new OutputLog({ headBytes: 3, tailBytes: 5 })
      log.append(utf8("abc" + "y".repeat(10) + "€z")) // tail = last 5 bytes: 0x82 0xAC "z" … of "€"
      log.append(utf8("ok"))
      // tail = 0xAC "z" "ok"? compute: last 5 bytes of "…€zok" = [0x82,0xAC,z,o,k]
      const slice = log.read()
      assert.strictEqual(slice.text, `abc\n${omittedMarker(log.total - 3 - 3)}\nzok`)
      assert.strictEqual(slice.omitted, log.total - 6)
    })

    it("maxBytes cuts move to character boundaries", () => {
      const log = new OutputLog()
      const text = "€".repeat(100) // 300 bytes
      log.append(utf8(text))
      const slice = log.read(0, 10) // 5 + 5 bytes: one whole "€" each side
      assert.strictEqual(slice.text, `€\n${omittedMarker(294)}\n€`)
      assert.strictEqual(slice.omitted, 294)
      for (let max = 0; max < 20; max++) assert.isFalse(log.read(0, max).text.includes("\uFFFD"), `max ${max}`)
    })

    it("an emoji (4 bytes) at a cut is dropped whole, never half", () => {
      const log = new OutputLog({ headBytes: 6, tailBytes: 6 })
      log.append(utf8("ab😀😀" + "-".repeat(10) + "😀😀"))
      const slice = log.read()
      assert.isTrue(slice.text.startsWith("ab😀\n"))
      assert.isTrue(slice.text.endsWith("\n😀"))
      assert.isFalse(slice.text.includes("\uFFFD"))
    })
  })

  describe("lastLines", () => {
    it("returns the last n lines; a trailing newline does not start a line", () => {
      const log = new OutputLog()
      log.append(utf8("a\nb\nc\nd\n"))
      assert.deepStrictEqual(log.lastLines(2), { text: "c\nd\n", from: 4, next: 8, omitted: 0 })
      assert.strictEqual(log.lastLines(1).text, "d\n")
      assert.strictEqual(log.lastLines(4).text, "a\nb\nc\nd\n")
      assert.strictEqual(log.lastLines(10).text, "a\nb\nc\nd\n")
      assert.strictEqual(log.lastLines(0).text, "")
    })

    it("counts an unterminated last line", () => {
      const log = new OutputLog()
      log.append(utf8("a\nb\nprompt$ "))
      assert.strictEqual(log.lastLines(1).text, "prompt$ ")
      assert.strictEqual(log.lastLines(2).text, "b\nprompt$ ")
    })

    it("finds lines across the ring's wrap point", () => {
      const log = new OutputLog({ headBytes: 0, tailBytes: 16 })
      for (let i = 0; i < 20; i++) log.append(utf8(`l${i}\n`))
      assert.strictEqual(log.lastLines(3).text, "l17\nl18\nl19\n")
    })

    it("starts with the marker when the lines reach into evicted bytes", () => {
      const log = new OutputLog({ headBytes: 6, tailBytes: 10 })
      log.append(utf8("h1\nh2\n" + "x".repeat(50) + "\nt1\nt2\n"))
      // head = "h1\nh2\n", tail = the last 10 bytes = "xxx\nt1\nt2\n"
      const gap = log.total - 16
      assert.strictEqual(log.lastLines(2).text, "t1\nt2\n")
      const three = log.lastLines(3)
      assert.strictEqual(three.text, `${omittedMarker(gap)}\nxxx\nt1\nt2\n`)
      assert.strictEqual(three.from, 6)
      assert.strictEqual(three.omitted, gap)
      // more lines reach into the head, shown before the marker (the gap counts as one break)
      assert.strictEqual(log.lastLines(4).text, `h2\n\n${omittedMarker(gap)}\nxxx\nt1\nt2\n`)
      assert.strictEqual(log.lastLines(5).text, `h1\nh2\n\n${omittedMarker(gap)}\nxxx\nt1\nt2\n`)
      assert.strictEqual(log.lastLines(9).from, 0)
    })

    it("respects maxBytes like read", () => {
      const log = new OutputLog()
      log.append(utf8("first line\n" + "y".repeat(1000) + "\nlast line\n"))
      const slice = log.lastLines(2, 20)
      assert.strictEqual(slice.text, `yyyyyyyyyy\n${omittedMarker(log.total - 11 - 20)}\nlast line\n`)
      assert.strictEqual(slice.from, 11)
    })
  })

  it("rejects invalid sizes", () => {
    assert.throws(() => new OutputLog({ headBytes: -1 }))
    assert.throws(() => new OutputLog({ tailBytes: 1.5 }))
  })

  it("a tail of 0 keeps only the head", () => {
    const log = new OutputLog({ headBytes: 3, tailBytes: 0 })
    log.append(utf8("abcdef"))
    assert.deepStrictEqual(log.read(), { text: `abc\n${omittedMarker(3)}`, from: 0, next: 6, omitted: 3, firstGap: 3 })
  })

  describe("pages: range, and where a cut read resumes", () => {
    const text = Array.from({ length: 1000 }, (_, i) => `${String(i).padStart(4, "0")}\n`).join("")

    it("a cut read says where its cut begins: the next page starts there", () => {
      const log = new OutputLog()
      log.append(utf8(text))
      const inline = log.read(0, 100)
      assert.strictEqual(inline.cutAt, 50)
      assert.strictEqual(inline.firstGap, 50)
      const page = log.range(inline.cutAt, 100)
      assert.deepStrictEqual(page, { text: text.slice(50, 150), from: 50, next: 150, omitted: 0 })
    })

    it("pages through a stream exactly, every byte once", () => {
      const log = new OutputLog()
      log.append(utf8(text))
      let cursor = 0
      let got = ""
      for (let i = 0; i < 100 && cursor < text.length; i++) {
        const page = log.range(cursor, 333)
        assert.strictEqual(page.omitted, 0)
        got += page.text
        cursor = page.next
      }
      assert.strictEqual(got, text)
    })

    it("a range that starts in the evicted middle marks it and goes on with the tail", () => {
      const log = new OutputLog({ headBytes: 10, tailBytes: 20 })
      log.append(utf8(text))
      const page = log.range(100, 5)
      assert.deepStrictEqual(page, { text: `${omittedMarker(text.length - 20 - 100)}\n${text.slice(-20, -15)}`, from: 100, next: text.length - 15, omitted: text.length - 120, firstGap: 100 })
      // Inside the head: the range ends with the head (what follows is not held).
      assert.deepStrictEqual(log.range(5, 100), { text: text.slice(5, 10), from: 5, next: 10, omitted: 0 })
    })

    it("a range never ends inside a character", () => {
      const log = new OutputLog()
      log.append(utf8("aé€😀b"))
      assert.deepStrictEqual(log.range(0, 2), { text: "a", from: 0, next: 1, omitted: 0 })
      assert.deepStrictEqual(log.range(1, 4), { text: "é", from: 1, next: 3, omitted: 0 })
    })

    it("a log started later, or told of bytes it never saw, counts them and holds the rest", () => {
      const log = new OutputLog({ headBytes: 10, tailBytes: 10 })
      log.startAt(1000)
      log.append(utf8("0123456789abc"))
      assert.strictEqual(log.total, 1013)
      assert.isFalse(log.holds(0, 10))
      assert.isTrue(log.holds(1003, 1013))
      assert.deepStrictEqual(log.range(1003, 100), { text: "3456789abc", from: 1003, next: 1013, omitted: 0 })
      log.skip(7)
      log.append(utf8("xyz"))
      assert.strictEqual(log.total, 1023)
      assert.isTrue(log.holds(1020, 1023))
      assert.isFalse(log.holds(1013, 1020))
      assert.deepStrictEqual(log.range(1013, 100), { text: `${omittedMarker(7)}\nxyz`, from: 1013, next: 1023, omitted: 7, firstGap: 1013 })
    })
  })
})

describe("OutputLog.shrink", () => {
  /** The bytes of [from, to) the log holds, read back as text. */
  const heldText = (log: OutputLog, from: number, to: number) => log.range(from, to - from).text

  it("keeps the first and last bytes asked for, counts the rest as evicted and frees the large buffers", () => {
    const data = patterned(10_000)
    const log = new OutputLog({ headBytes: 1000, tailBytes: 4000 })
    appendInRandomChunks(log, data, 700)
    log.shrink(100, 300)
    assert.strictEqual(log.total, 10_000)
    assert.strictEqual(log.retained, 400)
    assert.strictEqual(log.evicted, 9_600)
    assert.isTrue(log.holds(0, 100))
    assert.isFalse(log.holds(100, 101))
    assert.isFalse(log.holds(9_699, 9_700))
    assert.isTrue(log.holds(9_700, 10_000))
    assert.strictEqual(heldText(log, 0, 100), latin(data.subarray(0, 100)))
    assert.strictEqual(heldText(log, 9_700, 10_000), latin(data.subarray(9_700)))
    assert.strictEqual(log.read().text, `${latin(data.subarray(0, 100))}\n${omittedMarker(9_600)}\n${latin(data.subarray(9_700))}`)
    assert.deepStrictEqual([log.headBytes, log.tailBytes], [100, 300])
  })

  it("a stream held whole keeps its end from the head's bytes too, and every kept byte is exact", () => {
    const data = patterned(900)
    const log = new OutputLog({ headBytes: 800, tailBytes: 800 })
    appendInRandomChunks(log, data, 50)
    // 800 bytes sit in the head, 100 in the tail: the last 300 span both.
    log.shrink(200, 300)
    assert.strictEqual(log.retained, 500)
    assert.strictEqual(heldText(log, 0, 200), latin(data.subarray(0, 200)))
    assert.strictEqual(heldText(log, 600, 900), latin(data.subarray(600)))
    assert.strictEqual(log.read().omitted, 400)
  })

  it("a stream shorter than both windows loses nothing", () => {
    const data = patterned(250)
    const log = new OutputLog({ headBytes: 64, tailBytes: 1024 })
    log.append(data)
    log.shrink(100, 300)
    assert.strictEqual(log.retained, 250)
    assert.strictEqual(log.read().text, latin(data))
  })

  it("last lines and cursors read across the new gap as across an evicted middle", () => {
    const text = Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join("")
    const log = new OutputLog({ headBytes: 4096, tailBytes: 4096 })
    log.append(utf8(text))
    log.shrink(20, 40)
    const last = log.lastLines(2)
    assert.strictEqual(last.text, "line 998\nline 999\n")
    const fromMiddle = log.read(5000)
    assert.strictEqual(fromMiddle.from, 5000)
    assert.strictEqual(fromMiddle.omitted, text.length - 40 - 5000)
    assert.isTrue(fromMiddle.text.endsWith(text.slice(-40)))
  })

  it("bytes appended after a shrink go to the smaller tail", () => {
    const log = new OutputLog({ headBytes: 100, tailBytes: 1000 })
    log.append(patterned(3000))
    log.shrink(10, 20)
    log.append(utf8("0123456789abcdefghijXYZ"))
    assert.strictEqual(log.total, 3023)
    assert.strictEqual(log.retained, 30)
    assert.strictEqual(heldText(log, 3003, 3023), "3456789abcdefghijXYZ")
  })
})

describe("truncateMiddle", () => {
  it("leaves a text within the limit alone", () => {
    assert.deepStrictEqual(truncateMiddle("hello", 5), { text: "hello", omitted: 0 })
    assert.deepStrictEqual(truncateMiddle("", 0), { text: "", omitted: 0 })
  })

  it("keeps the start and the end around the marker", () => {
    const text = "a".repeat(50) + "b".repeat(50)
    const out = truncateMiddle(text, 20)
    assert.strictEqual(out.text, `${"a".repeat(10)}\n${omittedMarker(80)}\n${"b".repeat(10)}`)
    assert.strictEqual(out.omitted, 80)
  })

  it("counts UTF-8 bytes and never splits a character", () => {
    const text = "é".repeat(100) // 200 bytes
    for (let max = 0; max < 30; max++) {
      const out = truncateMiddle(text, max)
      assert.isFalse(out.text.includes("\uFFFD"), `max ${max}`)
      const kept = bytesOf(out.text.replace(/\n?\[… \d+ bytes omitted …\]\n?/, ""))
      assert.isAtMost(kept, max)
      assert.strictEqual(kept + out.omitted, 200)
    }
  })
})
