/**
 * The process tools: process-mcp's spawn, ps, stdin, stdout and kill (their result fields, with
 * process-mcp's meaning), wait, and Kilntainers' sandbox_exec. Each takes its input Schema from the
 * service (`services/ProcessInputs.ts`, every check there) with words for clients, calls one
 * Processes method with the calling session and the decoded input, and returns what it answers.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { describeEscapes } from "../../domain/StdinEscapes.js"
import { envNameRule } from "../../domain/Environment.js"
import type { ProcessError } from "../../domain/Errors.js"
import { ProcessInfo, ProcessStatus } from "../../domain/Process.js"
import { ExecInput, KillInput, ListFilter, ReadInput, SpawnInput, StdinInput, WaitInput } from "../../services/ProcessInputs.js"
import { Processes, type ProgressReporter } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as Tool from "./Tool.js"

const described = <S extends Schema.Schema<any, any, never>>(schema: S, description: string): S =>
  schema.annotations({ description }) as S
const Text = (description: string) => described(Schema.String, description)

const envText = `Environment variables for this process, on top of the computer's minimal environment (${envNameRule})`
const computerText = {
  computer_id: "Computer slug (1-63 of a-z, 0-9, '-'); omit for this session's default computer",
  temporary: "Remove the computer when this session ends (default true); false keeps it, reachable by id"
}
const pidText = "The process handle that spawn returned (ps lists them)"
const Pid = Text(pidText)
/** The words for the process every call after spawn names. */
const refText = { id: pidText, computer_id: "The process's computer (optional; checked when given)" }
/** A tool's one service call: a Processes method with the calling session (and, for those that wait, its progress). */
const calling = <I, O>(
  method: (processes: Processes["Type"]) => (session: string, input: I, progress?: ProgressReporter) => Effect.Effect<O, ProcessError>
) =>
(input: I, context: Tool.ToolContext) => Effect.flatMap(Processes, (processes) => method(processes)(context.session, input, context.progress))

const maxBytesText = (settings: SettingsShape) =>
  `Most output bytes inline, both streams together (default ${settings.inlineBytes}); longer output keeps head and tail`

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
    input: Tool.described(SpawnInput, {
      command: `Shell command line, run with ${settings.shell} -c`,
      cwd: "Working directory (default the computer's home, /home/agent)",
      env: envText,
      tty: "Run on a real terminal",
      background: "Return at once; the process runs in the background",
      timeoutMs: `Longest wait before returning with the process still running (default ${settings.spawnTimeoutMs}; at most ${settings.maxCallMs} without a progress token)`,
      pattern: "Return as soon as the output matches this regular expression (a ready line)",
      cols: `Terminal columns (tty, default ${settings.cols})`,
      rows: `Terminal rows (tty, default ${settings.rows})`,
      maxBytes: maxBytesText(settings),
      ...computerText
    }),
    output: Schema.Struct({
      ...State,
      ...Output,
      computer_id: Schema.optional(Text("The computer it runs on: the session's default, named once (ps lists every process's computer)")),
      match: Schema.optional(Text("What `pattern` matched")),
      note: Note
    }),
    annotations: Tool.annotations("Start a process", false, false, false),
    handle: calling((processes) => processes.spawn)
  }),
  Tool.make({
    name: "ps",
    description: `List processes: the running ones and the ${settings.psFinished} most recently finished (status and limit show more).`,
    input: Tool.described(ListFilter, {
      computer_id: "Only this computer's processes",
      status: "Only these (default: running plus the last few finished)",
      limit: "Most processes to list"
    }),
    output: Schema.Struct({
      processes: Schema.Array(ProcessInfo),
      hidden: Schema.optional(described(Schema.Number, "Processes not listed (ask with status or limit)"))
    }),
    annotations: Tool.annotations("List processes", true, false, true),
    // process-mcp's clients read the text as the list itself.
    text: (result) => result.processes,
    handle: calling((processes) => processes.list)
  }),
  Tool.make({
    name: "stdin",
    description: `Send input to a process (a TTY or a pipe) and get the output that follows (or the settled screen). ${describeEscapes} ` +
      "eof=true closes stdin (a pipe) or sends Ctrl-D (a TTY) after the input.",
    input: Tool.described(StdinInput, {
      ...refText,
      input: "Text to send, with escapes",
      eof: "Close stdin after the input",
      yieldMs: `Longest wait for the output that follows (default ${settings.stdinYieldMs}; it returns once output pauses)`,
      maxBytes: maxBytesText(settings)
    }),
    output: Schema.Struct({
      ...State,
      bytes: described(Schema.Number, "Bytes written"),
      eof: Schema.optional(Schema.Literal(true)),
      ...Output
    }),
    annotations: Tool.annotations("Send input", false, false, false),
    handle: calling((processes) => processes.stdin)
  }),
  Tool.make({
    name: "stdout",
    description: "View a process's output: its last `lines` lines (default 100), or what came since the cursors of an " +
      "earlier result (stdoutCursor/stderrCursor = its `next`). A TTY process: the rendered screen (and scrollback if asked).",
    input: Tool.described(ReadInput, {
      ...refText,
      lines: "Last N lines (default 100 when no cursor is given)",
      stdoutCursor: "Read stdout from this byte offset",
      stderrCursor: "Read stderr from this byte offset",
      maxBytes: maxBytesText(settings),
      scrollback: "TTY: also the lines that scrolled off the screen"
    }),
    output: Schema.Struct({ ...State, ...Output }),
    annotations: Tool.annotations("Read output", true, false, true),
    handle: calling((processes) => processes.read)
  }),
  Tool.make({
    name: "kill",
    description: "Send a signal to a process and its whole process group (default SIGTERM; also SIGKILL, SIGINT, SIGHUP, … " +
      "or a number). SIGKILL ends its whole tree, background and setsid children included. Reports how it stands after.",
    input: Tool.described(KillInput, {
      ...refText,
      signal: "Signal name or number (default SIGTERM)"
    }),
    output: Schema.Struct({
      ...State,
      sent: Text("The signal sent"),
      descendantsKilled: Schema.optional(described(Schema.Number, "Other processes of its tree that ended with it")),
      message: Text("What happened, in words")
    }),
    annotations: Tool.annotations("Signal a process", false, true, false),
    handle: calling((processes) => processes.kill)
  }),
  Tool.make({
    name: "wait",
    description: "Wait for a process until it exits (default), its output matches `pattern`, or it is quiet for `quietMs` — " +
      `bounded by timeoutMs (default 30000; at most ${settings.maxCallMs} without a progress token). Returns the output that ` +
      "arrived meanwhile. Cancelling the call ends the wait, not the process.",
    input: Tool.described(WaitInput, {
      ...refText,
      pattern: "Regular expression to look for in the output",
      quietMs: "Return once no output came for this long",
      timeoutMs: "Longest wait in ms",
      maxBytes: maxBytesText(settings)
    }),
    output: Schema.Struct({
      ...State,
      outcome: described(Schema.Literal("exited", "matched", "quiet", "timeout"), "Why the wait ended"),
      match: Schema.optional(Text("What `pattern` matched")),
      waitedMs: described(Schema.Number, "How long it waited"),
      ...Output,
      note: Note
    }),
    annotations: Tool.annotations("Wait for a process", true, false, false),
    handle: calling((processes) => processes.wait)
  }),
  Tool.make({
    name: "sandbox_exec",
    description: execDescription(settings),
    input: Tool.described(ExecInput, {
      command: `Shell command line, run with ${settings.shell} -c`,
      args: "argv to run without a shell (instead of command)",
      stdin: "Text piped to the command's stdin, then EOF",
      working_directory: "Absolute working directory (default /home/agent)",
      timeout: `Seconds before the command is killed (default ${settings.timeout})`,
      env: envText,
      ...computerText
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
    annotations: Tool.annotations("Run a command", false, true, false),
    handle: calling((processes) => processes.exec)
  })
]
