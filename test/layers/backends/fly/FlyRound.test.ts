import { assert, describe, it } from "@effect/vitest"
import { Either } from "effect"
import { spawnSync } from "node:child_process"
import * as FlyHeld from "../../../../src/layers/backends/fly/FlyHeld.js"
import * as Round from "../../../../src/layers/backends/fly/FlyRound.js"

const b64 = (text: string) => Buffer.from(text).toString("base64")

describe("FlyRound", () => {
  it("encodes ops in order, their data as one base64 line each, and the reports after them", () => {
    const { args, stdin } = Round.encode(
      [
        { _tag: "Start", dir: "/tmp/.kt/p/a-1", spec: "set -- '/'\n", meta: "{}" },
        { _tag: "Write", dir: "/tmp/.kt/p/a-0", wid: "3", data: new TextEncoder().encode("hi\n") },
        { _tag: "Close", dir: "/tmp/.kt/p/a-0" },
        { _tag: "Signal", dir: "/tmp/.kt/p/a-0", signal: "SIGTERM" },
        { _tag: "Cleanup", dir: "/tmp/.kt/p/a-9" }
      ],
      [{ dir: "/tmp/.kt/p/a-0", outOffset: 5, errOffset: 7 }],
      { cap: 4096, waitTicks: 20, headBytes: 100, tailBytes: 300 }
    )
    assert.deepStrictEqual(args, [
      "4096", "20", "100", "300", "3",
      "S", "/tmp/.kt/p/a-1", "1", "2",
      "W", "/tmp/.kt/p/a-0", "3", "3",
      "C", "/tmp/.kt/p/a-0",
      "K", "/tmp/.kt/p/a-0", "TERM",
      "X", "/tmp/.kt/p/a-9",
      "R", "/tmp/.kt/p/a-0", "5", "7"
    ])
    assert.strictEqual(stdin, `${b64("set -- '/'\n")}\n${b64("{}")}\n${b64("hi\n")}\n`)
    assert.isUndefined(Round.encode([], [{ dir: "/tmp/.kt/p/x", outOffset: 0, errOffset: 0 }], { cap: 1, waitTicks: 0, headBytes: 0, tailBytes: 0 }).stdin)
  })

  it("a start spec survives the shell exactly: quotes, newlines, spaces, empty words", () => {
    const spec = Round.startSpec({ cwd: "/home/a b", env: { A: "it's", B: "" }, argv: ["printf", "%s|", "a\nb", "", "$HOME", "`x`"] })
    const result = spawnSync("/bin/sh", ["-c", `${spec}printf '%s\\0' "$@"`])
    assert.deepStrictEqual(result.stdout.toString().split("\0").slice(0, -1), ["/home/a b", "2", "A=it's", "B=", "printf", "%s|", "a\nb", "", "$HOME", "`x`"])
  })

  it("decodes the supervisor line, op answers and reports", () => {
    const stdout = [
      "S 1 boot-1 1",
      "A",
      `A ${b64("the process has not started")}`,
      "P 1 1 - - 3 0 42 41 7 - 0 0",
      "F ",
      `O ${b64("abc")}`,
      "E ",
      "P 0 0 143 0 0 5 - 50 8 TERM,KILL, 0 5",
      `F ${b64("'x': command not found")}`,
      "O ",
      `E ${b64("oops!")}`,
      ""
    ].join("\n")
    const decoded = Round.decode(stdout, 2, 2)
    assert.isTrue(Either.isRight(decoded))
    const result = Either.getOrThrow(decoded)
    assert.deepStrictEqual(result.supervisor, { alive: true, boot: "boot-1", version: "1" })
    assert.deepStrictEqual(result.ops, [undefined, "the process has not started"])
    assert.deepInclude(result.reports[0], { runnerAlive: true, groupAlive: true, status: undefined, runnerStatus: undefined, outSize: 3, pid: 42, pgid: 41, fail: undefined, handle: 7 })
    assert.deepStrictEqual(result.reports[0]!.signals, [])
    assert.strictEqual(result.reports[0]!.out.toString(), "abc")
    assert.deepInclude(result.reports[1], { runnerAlive: false, status: 143, runnerStatus: 0, errSize: 5, pid: undefined, fail: "'x': command not found", handle: 8, errStart: 5 })
    assert.deepStrictEqual(result.reports[1]!.signals, ["TERM", "KILL"], "signals any server sent")
    assert.strictEqual(result.reports[1]!.err.toString(), "oops!")
  })

  it("refuses an answer that is not a round", () => {
    assert.isTrue(Either.isLeft(Round.decode("hello\n", 0, 0)))
    assert.isTrue(Either.isLeft(Round.decode("S 1 b 1\nA\n", 2, 0)), "an answer is missing")
    assert.isTrue(Either.isLeft(Round.decode("S 1 b 1\nP 1 1 - - 0 0 - - - - 0 0\nF \n", 0, 1)), "a report is cut short")
    assert.deepStrictEqual(Either.getOrThrow(Round.decode("S 0 - -\n", 0, 0)).supervisor, { alive: false, boot: undefined, version: undefined })
  })

  it("decodes a list: each record's handle, command, note, times, exit (a signal any server sent) and totals", () => {
    const stdout = [
      "S 1 boot-2 1",
      "H 3 /tmp/.kt/p/a-1",
      `M ${b64(FlyHeld.meta("sleep 9", "/home/agent"))}`,
      `N ${b64("killed by server B")}`,
      "T 1700000000000 1700000001500",
      "P 0 0 137 137 4 0 42 41 3 KILL, 0 0",
      "F ",
      "O ",
      "E ",
      "H 4 /tmp/.kt/p/b-1",
      "M ",
      "N ",
      "T 1700000002000 -",
      "P 1 1 - - 0 2 50 49 4 - 0 0",
      "F ",
      "O ",
      "E ",
      ""
    ].join("\n")
    const list = FlyHeld.decodeList(stdout)
    assert.notStrictEqual(typeof list, "string", String(list))
    const { boot, processes } = list as Exclude<typeof list, string>
    assert.strictEqual(boot, "boot-2")
    assert.deepStrictEqual(processes.map((one) => one.record), [
      {
        handle: 3, pid: 42, command: "sleep 9", cwd: "/home/agent", tty: false, size: { cols: 0, rows: 0 },
        exit: { exitCode: null, signal: "SIGKILL" }, closed: true, note: "killed by server B",
        startedAt: 1700000000000, endedAt: 1700000001500, totals: { stdout: 4, stderr: 0 }
      },
      {
        handle: 4, pid: 50, command: "", cwd: "", tty: false, size: { cols: 0, rows: 0 },
        exit: undefined, closed: false, note: "", startedAt: 1700000002000, endedAt: undefined, totals: { stdout: 0, stderr: 2 }
      }
    ])
    assert.strictEqual(typeof FlyHeld.decodeList("S 1 b 1\nH 3 /x\nM \n"), "string", "a record cut short is refused")
  })
})
