// The agent workflows, each done with every server's own tools in the fewest calls that server
// allows. A task returns { ok, note }: ok only when its outcome was verified (the file after vim,
// the body curl got, the exit code …); verification and setup go through `quiet`/`sh`, which are
// not counted. A server that cannot do a task returns { ok: false, cannot: "why" } without calls.
import { textOf } from "./servers.mjs"

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const structured = (result) => result.structuredContent ?? {}
/** process-mcp answers JSON text (or a plain sentence). */
const pmJson = (result) => {
  try {
    return JSON.parse(textOf(result))
  } catch {
    return {}
  }
}
/** DesktopCommander's "Process started with PID 123 …". */
const dcPid = (result) => Number(/PID (\d+)/.exec(textOf(result))?.[1])
/**
 * DesktopCommander's start_process gives the output but not the exit code; read_process_output
 * says "Process completed with exit code N". An agent that needs the code makes that call.
 */
const dcRun = async (a, command, timeout_ms) => {
  const started = await a.call("start_process", { command, timeout_ms })
  let text = textOf(started)
  let code = /exit code (\d+)/.exec(text)?.[1]
  if (code === undefined) {
    const more = textOf(await a.call("read_process_output", { pid: dcPid(started), timeout_ms: 1000 }))
    text += more
    code = /exit code (\d+)/.exec(more)?.[1]
  }
  return { text, code: code === undefined ? undefined : Number(code) }
}
const check = (conditions) => {
  const failed = Object.entries(conditions).filter(([, ok]) => !ok).map(([what]) => what)
  return failed.length === 0 ? { ok: true } : { ok: false, note: `not verified: ${failed.join(", ")}` }
}

// ---- one-shot commands ----------------------------------------------------------------------------
const oneShot = [
  { command: "echo hello", stdout: "hello", code: 0 },
  { command: "uname -s", stdout: "Linux", code: 0 },
  { command: "ls /nonexistent", stderr: "No such file", code: 2 }
]
const oneShotOk = (seen) =>
  check(Object.fromEntries(oneShot.flatMap((step, i) => [
    [`${step.command}: output`, (step.stdout ? seen[i].stdout : seen[i].stderr)?.includes(step.stdout ?? step.stderr)],
    [`${step.command}: exit code`, seen[i].code === step.code]
  ])))

// ---- web server -------------------------------------------------------------------------------------
const page = "hello from the agent-tasks bench"
const webSetup = (port) => `mkdir -p www && printf '${page}\\n' > www/index.html && echo ${port}`
const serve = (port) => `python3 -u -m http.server ${port} --bind 127.0.0.1 --directory www`
const curl = (port) => `curl -sS http://127.0.0.1:${port}/index.html`

// ---- REPL -----------------------------------------------------------------------------------------
const repl = "python3 -u -q -i"
const replLines = ["x = 6*7", "print(x*2)", "exit()"]

// ---- vim --------------------------------------------------------------------------------------------
const vimFile = "notes.txt"
const vimKeys = "A world\x1b:wq\r"
const vimExpected = "hello world\n"

// ---- 30 s build -------------------------------------------------------------------------------------
const buildScript = "for i in $(seq 1 30); do echo \"step $i/30\"; sleep 1; done; echo 'error: 1 test failed' >&2; exit 2"
const buildSetup = `printf '%s\\n' '${buildScript.replaceAll("'", "'\\''")}' > build.sh`
const buildOk = (text, code) => check({ "saw step 30/30": text.includes("step 30/30"), "saw the error": text.includes("1 test failed"), "exit code 2": code === 2 })

// ---- large output -----------------------------------------------------------------------------------
const large = "seq 1 200000"
const largeOk = (text, code, cut) => check({ "last line": /(^|\n)200000\n/.test(text), "exit code 0": code === 0, "says it was cut": cut })

export const tasks = [
  {
    name: "one-shot commands (3)",
    async kilntainers(a) {
      const seen = []
      for (const step of oneShot) {
        const r = structured(await a.call("spawn", { command: step.command }))
        seen.push({ stdout: r.stdout, stderr: r.stderr, code: r.exitCode })
      }
      return oneShotOk(seen)
    },
    async "process-mcp"(a) {
      const seen = []
      for (const step of oneShot) {
        const r = pmJson(await a.call("spawn", { command: step.command }))
        seen.push({ stdout: r.stdout, stderr: r.stderr, code: r.exitCode })
      }
      return oneShotOk(seen)
    },
    async DesktopCommander(a) {
      const seen = []
      for (const step of oneShot) {
        const { code, text } = await dcRun(a, step.command, 5000)
        // One stream: stdout and stderr together.
        seen.push({ stdout: text, stderr: text, code })
      }
      return oneShotOk(seen)
    }
  },
  {
    name: "web server: start, ready, curl, log, stop",
    async kilntainers(a) {
      await a.sh(webSetup(8701))
      const started = structured(await a.call("spawn", { command: serve(8701), pattern: "Serving HTTP" }))
      const got = structured(await a.call("spawn", { command: curl(8701) }))
      // kill returns the output no earlier result showed: the request log.
      const killed = structured(await a.call("kill", { id: started.pid }))
      return check({
        ready: started.match !== undefined && started.status === "running",
        "curl body": got.stdout?.includes(page),
        "log has the GET": `${killed.stdout ?? ""}${killed.stderr ?? ""}`.includes("GET /index.html"),
        stopped: killed.status === "terminated"
      })
    },
    async "process-mcp"(a) {
      await a.sh(webSetup(8702))
      // No readiness wait: a spawn with a short timeout returns the output so far; poll until ready.
      let started = pmJson(await a.call("spawn", { command: serve(8702), timeoutMs: 1000 }))
      for (let i = 0; i < 10 && !`${started.stdout}`.includes("Serving HTTP"); i++) {
        started = { ...pmJson(await a.call("stdout", { id: started.pid })), pid: started.pid }
      }
      const got = pmJson(await a.call("spawn", { command: curl(8702) }))
      const log = textOf(await a.call("stdout", { id: started.pid }))
      await a.call("kill", { id: started.pid })
      await sleep(500)
      const ps = JSON.parse(textOf(await a.quiet("ps", {})))
      const outcome = check({
        ready: `${started.stdout}`.includes("Serving HTTP"),
        "curl body": `${got.stdout}`.includes(page),
        "log has the GET": log.includes("GET /index.html"),
        stopped: ps.find((p) => p.pid === started.pid)?.status === "terminated"
      })
      // Its host sandbox (srt) gives every command a network namespace of its own.
      return got.exitCode === 7 ? { ...outcome, note: `${outcome.note} (curl: ${got.stderr.trim()})` } : outcome
    },
    async DesktopCommander(a) {
      await a.sh(webSetup(8703))
      // start_process returns after timeout_ms (or on a prompt) with the output so far.
      const startedText = textOf(await a.call("start_process", { command: serve(8703), timeout_ms: 1500 }))
      const pid = dcPid({ content: [{ type: "text", text: startedText }] })
      let ready = startedText.includes("Serving HTTP")
      for (let i = 0; i < 10 && !ready; i++) {
        ready = textOf(await a.call("read_process_output", { pid, timeout_ms: 1000 })).includes("Serving HTTP")
      }
      const got = textOf(await a.call("start_process", { command: curl(8703), timeout_ms: 5000 }))
      const log = textOf(await a.call("read_process_output", { pid, timeout_ms: 1000 }))
      await a.call("force_terminate", { pid })
      await sleep(500)
      const alive = await a.sh(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)
      return check({ ready, "curl body": got.includes(page), "log has the GET": log.includes("GET /index.html"), stopped: alive.stdout.includes("gone") })
    }
  },
  {
    name: "Python REPL: x = 6*7, print(x*2), quit",
    async kilntainers(a) {
      // spawn's input is typed at start; the call returns at the REPL's exit.
      const last = structured(await a.call("spawn", { command: repl, input: replLines.join("\\n") + "\\n" }))
      return check({ "printed 84": last.stdout?.includes("84"), "exited 0": last.status === "terminated" && last.exitCode === 0 })
    },
    async "process-mcp"(a) {
      // Its stdin takes "TTY" processes only (pipes into a headless xterm, so \n ends a line);
      // stdin answers "Input sent successfully", stdout reads.
      // All three lines in one stdin (its fewest calls): stdout then reads the answer.
      const started = pmJson(await a.call("spawn", { command: repl, tty: true, background: true }))
      await a.call("stdin", { id: started.pid, input: replLines.join("\\n") + "\\n" })
      await sleep(600)
      const out = pmJson(await a.call("stdout", { id: started.pid }))
      const ps = JSON.parse(textOf(await a.quiet("ps", {})))
      const entry = ps.find((p) => p.pid === started.pid)
      return check({ "printed 84": `${out.stdout}`.includes("84"), "exited 0": entry?.status === "terminated" && entry?.exitCode === 0 })
    },
    async DesktopCommander(a) {
      // Both statements in one interaction; exit() apart: with it in the same input, the 84 was lost
      // in one of three runs (the process ends before its output is read).
      const pid = dcPid(await a.call("start_process", { command: repl, timeout_ms: 5000 }))
      const out = textOf(await a.call("interact_with_process", { pid, input: replLines.slice(0, 2).join("\n"), timeout_ms: 5000 }))
      await a.call("interact_with_process", { pid, input: replLines[2], timeout_ms: 2000 })
      await sleep(300)
      const alive = await a.sh(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)
      return check({ "printed 84": out.includes("84"), exited: alive.stdout.includes("gone") })
    }
  },
  {
    name: "vim: append \" world\" to a line, save, quit",
    async kilntainers(a) {
      await a.sh(`printf 'hello\\n' > ${vimFile}`)
      // The keys go in spawn's input, typed once the pattern shows vim drew the file.
      const input = vimKeys.replace("\x1b", "\\e").replace("\r", "\\r")
      const after = structured(await a.call("spawn", { command: `vim ${vimFile}`, tty: true, pattern: vimFile, input }))
      // vim may still be leaving (as for the peers, the harness checks).
      const ended = after.status === "terminated" || structured(await a.quiet("wait", { id: after.pid, timeoutMs: 2000 })).status === "terminated"
      const file = await a.sh(`cat ${vimFile}`)
      return check({ "file edited": file.stdout === vimExpected, "vim exited": ended })
    },
    async "process-mcp"(a) {
      // process-mcp's tty is pipes into a headless xterm: vim runs without a terminal.
      await a.sh(`printf 'hello\\n' > ${vimFile}`)
      const started = pmJson(await a.call("spawn", { command: `vim ${vimFile}`, tty: true, background: true }))
      await sleep(1000)
      await a.call("stdin", { id: started.pid, input: "A world\\x1b:wq\\r" })
      await sleep(1500)
      const ps = JSON.parse(textOf(await a.quiet("ps", {})))
      const file = await a.sh(`cat ${vimFile}`)
      const exited = ps.find((p) => p.pid === started.pid)?.status === "terminated"
      if (!exited) await a.quiet("kill", { id: started.pid, signal: "SIGKILL" })
      return { ...check({ "file edited": file.stdout === vimExpected, "vim exited": exited }), note: "no terminal (pipes)" }
    },
    async DesktopCommander(a) {
      // DesktopCommander runs commands on pipes: vim gets no terminal.
      await a.sh(`printf 'hello\\n' > ${vimFile}`)
      const pid = dcPid(await a.call("start_process", { command: `vim ${vimFile}`, timeout_ms: 2000 }))
      await a.call("interact_with_process", { pid, input: "A world\x1b:wq", timeout_ms: 2000 })
      await sleep(1000)
      const file = await a.sh(`cat ${vimFile}`)
      const alive = await a.sh(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)
      if (alive.stdout.includes("alive")) await a.quiet("force_terminate", { pid })
      return { ...check({ "file edited": file.stdout === vimExpected, "vim exited": alive.stdout.includes("gone") }), note: "no terminal (pipes)" }
    }
  },
  {
    name: "follow a 30 s build",
    async kilntainers(a) {
      await a.sh(buildSetup)
      const r = structured(await a.call("spawn", { command: "sh build.sh", timeoutMs: 45_000 }))
      return buildOk(`${r.stdout}${r.stderr}`, r.exitCode)
    },
    async "process-mcp"(a) {
      await a.sh(buildSetup)
      const r = pmJson(await a.call("spawn", { command: "sh build.sh", timeoutMs: 45_000 }))
      return buildOk(`${r.stdout}${r.stderr}`, r.exitCode)
    },
    async DesktopCommander(a) {
      await a.sh(buildSetup)
      const { code, text } = await dcRun(a, "sh build.sh", 45_000)
      return buildOk(text, code)
    }
  },
  {
    name: "large output (seq 1 200000)",
    async kilntainers(a) {
      const r = structured(await a.call("spawn", { command: large }))
      return largeOk(r.stdout, r.exitCode, /bytes omitted/.test(r.stdout) && r.next !== undefined)
    },
    async "process-mcp"(a) {
      const r = pmJson(await a.call("spawn", { command: large }))
      return largeOk(`${r.stdout}\n`, r.exitCode, /truncated/.test(r.stdout))
    },
    async DesktopCommander(a) {
      const { code, text } = await dcRun(a, large, 10_000)
      return largeOk(text, code, /truncated|omitted|remaining/i.test(text))
    }
  }
]
