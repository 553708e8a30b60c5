/**
 * The process tools: process-mcp's spawn, ps, stdin, stdout and kill (their result fields, with
 * process-mcp's meaning), wait, and Kilntainers' sandbox_exec. Each decodes its input, calls one
 * Processes method with the calling session, and returns what it answers.
 *
 * Every agent reads the input side of tools/list (names, descriptions, input schemas) in every
 * conversation, so it says what a model must know once: a tool's description carries what its
 * fields mean, shared fields (id, computer_id, maxBytes) are explained where they first matter, and a
 * field whose name and type say it has no description (test/layers/mcp/ToolSurface.test.ts keeps the
 * whole under its budget and checks that the facts an agent needs are there). Results describe every
 * field: output schemas are outside that budget.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { ProcessInfo, ProcessStatus } from "../../domain/Process.js"
import { Processes } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as Tool from "./Tool.js"

const described = <S extends Schema.Schema<any, any, never>>(schema: S, description: string): S =>
  schema.annotations({ description }) as S
const Int = (min: number, max?: number) =>
  max === undefined ? Schema.Number.pipe(Schema.int(), Schema.greaterThanOrEqualTo(min)) : Schema.Number.pipe(Schema.int(), Schema.between(min, max))
const Text = (description: string) => described(Schema.String, description)
const Flag = (description: string) => described(Schema.Boolean, description)

// ---- input fields: described where a model needs it, once -----------------------------------------
const Env = Schema.Record({ key: Schema.String, value: Schema.String })
/** Where a process starts: computer_id and temporary, described once, in sandbox_exec and spawn. */
const ComputerFields = {
  computer_id: Schema.optional(Text("Omit: this session's computer")),
  temporary: Schema.optional(Flag("false: keep it after this session"))
}
const Id = Schema.String
const OnComputer = Schema.optional(Schema.String)
const MaxBytes = Schema.optional(Int(1))

// ---- result fields, in one place for every tool --------------------------------------------------
const State = {
  pid: Text("The process handle that spawn returned (ps lists them)"),
  status: described(ProcessStatus, "running, or terminated (see exitCode / signal)"),
  exitCode: Schema.optional(described(Schema.Number, "Exit code, when it exited by itself")),
  signal: Schema.optional(Text("The signal that ended it")),
  reason: Schema.optional(Text("Why it ended, when it did not simply exit"))
}
const Cursors = Schema.Struct({
  stdout: described(Schema.Number, "Pass as stdoutCursor"),
  stderr: described(Schema.Number, "Pass as stderrCursor")
})
const Output = {
  stdout: Text("stdout (a TTY: its rendered screen); bytes left out are marked [… N bytes omitted …]"),
  stderr: Text("stderr"),
  next: Schema.optional(described(Cursors, "Cursors to read what follows (present while it runs or when output was cut; not for a TTY, whose stdout is its screen)")),
  omitted: Schema.optional(described(
    Schema.Struct({ stdout: Schema.optional(Schema.Number), stderr: Schema.optional(Schema.Number) }),
    "Bytes left out of this result, per stream"
  )),
  screen: Schema.optional(described(
    Schema.Struct({
      cursor: Schema.Struct({ x: Schema.Number, y: Schema.Number }),
      cols: Schema.Number,
      rows: Schema.Number,
      alternateScreen: Schema.optional(Schema.Literal(true)),
      scrollback: Schema.optional(Text("Lines that scrolled off the screen"))
    }),
    "TTY: the terminal (cursor, size, alternate screen of a full-screen app)"
  ))
}
const Note = Schema.optional(Text("Something to know about this call (a capped wait)"))

const annotations = Tool.annotations

const execDescription = (settings: SettingsShape) => {
  const base = settings.toolInstructionOverride ??
    `Execute a shell command in an isolated Linux sandbox computer. Commands run in ${settings.shell}. Each call is ` +
      `independent: files persist (home /home/agent), shell state does not. To write a file, pass it as stdin ` +
      `(command="cat > f"); args: argv, no shell. Commands time out after ${settings.timeout} seconds by default ` +
      `(timeout, in s): the tree is killed, exit_code 124, output kept; over ${settings.outputLimit} output bytes, ` +
      `exit_code 1. Long output keeps head and tail (stdout with pid, next: the rest). Network ` +
      `${settings.network ? "enabled" : "disabled"}. Long-running or interactive: spawn.`
  return settings.extendedToolInstruction ? `${base}\n\n${settings.extendedToolInstruction}` : base
}

/** The process tools of process-mcp (spawn, ps, stdin, stdout, kill), wait, and Kilntainers' sandbox_exec. */
export const make = (settings: SettingsShape) => [
  Tool.make({
    name: "spawn",
    description: `Start a command (${settings.shell} -c). Returns when it exits, its output matches pattern (RE2) or ` +
      `timeoutMs passes (default ${settings.spawnTimeoutMs}); it runs on, its pid the id for stdin, stdout, wait, kill. ` +
      `background=true returns at once. tty=true: a terminal (vim, a REPL; default ${settings.cols}x${settings.rows}), ` +
      `stdout its screen. Output past maxBytes (default ${settings.inlineBytes}) keeps head and tail.`,
    input: Schema.Struct({
      command: Schema.String,
      cwd: Schema.optional(Schema.String),
      env: Schema.optional(Env),
      tty: Schema.optional(Schema.Boolean),
      background: Schema.optional(Schema.Boolean),
      timeoutMs: Schema.optional(Int(0)),
      pattern: Schema.optional(Schema.String),
      cols: Schema.optional(Int(2, 1000)),
      rows: Schema.optional(Int(2, 1000)),
      maxBytes: MaxBytes,
      ...ComputerFields
    }),
    output: Schema.Struct({
      ...State,
      ...Output,
      computer_id: Schema.optional(Text("The computer it runs on: the session's default, named once (ps lists every process's computer)")),
      match: Schema.optional(Text("What `pattern` matched")),
      note: Note
    }),
    annotations: annotations("Start a process", false, false, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.spawn(context.session, input, context.progress))
  }),
  Tool.make({
    name: "ps",
    description: `List processes: running, and the last ${settings.psFinished} finished (status, limit: more).`,
    input: Schema.Struct({
      computer_id: OnComputer,
      status: Schema.optional(Schema.Literal("running", "terminated", "all")),
      limit: Schema.optional(Int(1))
    }),
    output: Schema.Struct({
      processes: Schema.Array(ProcessInfo),
      hidden: Schema.optional(described(Schema.Number, "Processes not listed (ask with status or limit)"))
    }),
    annotations: annotations("List processes", true, false, true),
    // process-mcp's clients read the text as the list itself.
    text: (result) => result.processes,
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.list(context.session, input))
  }),
  Tool.make({
    name: "stdin",
    description: "Write to a process's stdin; returns what follows once output pauses (at most yieldMs, " +
      `default ${settings.stdinYieldMs}; a terminal: its screen). Escapes: \\n \\r \\t \\e \\\\ \\0 ` +
      "\\xHH (\\x03: Ctrl-C) \\uHHHH. eof=true then closes it (a terminal: Ctrl-D).",
    input: Schema.Struct({
      id: Id,
      input: Schema.optionalWith(Schema.String, { default: () => "" }),
      eof: Schema.optional(Schema.Boolean),
      yieldMs: Schema.optional(Int(0)),
      maxBytes: MaxBytes,
      computer_id: OnComputer
    }),
    output: Schema.Struct({
      ...State,
      bytes: described(Schema.Number, "Bytes written"),
      eof: Schema.optional(Schema.Literal(true)),
      ...Output
    }),
    annotations: annotations("Send input", false, false, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.stdin(context.session, input))
  }),
  Tool.make({
    name: "stdout",
    description: "A process's output: the last lines (default 100), or from cursors (an earlier result's next). A " +
      "terminal: its screen (scrollback=true: and above).",
    input: Schema.Struct({
      id: Id,
      lines: Schema.optional(Int(1, 100_000)),
      stdoutCursor: Schema.optional(Int(0)),
      stderrCursor: Schema.optional(Int(0)),
      maxBytes: MaxBytes,
      scrollback: Schema.optional(Schema.Boolean),
      computer_id: OnComputer
    }),
    output: Schema.Struct({ ...State, ...Output }),
    annotations: annotations("Read output", true, false, true),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.read(context.session, input))
  }),
  Tool.make({
    name: "kill",
    description: "Signal a process group (default SIGTERM; a name or number); SIGKILL ends the whole tree.",
    input: Schema.Struct({
      id: Id,
      signal: Schema.optional(Schema.String),
      computer_id: OnComputer
    }),
    output: Schema.Struct({
      ...State,
      sent: Text("The signal sent"),
      descendantsKilled: Schema.optional(described(Schema.Number, "Other processes of its tree that ended with it")),
      message: Text("What happened, in words")
    }),
    annotations: annotations("Signal a process", false, true, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.kill(context.session, input))
  }),
  Tool.make({
    name: "wait",
    description: "Wait until a process exits, its output matches pattern (RE2) or is quiet for quietMs, at most " +
      `timeoutMs (default 30000; ${settings.maxCallMs} without progress token); returns the output meanwhile.`,
    input: Schema.Struct({
      id: Id,
      pattern: Schema.optional(Schema.String),
      quietMs: Schema.optional(Int(1)),
      timeoutMs: Schema.optional(Int(0)),
      maxBytes: MaxBytes,
      computer_id: OnComputer
    }),
    output: Schema.Struct({
      ...State,
      outcome: described(Schema.Literal("exited", "matched", "quiet", "timeout"), "Why the wait ended"),
      match: Schema.optional(Text("What `pattern` matched")),
      waitedMs: described(Schema.Number, "How long it waited"),
      ...Output,
      note: Note
    }),
    annotations: annotations("Wait for a process", true, false, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.wait(context.session, input, context.progress))
  }),
  Tool.make({
    name: "sandbox_exec",
    description: execDescription(settings),
    input: Schema.Struct({
      command: Schema.optional(Schema.String),
      args: Schema.optional(Schema.Array(Schema.String)),
      stdin: Schema.optional(Schema.String),
      working_directory: Schema.optional(Schema.String),
      timeout: Schema.optional(Schema.Number.pipe(Schema.greaterThanOrEqualTo(1))),
      env: Schema.optional(Env),
      ...ComputerFields
    }),
    output: Schema.Struct({
      stdout: Text("stdout (head and tail when long)"),
      stderr: Text("stderr, with kilntainers' notes in [brackets]"),
      exit_code: described(Schema.NullOr(Schema.Number), "Exit code (124: timed out; 1 with output_limit_exceeded; null: still running, see pid)"),
      exec_duration_ms: Schema.Number,
      computer_id: Schema.String,
      temporary: Schema.Boolean,
      timed_out: Schema.optional(Schema.Literal(true)),
      output_limit_exceeded: Schema.optional(Schema.Literal(true)),
      truncated: Schema.optional(Schema.Literal(true)),
      stdout_bytes: Schema.optional(described(Schema.Number, "Whole stdout size, when cut")),
      stderr_bytes: Schema.optional(described(Schema.Number, "Whole stderr size, when cut")),
      pid: Schema.optional(Text("Process handle: stdout reads the rest of cut output, wait follows a command still running")),
      running: Schema.optional(Schema.Literal(true)),
      next: Schema.optional(Cursors),
      note: Note
    }),
    annotations: annotations("Run a command", false, true, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.exec(context.session, input, context.progress))
  })
]
