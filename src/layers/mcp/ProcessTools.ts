/**
 * The process tools: process-mcp's spawn, ps, stdin, stdout and kill (their result fields, with
 * process-mcp's meaning), wait, and Kilntainers' sandbox_exec. Each takes its input Schema from the
 * service (`services/ProcessInputs.ts`, every check there) with words for clients, calls one
 * Processes method with the calling session and the decoded input, and returns what it answers.
 *
 * Every agent reads the input side of tools/list (names, descriptions, input schemas) in every
 * conversation, so it says what a model must know once: a tool's description carries what its
 * arguments mean, and an argument whose name and type say it has no description of its own
 * (test/layers/mcp/ToolSurface.test.ts keeps the whole under its budget and checks that the facts an
 * agent needs are there). Results describe every field: output schemas are outside that budget.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import type { ProcessError } from "../../domain/Errors.js"
import { ProcessInfo, ProcessStatus } from "../../domain/Process.js"
import { ExecInput, KillInput, ListFilter, ReadInput, SpawnInput, StdinInput, WaitInput } from "../../services/ProcessInputs.js"
import { Processes, type ProgressReporter } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import { KILL_OUTPUT_BYTES } from "../processes/Output.js"
import { TTY_YIELD_MS } from "../processes/Waiting.js"
import * as Tool from "./Tool.js"

const described = <S extends Schema.Schema<any, any, never>>(schema: S, description: string): S =>
  schema.annotations({ description }) as S
const Text = (description: string) => described(Schema.String, description)

/** Where a process starts: said once, on the two tools that start one. */
const computerText = {
  computer_id: "Omit: the session's",
  temporary: "false: keep it past the session"
}
const Pid = Text("The process handle that spawn returned (ps lists them)")
/** A tool's one service call: a Processes method with the calling session (and, for those that wait, its progress). */
const calling = <I, O>(
  method: (processes: Processes["Type"]) => (session: string, input: I, progress?: ProgressReporter) => Effect.Effect<O, ProcessError>
) =>
(input: I, context: Tool.ToolContext) => Effect.flatMap(Processes, (processes) => method(processes)(context.session, input, context.progress))

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
const Note = Schema.optional(Text("Something to know about this call (a capped wait, a pattern not seen, a person driving the terminal)"))
const Refused = Schema.optional(described(
  Schema.Array(Schema.Struct({ host: Schema.String, port: Schema.Number, reason: Text("Why, and the --allow-host that would allow it") })),
  "Network requests of this computer the egress allowlist refused during the call (stdout: since the process started)"
))

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
      `timeoutMs passes (default ${settings.spawnTimeoutMs}); it runs on; pid is its id. ` +
      `background=true: at once. tty=true: a terminal (vim, a REPL), ` +
      `stdout its screen. input: stdin text typed at start or after pattern (then returns as stdin). ` +
      `Past maxBytes (default ${settings.inlineBytes}) output keeps head and tail.`,
    input: Tool.described(SpawnInput, computerText),
    output: Schema.Struct({
      ...State,
      ...Output,
      computer_id: Schema.optional(Text("The computer it runs on: the session's default, named once (ps lists every process's computer)")),
      match: Schema.optional(Text("What `pattern` matched")),
      egress_refused: Refused,
      note: Note
    }),
    annotations: Tool.annotations("Start a process", false, false, false),
    handle: calling((processes) => processes.spawn)
  }),
  Tool.make({
    name: "ps",
    description: `List processes: running and the last ${settings.psFinished} finished (status, limit: more).`,
    input: ListFilter,
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
    description: "Write to a process's stdin; returns what follows once output pauses (at most yieldMs: " +
      `${settings.stdinYieldMs}; a terminal: ${Math.max(settings.stdinYieldMs, TTY_YIELD_MS)}, its screen). Escapes: \\n \\r \\t \\e \\\\ \\0 ` +
      "\\xHH (\\x03: Ctrl-C) \\uHHHH. eof=true then closes it (a terminal: Ctrl-D).",
    input: StdinInput,
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
    description: "A process's output: its last lines (default 100), or from cursors (a result's next). A " +
      "terminal: its screen (scrollback=true: and above).",
    input: ReadInput,
    output: Schema.Struct({ ...State, ...Output, egress_refused: Refused, note: Note }),
    annotations: Tool.annotations("Read output", true, false, true),
    handle: calling((processes) => processes.read)
  }),
  Tool.make({
    name: "kill",
    description: "Signal a process group (default SIGTERM; a name or number); SIGKILL ends the whole tree. " +
      "Returns unseen output.",
    input: KillInput,
    output: Schema.Struct({
      ...State,
      sent: Text("The signal sent"),
      descendantsKilled: Schema.optional(described(Schema.Number, "Other processes of its tree that ended with it")),
      message: Text("What happened, in words"),
      stdout: Schema.optional(Text(`Output no earlier result showed (pipes), at most ${KILL_OUTPUT_BYTES} bytes (head and tail)`)),
      stderr: Schema.optional(Text("The same for stderr")),
      omitted: Output.omitted,
      next: Output.next
    }),
    annotations: Tool.annotations("Signal a process", false, true, false),
    handle: calling((processes) => processes.kill)
  }),
  Tool.make({
    name: "wait",
    description: "Wait until a process exits, its output matches pattern (RE2) or is quiet for quietMs, at most " +
      `timeoutMs (default 30000; ${settings.maxCallMs} without progress token); returns output meanwhile.`,
    input: WaitInput,
    output: Schema.Struct({
      ...State,
      outcome: described(Schema.Literal("exited", "matched", "quiet", "timeout"), "Why the wait ended"),
      match: Schema.optional(Text("What `pattern` matched")),
      waitedMs: described(Schema.Number, "How long it waited"),
      ...Output,
      egress_refused: Refused,
      note: Note
    }),
    annotations: Tool.annotations("Wait for a process", true, false, false),
    handle: calling((processes) => processes.wait)
  }),
  Tool.make({
    name: "sandbox_exec",
    description: execDescription(settings),
    input: Tool.described(ExecInput, computerText),
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
      egress_refused: Refused,
      note: Note
    }),
    annotations: Tool.annotations("Run a command", false, true, false),
    handle: calling((processes) => processes.exec)
  })
]
