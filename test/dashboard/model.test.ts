/**
 * The dashboard's view model (src/dashboard/model.ts): what the page shows for each tool result
 * shape, the 0.1 ones and this release's (issue 11), without a browser.
 */
import { assert, describe, it } from "vitest"
import {
  cssToken,
  execEntry,
  inventory,
  maxProcessRows,
  poolLine,
  processes,
  resultText,
  safeStyleVariables
} from "../../src/dashboard/model.js"

const computer = {
  computer_id: "alpha",
  sandbox_id: "kt-alpha",
  backend: "host",
  state: "running",
  temporary: false,
  image: "debian:bookworm-slim",
  created_at: "2026-11-30T10:00:00.000Z",
  processes: 2
}

describe("inventory", () => {
  it("reads computer_list's computers, without pool or activity when the result has none", () => {
    const view = inventory({ computers: [computer], count: 1 })
    assert.deepStrictEqual(view.computers, [{
      id: "alpha",
      state: "running",
      backend: "host",
      image: "debian:bookworm-slim",
      sandboxId: "kt-alpha",
      temporary: false,
      createdAt: "2026-11-30T10:00:00.000Z",
      processes: 2,
      endsAt: undefined,
      warning: undefined
    }])
    assert.isUndefined(view.pool)
    assert.isUndefined(view.activity)
  })

  it("shows the pool, a computer's end time and warning when the result has them", () => {
    const view = inventory({
      computers: [{ ...computer, ends_at: "2026-11-30T11:00:00.000Z", warning: "lease ends in 5 minutes" }],
      count: 1,
      pool: { size: 4, ready: 2, starting: 1, handedOut: 1 }
    })
    assert.deepStrictEqual(view.pool, { size: 4, ready: 2, starting: 1, handedOut: 1 })
    assert.strictEqual(poolLine(view.pool!), "pool 2/4 ready · 1 starting · 1 handed out")
    assert.strictEqual(view.computers[0]!.endsAt, "2026-11-30T11:00:00.000Z")
    assert.strictEqual(view.computers[0]!.warning, "lease ends in 5 minutes")
  })

  it("reads recent activity from an audit field, skipping entries without a summary", () => {
    const view = inventory({
      computers: [],
      audit: [
        { time: "2026-11-30T10:00:01.000Z", kind: "process.start", summary: "sleep 300", computer_id: "alpha" },
        { time: "2026-11-30T10:00:02.000Z", kind: "egress" },
        "not an entry"
      ]
    })
    assert.deepStrictEqual(view.activity, [
      { time: "2026-11-30T10:00:01.000Z", kind: "process.start", summary: "sleep 300", computerId: "alpha" }
    ])
    assert.deepStrictEqual(inventory({ computers: [], audit: [] }).activity, [])
  })

  it("keeps what it can of malformed results", () => {
    assert.deepStrictEqual(inventory(null).computers, [])
    assert.deepStrictEqual(inventory({ computers: "nope" }).computers, [])
    const view = inventory({ computers: [{ computer_id: "b", processes: -3, temporary: "yes" }, { state: "running" }] })
    assert.strictEqual(view.computers.length, 1)
    assert.include(view.computers[0]!, { id: "b", state: "unknown", backend: "?", processes: 0, temporary: false })
  })
})

describe("processes", () => {
  it("reads 0.1's ps: id is the handle, pid the OS pid, status running/exited/killed", () => {
    const view = processes({
      processes: [
        { id: "p1", pid: 4242, command: "true", status: "exited", exitCode: 0, signal: null, startedAt: "2026-11-30T10:00:00Z" },
        { id: "p2", pid: 4243, command: "sleep 300", status: "running", exitCode: null, signal: null, startedAt: "2026-11-30T10:00:01Z" },
        { id: "p3", pid: null, command: "yes", status: "killed", exitCode: null, signal: "SIGTERM", startedAt: "2026-11-30T10:00:02Z", reason: "killed by a tool call" }
      ]
    })
    assert.deepStrictEqual(view.rows.map((p) => [p.id, p.state, p.exit]), [["p2", "running", ""], ["p3", "killed", "SIGTERM"], ["p1", "exited", "0"]])
    assert.strictEqual(view.rows[1]!.reason, "killed by a tool call")
    assert.strictEqual(view.hidden, 0)
  })

  it("reads this release's ps: pid is the handle, status running/terminated", () => {
    const view = processes({
      processes: [
        { pid: "p7", computer_id: "alpha", command: "make", status: "terminated", exitCode: 2, cwd: "/home/agent", tty: false, createdAt: "2026-11-30T10:00:00Z", endedAt: "2026-11-30T10:00:05Z" },
        { pid: "p8", computer_id: "alpha", command: "sleep 9", status: "terminated", signal: "SIGKILL", cwd: "/", tty: false, createdAt: "2026-11-30T10:00:03Z" },
        { pid: "p9", computer_id: "alpha", command: "vim", status: "running", cwd: "/", tty: true, createdAt: "2026-11-30T09:00:00Z" }
      ],
      hidden: 12
    })
    assert.deepStrictEqual(view.rows.map((p) => [p.id, p.state, p.exit, p.startedAt]), [
      ["p9", "running", "", "2026-11-30T09:00:00Z"],
      ["p8", "killed", "SIGKILL", "2026-11-30T10:00:03Z"],
      ["p7", "exited", "2", "2026-11-30T10:00:00Z"]
    ])
    assert.strictEqual(view.hidden, 12)
  })

  it("shows at most the cap, running ones first, and counts the rest as hidden", () => {
    const many = Array.from({ length: maxProcessRows + 5 }, (_, i) => ({
      id: `p${i}`,
      command: "true",
      status: i === 0 ? "running" : "exited",
      exitCode: i === 0 ? null : 0,
      startedAt: `2026-11-30T10:${String(i).padStart(2, "0")}:00Z`
    }))
    const view = processes({ processes: many })
    assert.strictEqual(view.rows.length, maxProcessRows)
    assert.strictEqual(view.rows[0]!.id, "p0")
    assert.strictEqual(view.rows[1]!.id, `p${maxProcessRows + 4}`)
    assert.strictEqual(view.hidden, 5)
  })

  it("skips entries without a handle and names unknown statuses", () => {
    const view = processes({ processes: [{ pid: 17, status: "running" }, { id: "p1", status: "zombie" }] })
    assert.deepStrictEqual(view.rows.map((p) => [p.id, p.state]), [["p1", "unknown"]])
  })
})

describe("the terminal", () => {
  it("shows a command's output and an [exit N · ms] footer", () => {
    const entry = execEntry("alpha", "echo hi; echo oops >&2", {
      stdout: "hi",
      stderr: "oops\n",
      exit_code: 0,
      exec_duration_ms: 12.6,
      computer_id: "alpha",
      temporary: false
    })
    assert.deepStrictEqual(entry, {
      prompt: "alpha $ echo hi; echo oops >&2\n",
      stdout: "hi\n",
      stderr: "oops\n",
      footer: "[exit 0 · 13 ms]\n",
      failed: false
    })
  })

  it("marks a failure, a timeout and truncated output", () => {
    const entry = execEntry("alpha", "sleep 99\n", { stdout: "", stderr: "", exit_code: 124, exec_duration_ms: 1000, timed_out: true, truncated: true })
    assert.strictEqual(entry.prompt, "alpha $ sleep 99\n")
    assert.strictEqual(entry.footer, "[exit 124 · timed out · truncated · 1000 ms]\n")
    assert.isTrue(entry.failed)
    assert.strictEqual(execEntry("a", "x", {}).footer, "[exit ? · ? ms]\n")
  })

  it("reads an error result's text", () => {
    assert.strictEqual(resultText({ isError: true, content: [{ type: "text", text: "InvalidInput: bad id" }, { type: "image", data: "" }] }), "InvalidInput: bad id")
    assert.strictEqual(resultText({ isError: true }), "the tool call failed")
  })
})

describe("untrusted values in styles and classes", () => {
  it("takes only custom properties without url()", () => {
    assert.deepStrictEqual(
      safeStyleVariables({
        "--color-text-primary": "#111",
        "--font-sans": "Inter, sans-serif",
        "--color-background-primary": "url(https://evil.example/x.png)",
        "--bad name": "red",
        color: "red",
        "--shadow-sm": 3
      }),
      [["--color-text-primary", "#111"], ["--font-sans", "Inter, sans-serif"]]
    )
    assert.deepStrictEqual(safeStyleVariables(undefined), [])
  })

  it("reduces a state to a class token", () => {
    assert.strictEqual(cssToken("Running"), "running")
    assert.strictEqual(cssToken("x\" onclick=\"alert(1)"), "xonclickalert1")
  })
})
