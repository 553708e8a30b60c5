/**
 * The process tools: process-mcp's spawn, ps, stdin, stdout and kill (their result fields, with
 * process-mcp's meaning), wait, and Kilntainers' sandbox_exec. Each decodes its input, calls one
 * Processes method with the calling session, and returns what it answers.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { describeEscapes } from "../../actors/StdinEscapes.js"
import { envNameRule } from "../../domain/Environment.js"
import { ProcessInfo, ProcessStatus } from "../../domain/Process.js"
import { Processes } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as Tool from "./Tool.js"

const described = <S extends Schema.Schema<any, any, never>>(schema: S, description: string): S =>
  schema.annotations({ description }) as S
const Int = (description: string, min: number, max?: number) =>
  described(
    max === undefined
      ? Schema.Number.pipe(Schema.int(), Schema.greaterThanOrEqualTo(min))
      : Schema.Number.pipe(Schema.int(), Schema.between(min, max)),
    description
  )
const Text = (description: string) => described(Schema.String, description)
const Flag = (description: string) => described(Schema.Boolean, description)

const Env = described(
  Schema.Record({ key: Schema.String, value: Schema.String }),
  `Environment variables for this process, on top of the computer's minimal environment (${envNameRule})`
)
const ComputerFields = {
  computer_id: Schema.optional(Text("Computer slug (1-63 of a-z, 0-9, '-'); omit for this session's default computer")),
  temporary: Schema.optional(Flag("Remove the computer when this session ends (default true); false keeps it, reachable by id"))
}
const Pid = Text("The process handle that spawn returned (ps lists them)")
const OnComputer = Schema.optional(Text("The process's computer (optional; checked when given)"))
const MaxBytes = (settings: SettingsShape) =>
  Schema.optional(Int(`Most output bytes inline, both streams together (default ${settings.inlineBytes}); longer output keeps head and tail`, 1))

// ---- result fields, in one place for every tool --------------------------------------------------
const State = {
  pid: Pid,
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

const annotations = (title: string, readOnly: boolean, destructive: boolean, idempotent: boolean): Tool.ToolAnnotations => ({
  title,
  readOnlyHint: readOnly,
  destructiveHint: destructive,
  idempotentHint: idempotent,
  openWorldHint: false
})

const execDescription = (settings: SettingsShape) => {
  const base = settings.toolInstructionOverride ??
    `Execute a shell command in an isolated Linux sandbox computer. Commands run in ${settings.shell}. ` +
      `Each call is independent: no state (shell variables, working directory) persists between calls, but the ` +
      `filesystem does persist (home directory /home/agent). To write a file, pass its content as stdin ` +
      `(e.g. command="cat > file.txt"). Use args instead of command to run a program without a shell. ` +
      `Commands time out after ${settings.timeout} seconds by default (set timeout in seconds); on timeout the ` +
      `whole process tree is killed, exit_code is 124 and the output so far is returned. A command whose stdout ` +
      `and stderr together pass ${settings.outputLimit} bytes is stopped the same way (exit_code 1, "output limit ` +
      `exceeded"). Output over ${Math.min(settings.inlineBytes, settings.outputLimit)} bytes keeps its head and tail ` +
      `here (pid and next let stdout read the rest). ` +
      `Network access is ${settings.network ? "enabled" : "disabled"}. For long-running or interactive programs use spawn.`
  return settings.extendedToolInstruction ? `${base}\n\n${settings.extendedToolInstruction}` : base
}

/** The process tools of process-mcp (spawn, ps, stdin, stdout, kill), wait, and Kilntainers' sandbox_exec. */
export const make = (settings: SettingsShape) => [
  Tool.make({
    name: "spawn",
    description: "Execute a command. It runs until it exits, its output matches `pattern`, or timeoutMs passes " +
      `(default ${settings.spawnTimeoutMs}); a process still running then moves to the background and keeps running — ` +
      "you get its pid and the output so far. background=true returns at once. tty=true gives a real terminal " +
      "(vim, less, a REPL, top): stdout is then the rendered screen.",
    input: Schema.Struct({
      command: Text(`Shell command line, run with ${settings.shell} -c`),
      cwd: Schema.optional(Text("Working directory (default the computer's home, /home/agent)")),
      env: Schema.optional(Env),
      tty: Schema.optional(Flag("Run on a real terminal")),
      background: Schema.optional(Flag("Return at once; the process runs in the background")),
      timeoutMs: Schema.optional(Int(
        `Longest wait before returning with the process still running (default ${settings.spawnTimeoutMs}; at most ${settings.maxCallMs} without a progress token)`,
        0
      )),
      pattern: Schema.optional(Text("Return as soon as the output matches this regular expression (a ready line)")),
      cols: Schema.optional(Int(`Terminal columns (tty, default ${settings.cols})`, 2, 1000)),
      rows: Schema.optional(Int(`Terminal rows (tty, default ${settings.rows})`, 2, 1000)),
      maxBytes: MaxBytes(settings),
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
    description: `List processes: the running ones and the ${settings.psFinished} most recently finished (status and limit show more).`,
    input: Schema.Struct({
      computer_id: Schema.optional(Text("Only this computer's processes")),
      status: Schema.optional(described(Schema.Literal("running", "terminated", "all"), "Only these (default: running plus the last few finished)")),
      limit: Schema.optional(Int("Most processes to list", 1))
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
    description: `Send input to a process (a TTY or a pipe) and get the output that follows (or the settled screen). ${describeEscapes} ` +
      "eof=true closes stdin (a pipe) or sends Ctrl-D (a TTY) after the input.",
    input: Schema.Struct({
      id: Pid,
      input: Schema.optionalWith(Text("Text to send, with escapes"), { default: () => "" }),
      eof: Schema.optional(Flag("Close stdin after the input")),
      yieldMs: Schema.optional(Int(`Longest wait for the output that follows (default ${settings.stdinYieldMs}; it returns once output pauses)`, 0)),
      maxBytes: MaxBytes(settings),
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
    description: "View a process's output: its last `lines` lines (default 100), or what came since the cursors of an " +
      "earlier result (stdoutCursor/stderrCursor = its `next`). A TTY process: the rendered screen (and scrollback if asked).",
    input: Schema.Struct({
      id: Pid,
      lines: Schema.optional(Int("Last N lines (default 100 when no cursor is given)", 1, 100_000)),
      stdoutCursor: Schema.optional(Int("Read stdout from this byte offset", 0)),
      stderrCursor: Schema.optional(Int("Read stderr from this byte offset", 0)),
      maxBytes: MaxBytes(settings),
      scrollback: Schema.optional(Flag("TTY: also the lines that scrolled off the screen")),
      computer_id: OnComputer
    }),
    output: Schema.Struct({ ...State, ...Output }),
    annotations: annotations("Read output", true, false, true),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.read(context.session, input))
  }),
  Tool.make({
    name: "kill",
    description: "Send a signal to a process and its whole process group (default SIGTERM; also SIGKILL, SIGINT, SIGHUP, … " +
      "or a number). SIGKILL ends its whole tree, background and setsid children included. Reports how it stands after.",
    input: Schema.Struct({
      id: Pid,
      signal: Schema.optional(Text("Signal name or number (default SIGTERM)")),
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
    description: "Wait for a process until it exits (default), its output matches `pattern`, or it is quiet for `quietMs` — " +
      `bounded by timeoutMs (default 30000; at most ${settings.maxCallMs} without a progress token). Returns the output that ` +
      "arrived meanwhile. Cancelling the call ends the wait, not the process.",
    input: Schema.Struct({
      id: Pid,
      pattern: Schema.optional(Text("Regular expression to look for in the output")),
      quietMs: Schema.optional(Int("Return once no output came for this long", 1)),
      timeoutMs: Schema.optional(Int("Longest wait in ms", 0)),
      maxBytes: MaxBytes(settings),
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
      command: Schema.optional(Text(`Shell command line, run with ${settings.shell} -c`)),
      args: Schema.optional(described(Schema.Array(Schema.String), "argv to run without a shell (instead of command)")),
      stdin: Schema.optional(Text("Text piped to the command's stdin, then EOF")),
      working_directory: Schema.optional(Text("Absolute working directory (default /home/agent)")),
      timeout: Schema.optional(described(Schema.Number.pipe(Schema.greaterThanOrEqualTo(1)), `Seconds before the command is killed (default ${settings.timeout})`)),
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
