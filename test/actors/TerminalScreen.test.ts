import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { snapshotEffect, TerminalScreen } from "../../src/actors/TerminalScreen.js"

const utf8 = (s: string) => new TextEncoder().encode(s)

const withScreen = async <A>(
  options: ConstructorParameters<typeof TerminalScreen>[0],
  use: (screen: TerminalScreen) => Promise<A>
): Promise<A> => {
  const screen = new TerminalScreen(options)
  try {
    return await use(screen)
  } finally {
    screen.dispose()
  }
}

describe("TerminalScreen", () => {
  it("a snapshot right after a write shows the written text", () =>
    withScreen({ cols: 120, rows: 30 }, async (screen) => {
      screen.write(utf8("hello world"))
      const snap = await screen.snapshot()
      assert.strictEqual(snap.text, "hello world")
      assert.deepStrictEqual(snap.cursor, { x: 11, y: 0 })
      assert.strictEqual(snap.cols, 120)
      assert.strictEqual(snap.rows, 30)
      assert.isFalse(snap.alternateScreen)
      assert.isUndefined(snap.scrollback)
    }))

  it("a written Buffer may be reused at once: the terminal parses its own copy later", () =>
    withScreen({ cols: 80, rows: 24 }, async (screen) => {
      // A Buffer's `slice` is a view of the same memory; the backends hand out Buffers they refill.
      const reused = Buffer.from("\x1b[2;1Hfirst")
      screen.write(reused)
      reused.fill(0x58)
      screen.write(Buffer.from("\r\nsecond"))
      assert.strictEqual((await screen.snapshot()).text, "\nfirst\nsecond")
    }))

  it("every write before a snapshot is rendered, even many small ones", () =>
    withScreen({ cols: 80, rows: 24 }, async (screen) => {
      for (let i = 0; i < 200; i++) screen.write(utf8(`${i}\r\n`))
      screen.write(utf8("$ "))
      const snap = await screen.snapshot()
      const lines = snap.text.split("\n")
      assert.strictEqual(lines.length, 24)
      assert.strictEqual(lines[22], "199")
      assert.strictEqual(lines[23], "$")
      assert.deepStrictEqual(snap.cursor, { x: 2, y: 23 })
    }))

  it("an empty screen renders as empty text", () =>
    withScreen({ cols: 20, rows: 5 }, async (screen) => {
      const snap = await screen.snapshot()
      assert.strictEqual(snap.text, "")
      assert.deepStrictEqual(snap.cursor, { x: 0, y: 0 })
    }))

  it("CRLF starts a new line at column 0; a bare LF only moves down", () =>
    withScreen({ cols: 40, rows: 10 }, async (screen) => {
      screen.write(utf8("one\r\ntwo\r\n"))
      assert.strictEqual((await screen.snapshot()).text, "one\ntwo")
      screen.write(utf8("ab\ncd"))
      // no convertEol: like a real terminal, LF keeps the column
      assert.strictEqual((await screen.snapshot()).text, "one\ntwo\nab\n  cd")
    }))

  it("carriage return overwrites the line (progress bars)", () =>
    withScreen({ cols: 40, rows: 10 }, async (screen) => {
      screen.write(utf8("progress 10%\rprogress 100%\r\n"))
      assert.strictEqual((await screen.snapshot()).text, "progress 100%")
    }))

  it("reports the cursor position after cursor movement", () =>
    withScreen({ cols: 40, rows: 10 }, async (screen) => {
      screen.write(utf8("\x1b[5;10Hx"))
      const snap = await screen.snapshot()
      assert.deepStrictEqual(snap.cursor, { x: 10, y: 4 })
      assert.strictEqual(snap.text, "\n\n\n\n         x")
    }))

  it("trims trailing whitespace of rows and trailing blank rows", () =>
    withScreen({ cols: 40, rows: 10 }, async (screen) => {
      screen.write(utf8("a    \r\n\r\nb   \r\n\r\n\r\n   "))
      const snap = await screen.snapshot()
      assert.strictEqual(snap.text, "a\n\nb")
      assert.deepStrictEqual(snap.cursor, { x: 3, y: 5 })
    }))

  it("handles wide and multibyte characters, even split across writes", () =>
    withScreen({ cols: 40, rows: 5 }, async (screen) => {
      const bytes = utf8("日本語 é 😀")
      screen.write(bytes.subarray(0, 4))
      screen.write(bytes.subarray(4))
      assert.strictEqual((await screen.snapshot()).text, "日本語 é 😀")
    }))

  it("tracks the alternate screen of full-screen apps", () =>
    withScreen({ cols: 40, rows: 10 }, async (screen) => {
      screen.write(utf8("$ vim\r\n"))
      screen.write(utf8("\x1b[?1049h\x1b[H\x1b[2Jeditor contents"))
      const inside = await screen.snapshot()
      assert.isTrue(inside.alternateScreen)
      assert.strictEqual(inside.text, "editor contents")
      screen.write(utf8("\x1b[?1049l"))
      const after = await screen.snapshot()
      assert.isFalse(after.alternateScreen)
      assert.strictEqual(after.text, "$ vim")
    }))

  it("resizes, in order with earlier writes", () =>
    withScreen({ cols: 120, rows: 30 }, async (screen) => {
      screen.write(utf8("x".repeat(100) + "\r\n"))
      screen.resize(50, 10)
      const snap = await screen.snapshot()
      assert.strictEqual(snap.cols, 50)
      assert.strictEqual(snap.rows, 10)
      // the 100 characters were written at width 120 (one row), then reflowed to width 50
      // (xterm leaves the cursor's own line alone: the shell redraws its prompt on SIGWINCH)
      assert.strictEqual(snap.text, "x".repeat(50) + "\n" + "x".repeat(50))
      screen.write(utf8("y".repeat(60)))
      assert.strictEqual((await screen.snapshot()).text.split("\n").slice(-2).join("|"), "y".repeat(50) + "|" + "y".repeat(10))
      assert.strictEqual(screen.cols, 50)
    }))

  it("answers the app's queries through respond (cursor position report)", async () => {
    const replies: Array<string> = []
    const screen = new TerminalScreen({
      cols: 40,
      rows: 10,
      respond: (bytes) => replies.push(new TextDecoder().decode(bytes))
    })
    screen.write(utf8("\r\nabc\x1b[6n"))
    await screen.snapshot()
    assert.deepStrictEqual(replies, ["\x1b[2;4R"])
    screen.dispose()
  })

  it("a screen is the same whichever byte offset a write is split at: escape sequences and UTF-8 split across chunks", async () => {
    // What vim writes around its status line and its queries, with a character of three bytes.
    const stream = utf8(
      "\x1b[?1049h\x1b[1;30r\x1b[H\x1b[2J~\r\n~\x1b[30;1H-- INSERT --\x1b[1;1H\x1b[>c\x1b[?12$pnotes ▽ \x1b[1mbold\x1b[0m" +
        "\x1bP$q q\x1b\\\x1b]11;?\x07\x1b[30;73H^[\x1b[1;5H"
    )
    const render = async (chunks: ReadonlyArray<Uint8Array>) => {
      const answers: Array<string> = []
      return withScreen({ cols: 100, rows: 30, respond: (bytes) => answers.push(new TextDecoder().decode(bytes)) }, async (screen) => {
        for (const chunk of chunks) screen.write(chunk)
        const snap = await screen.snapshot()
        return { text: snap.text, cursor: snap.cursor, answers: answers.join("") }
      })
    }
    const whole = await render([stream])
    assert.include(whole.text, "-- INSERT --")
    assert.include(whole.text, "notes ▽ bold")
    assert.notMatch(whole.text, /\x1b|\[30;1H|\[\?12/)
    assert.include(whole.answers, "\x1b[>0;276;0c")
    for (let at = 1; at < stream.length; at++) {
      assert.deepStrictEqual(await render([stream.subarray(0, at), stream.subarray(at)]), whole, `split at byte ${at}`)
    }
    // And byte by byte.
    assert.deepStrictEqual(await render(Array.from(stream, (byte) => Uint8Array.of(byte))), whole)
  })

  it("caughtUp resolves once every byte written before has been parsed and its queries answered", async () => {
    const answers: Array<string> = []
    await withScreen({ cols: 40, rows: 10, respond: (bytes) => answers.push(new TextDecoder().decode(bytes)) }, async (screen) => {
      await screen.caughtUp()
      screen.write(utf8("x".repeat(200_000)))
      screen.write(utf8("\x1b[6n"))
      assert.deepStrictEqual(answers, [], "xterm parses between timers: nothing is answered synchronously")
      await screen.caughtUp()
      assert.lengthOf(answers, 1)
      assert.match(answers[0]!, /^\x1b\[\d+;\d+R$/)
    })
  })

  it("rejects invalid sizes", () => {
    assert.throws(() => new TerminalScreen({ cols: 0, rows: 10 }))
    assert.throws(() => new TerminalScreen({ cols: 10, rows: 1.5 }))
    const screen = new TerminalScreen({ cols: 10, rows: 10 })
    assert.throws(() => screen.resize(-1, 5))
    screen.dispose()
  })

  it("returns the lines that scrolled off when asked", () =>
    withScreen({ cols: 40, rows: 5, scrollback: 100 }, async (screen) => {
      for (let i = 1; i <= 20; i++) screen.write(utf8(`line ${i}\r\n`))
      const plain = await screen.snapshot()
      assert.isUndefined(plain.scrollback)
      assert.strictEqual(plain.text, "line 17\nline 18\nline 19\nline 20")
      const snap = await screen.snapshot({ scrollback: true })
      assert.strictEqual(snap.scrollback, Array.from({ length: 16 }, (_, i) => `line ${i + 1}`).join("\n"))
      const recent = await screen.snapshot({ scrollback: true, maxScrollbackLines: 3 })
      assert.strictEqual(recent.scrollback, "line 14\nline 15\nline 16")
    }))

  it("keeps at most the configured scrollback", () =>
    withScreen({ cols: 40, rows: 5, scrollback: 10 }, async (screen) => {
      for (let i = 1; i <= 100; i++) screen.write(utf8(`line ${i}\r\n`))
      const snap = await screen.snapshot({ scrollback: true })
      const history = snap.scrollback!.split("\n")
      assert.strictEqual(history.length, 10)
      assert.strictEqual(history[9], "line 96")
    }))

  it("keeps the normal screen's scrollback while the alternate screen is shown", () =>
    withScreen({ cols: 40, rows: 3 }, async (screen) => {
      for (let i = 1; i <= 5; i++) screen.write(utf8(`line ${i}\r\n`))
      screen.write(utf8("\x1b[?1049h\x1b[Hless"))
      const snap = await screen.snapshot({ scrollback: true })
      assert.isTrue(snap.alternateScreen)
      assert.strictEqual(snap.text, "less")
      assert.strictEqual(snap.scrollback, "line 1\nline 2\nline 3")
    }))

  it("1 MB of output, then a snapshot still shows the last line", () =>
    withScreen({ cols: 120, rows: 30 }, async (screen) => {
      let written = 0
      let i = 0
      while (written < 1024 * 1024) {
        const chunk = utf8(`output line ${i++} ${"-".repeat(50)}\r\n`)
        screen.write(chunk)
        written += chunk.length
      }
      screen.write(utf8("the end"))
      const snap = await screen.snapshot()
      const lines = snap.text.split("\n")
      assert.strictEqual(lines[lines.length - 1], "the end")
      assert.strictEqual(lines[lines.length - 2], `output line ${i - 1} ${"-".repeat(50)}`)
      assert.strictEqual(screen.pendingBytes, 0)
      assert.isUndefined(snap.droppedBytes)
    }))

  it("big single writes are parsed in order through the screen's own queue", () =>
    withScreen({ cols: 80, rows: 10 }, async (screen) => {
      // 4 MiB in 256 KiB writes: more than is handed to xterm at once
      const block = utf8(`${"z".repeat(78)}\r\n`.repeat(Math.floor((256 * 1024) / 80)))
      for (let i = 0; i < 16; i++) screen.write(block)
      screen.write(utf8("done"))
      assert.isAbove(screen.pendingBytes, 0)
      const snap = await screen.snapshot()
      assert.isTrue(snap.text.endsWith("\ndone"))
      assert.strictEqual(screen.pendingBytes, 0)
    }))

  it("drops the oldest waiting bytes past its backlog limit instead of failing", () =>
    withScreen({ cols: 80, rows: 5, maxBacklogBytes: 1024 * 1024 }, async (screen) => {
      const block = utf8("a".repeat(64 * 1024))
      for (let i = 0; i < 64; i++) screen.write(block)
      screen.write(utf8("\x1b[2J\x1b[Hlast"))
      assert.isAtMost(screen.pendingBytes, 2 * 1024 * 1024)
      const snap = await screen.snapshot()
      assert.isAbove(snap.droppedBytes ?? 0, 0)
      assert.strictEqual(snap.text, "last")
    }))

  it("concurrent snapshots all resolve, each after the writes before it", () =>
    withScreen({ cols: 40, rows: 5 }, async (screen) => {
      screen.write(utf8("a"))
      const first = screen.snapshot()
      screen.write(utf8("b"))
      const second = screen.snapshot()
      assert.deepStrictEqual([(await first).text, (await second).text], ["a", "ab"])
    }))

  it("dispose resolves pending snapshots, and later calls do not throw", async () => {
    const screen = new TerminalScreen({ cols: 40, rows: 5 })
    screen.write(utf8("x".repeat(1000)))
    const pending = screen.snapshot()
    screen.dispose()
    const snap = await pending
    assert.strictEqual(snap.cols, 40)
    screen.write(utf8("ignored"))
    screen.resize(10, 10)
    assert.strictEqual((await screen.snapshot()).cols, 40)
    screen.dispose()
  })

  it.effect("snapshotEffect renders as an Effect", () =>
    Effect.gen(function* () {
      const screen = yield* Effect.acquireRelease(
        Effect.sync(() => new TerminalScreen({ cols: 30, rows: 4 })),
        (s) => Effect.sync(() => s.dispose())
      )
      screen.write(utf8("from effect\r\n"))
      const snap = yield* snapshotEffect(screen, { scrollback: true })
      assert.strictEqual(snap.text, "from effect")
      assert.strictEqual(snap.scrollback, "")
      assert.deepStrictEqual(snap.cursor, { x: 0, y: 1 })
    }).pipe(Effect.scoped))
})
