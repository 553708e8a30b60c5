/**
 * How a call waits on a process: for its exit, a pattern in its output, quiet, or the output that
 * settles after an input — always bounded, never racing the process itself (the wait loses, the
 * process keeps running), with progress notifications while it waits.
 */
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Queue from "effect/Queue"
import * as Schedule from "effect/Schedule"
import * as Pattern from "../../domain/Pattern.js"
import type { SettingsShape } from "../../services/Settings.js"
import type { ProcessHandle, ProgressReporter } from "../../services/Processes.js"

/** How long output must pause before an input's answer counts as settled. */
export const SETTLE_MS = 60
/**
 * How long a terminal's output must pause before its screen counts as settled. Longer than on
 * pipes: a full-screen app draws in bursts (vim writes its message, asks the terminal questions,
 * then draws), and vim holds an Escape for its 100 ms `ttimeoutlen` before it acts on it.
 */
export const TTY_SETTLE_MS = 250
/** stdin's default wait on a terminal: room for the pause above after the app's answer. */
export const TTY_YIELD_MS = 2_000
/** How much output already there a pattern is matched against first. */
const BACKLOG = 1024 * 1024

/** Progress every second while `work` runs, when the client listens. */
export const withProgress = <A, E>(
  work: Effect.Effect<A, E>,
  progress: ProgressReporter | undefined,
  message: (elapsedMs: number) => string
): Effect.Effect<A, E> =>
  progress === undefined
    ? work
    : Effect.gen(function*() {
      const start = yield* Clock.currentTimeMillis
      let tick = 0
      const ticker = Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) => progress({ progress: ++tick, message: message(now - start) })),
        Effect.repeat(Schedule.spaced(Duration.seconds(1))),
        Effect.delay(Duration.seconds(1))
      )
      return yield* Effect.raceFirst(work, Effect.zipRight(ticker, Effect.never))
    })

/**
 * How long a call may wait. Without progress notifications a call stays under common client
 * request timeouts (`maxCallMs`); with them, up to `maxTimeoutMs`. A capped wait says so.
 */
export const callBudget = (
  settings: SettingsShape,
  requestedMs: number,
  progress: ProgressReporter | undefined
): { readonly ms: number; readonly note?: string } => {
  const cap = progress === undefined ? Math.min(settings.maxCallMs, settings.maxTimeoutMs) : settings.maxTimeoutMs
  if (requestedMs <= cap) return { ms: requestedMs }
  return {
    ms: cap,
    note: progress === undefined
      ? `waited ${cap} ms, not ${requestedMs}: calls without a progress token return within ${cap} ms so that the client's request timeout is not hit; wait again, or ask with a progressToken for up to ${settings.maxTimeoutMs} ms`
      : `waited ${cap} ms, not ${requestedMs} (the longest wait of one call)`
  }
}

/**
 * What a call says when the pattern it waited for did not come and the process runs on: the usual
 * cause is a program that holds its output in a buffer while it writes to a pipe (the process has
 * no terminal), so the line is printed but not yet written — the agent sees "" and no hint.
 */
export const patternNotSeen = (id: string, waitedMs: number, tty: boolean): string =>
  `pattern not seen in ${waitedMs} ms; ${id} runs on. ` +
  (tty
    ? `wait(pattern) watches on, or stdout shows the screen.`
    : `If it buffers output on a pipe it may have printed it already: use python3 -u (PYTHONUNBUFFERED=1 is set), ` +
      `stdbuf -oL, or tty=true; wait(pattern) watches on.`)

/**
 * The screen as a pattern sees it: rendered rows drop their trailing spaces, but on the cursor's
 * row the spaces before the cursor are what a prompt ends with (`>>> `, `name? `), so they stay.
 */
export const screenForMatch = (screen: { readonly text: string; readonly cursor: { readonly x: number; readonly y: number } } | undefined): string => {
  if (screen === undefined) return ""
  const lines = screen.text.split("\n")
  const { x, y } = screen.cursor
  // The cursor is on the visible screen (y < rows), below the last row with text at most.
  while (lines.length <= y) lines.push("")
  if (lines[y]!.length < x) lines[y] = lines[y]!.padEnd(x)
  return lines.join("\n")
}

/**
 * Completes with the match once the output from the given cursors on matches (what was already
 * there counts too: a terminal's screen, whatever the cursors). Matching is linear-time and
 * bounded per scan (see Pattern.ts): a flood of output or a costly pattern slows only this wait,
 * never the server.
 */
export const matchOutput = (
  process: ProcessHandle,
  pattern: Pattern.Pattern,
  from: { readonly stdout: number; readonly stderr: number }
): Effect.Effect<string> =>
  Effect.scoped(Effect.gen(function*() {
    const live = yield* process.subscribe
    // Raw bytes (a TTY's too), and the screen with the spaces before its cursor (screenForMatch).
    const current = yield* process.read({ stdoutCursor: from.stdout, stderrCursor: from.stderr, maxBytes: BACKLOG, raw: true })
    const first = yield* Pattern.scanner(pattern).feed([screenForMatch(current.screen), current.stdout.text, current.stderr.text].join("\n"))
    if (Option.isSome(first)) return first.value
    const scan = Pattern.scanner(pattern)
    const out = new TextDecoder("utf-8", { fatal: false })
    const err = new TextDecoder("utf-8", { fatal: false })
    while (true) {
      // Everything that arrived since the last scan is scanned together.
      const events = yield* Queue.takeBetween(live, 1, 256)
      let text = ""
      let exited = false
      for (const event of events) {
        if (event._tag === "Exit") exited = true
        else text += event._tag === "Stdout" ? out.decode(event.data, { stream: true }) : err.decode(event.data, { stream: true })
      }
      const found = yield* scan.feed(text)
      if (Option.isSome(found)) return found.value
      if (exited) return yield* Effect.never
    }
  }))

/** Completes once the process has produced no output for `quietMs`. */
export const quiet = (process: ProcessHandle, quietMs: number): Effect.Effect<void> =>
  Effect.gen(function*() {
    while (true) {
      const last = yield* process.lastActivity
      const now = yield* Clock.currentTimeMillis
      if (now - last >= quietMs) return
      yield* Effect.sleep(Duration.millis(quietMs - (now - last)))
    }
  })

/**
 * Waits for what follows an input: returns once output came and then paused (SETTLE_MS; on a
 * terminal TTY_SETTLE_MS), or the process exited, or `yieldMs` passed.
 */
export const settle = (process: ProcessHandle, since: number, yieldMs: number): Effect.Effect<void> =>
  Effect.gen(function*() {
    const pause = process.tty ? TTY_SETTLE_MS : SETTLE_MS
    const settled = Effect.gen(function*() {
      while (true) {
        const last = yield* process.lastActivity
        const now = yield* Clock.currentTimeMillis
        if (last > since && now - last >= pause) return
        yield* Effect.sleep(Duration.millis(last > since ? pause - (now - last) : pause))
      }
    })
    const fullScreen = process.tty ? yield* onAlternateScreen(process) : false
    const startedAt = yield* Clock.currentTimeMillis
    yield* Effect.raceFirst(settled, Effect.asVoid(process.exited)).pipe(Effect.timeout(Duration.millis(yieldMs)), Effect.ignore)
    // A full-screen app that left its alternate screen on this input, and printed nothing after
    // (vim's `:wq`; a shell that ran `less` prints its prompt), is ending: its exit, moments later
    // (longer on a loaded machine), belongs in this result.
    if (!fullScreen || (yield* process.status) !== "running" || !(yield* leftFullScreenLast(process))) return
    const left = yieldMs - ((yield* Clock.currentTimeMillis) - startedAt)
    if (left > 0) yield* Effect.asVoid(process.exited).pipe(Effect.timeout(Duration.millis(Math.min(left, EXIT_AFTER_FULL_SCREEN_MS))), Effect.ignore)
  })

/** How long an input that ended a full-screen app's screen waits for the app's exit. */
const EXIT_AFTER_FULL_SCREEN_MS = 2_000
/** The raw output's end looked at for the alternate screen's leaving (what follows it is short). */
const TAIL_BYTES = 512
const LEAVE_ALTERNATE = /\x1b\[\?(?:1049|1047|47)l/g

const onAlternateScreen = (process: ProcessHandle): Effect.Effect<boolean> =>
  Effect.map(process.read({}), (view) => view.screen?.alternateScreen === true)

/** Whether the terminal's last output left the alternate screen with nothing visible after it. */
const leftFullScreenLast = (process: ProcessHandle): Effect.Effect<boolean> =>
  Effect.gen(function*() {
    const { stdout } = yield* process.totals
    const view = yield* process.read({ raw: true, stdoutCursor: Math.max(0, stdout - TAIL_BYTES), maxBytes: TAIL_BYTES })
    if (view.screen?.alternateScreen !== false) return false
    const tail = view.stdout.text
    const leaves = [...tail.matchAll(LEAVE_ALTERNATE)]
    const last = leaves[leaves.length - 1]
    if (last === undefined) return false
    return Pattern.plainText(tail.slice(last.index + last[0].length)).trim() === ""
  })

/**
 * A terminal's result is rendered once its screen settles: its output paused for TTY_SETTLE_MS
 * (a pattern matches the first bytes of a drawing: vim's `"notes.txt"` comes before the rest of
 * its screen), or the process exited, or `budgetMs` (what is left of the call's own) passed.
 * Pipes return at once.
 */
export const screenSettled = (process: ProcessHandle, budgetMs: number): Effect.Effect<void> =>
  !process.tty || budgetMs <= 0 ? Effect.void : Effect.raceFirst(quiet(process, TTY_SETTLE_MS), Effect.asVoid(process.exited)).pipe(
    Effect.timeout(Duration.millis(budgetMs)),
    Effect.ignore
  )
