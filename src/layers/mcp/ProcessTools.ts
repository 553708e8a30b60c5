import { Effect, Schema } from "effect"
import { describeEscapes } from "../../actors/StdinEscapes.js"
import { OutputView, ProcessInfo, ProcessStatus, ScreenView, StreamSlice } from "../../domain/Process.js"
import { InvalidInput, ProcessNotFound } from "../../domain/Errors.js"
import { Computers } from "../../services/Computers.js"
import { Processes } from "../../services/Processes.js"
import type { SettingsShape } from "../../services/Settings.js"
import * as Tool from "./Tool.js"

const Env = Schema.Record({ key: Schema.String, value: Schema.String }).annotations({
  description: "Environment variables to set for this process (added to the sandbox's minimal environment)"
})
const ComputerFields = {
  computer_id: Schema.optional(Schema.String.annotations({
    description: "Stable computer slug (1-63 of a-z, 0-9, '-'). Omit to use this MCP session's default computer."
  })),
  temporary: Schema.optional(Schema.Boolean.annotations({
    description: "Remove the computer when its MCP session ends (default true). Set false to keep it and reconnect by computer_id."
  }))
}
const Id = Schema.String.annotations({ description: "Process id, as returned by spawn or ps" })
const OnComputer = Schema.optional(Schema.String.annotations({
  description: "The computer the process runs on (optional; checked when given)"
}))

/**
 * A process is reachable from a session only on a computer that session may use (its own, shared
 * or permanent ones); a given computer_id must name the process's computer.
 */
const onComputer = (id: string, computerId: string | undefined, session: string) =>
  Effect.gen(function*() {
    const actor = yield* Effect.flatMap(Processes, (processes) => processes.get(id))
    const allowed = yield* Effect.flatMap(Computers, (computers) => computers.canAccess(session, actor.computerId))
    if (!allowed) return yield* new ProcessNotFound({ id })
    if (computerId !== undefined && actor.computerId !== computerId) {
      return yield* new InvalidInput({ message: `process '${id}' runs on computer '${actor.computerId}', not '${computerId}'` })
    }
  })

const Int = Schema.Number.pipe(Schema.int())
const NonNegativeInt = Int.pipe(Schema.greaterThanOrEqualTo(0))
const Size = Int.pipe(Schema.between(2, 1000))
const MaxBytes = Schema.optional(Int.pipe(Schema.between(1, 16 * 1024 * 1024)).annotations({
  description: "Most bytes of each stream to return inline (default 16384); longer output keeps its head and tail"
}))

const ProcessResult = Schema.Struct({
  id: Schema.String,
  pid: Schema.String.annotations({ description: "Same as id (process-mcp compatibility)" }),
  computer_id: Schema.String,
  status: ProcessStatus,
  exitCode: Schema.NullOr(Schema.Number),
  signal: Schema.NullOr(Schema.String),
  durationMs: Schema.Number,
  stdout: StreamSlice,
  stderr: StreamSlice,
  screen: Schema.optional(ScreenView)
})

const ReadResult = Schema.Struct({
  id: Schema.String,
  status: ProcessStatus,
  exitCode: Schema.NullOr(Schema.Number),
  signal: Schema.NullOr(Schema.String),
  ...OutputView.fields
})

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
      `whole process group is killed, exit_code is 124 and the output so far is returned. Output beyond ` +
      `${settings.outputLimit} bytes keeps its head and tail. Network access is ${settings.network ? "enabled" : "disabled"}. ` +
      `For long-running or interactive programs use spawn instead.`
  return settings.extendedToolInstruction ? `${base}\n\n${settings.extendedToolInstruction}` : base
}

/** The process tools of process-mcp (spawn, ps, stdin, stdout, kill), wait, and Kilntainers' sandbox_exec. */
export const make = (settings: SettingsShape) => [
  Tool.make({
    name: "spawn",
    description: "Execute a command with optional timeout. Processes exceeding the timeout automatically move to " +
      `the background and keep running (default timeoutMs ${settings.spawnTimeoutMs}, max ${settings.maxTimeoutMs}); ` +
      "use background=true to return at once. Returns the process id, its status (running/exited/killed), exit code " +
      "and the output so far with cursors for stdout. Use tty=true for interactive programs (vim, less, python REPL, " +
      "top): they get a real terminal (cols x rows, default 120x30) and stdout returns the rendered screen.",
    input: Schema.Struct({
      command: Schema.String.annotations({ description: `Shell command line, run with ${settings.shell} -c` }),
      cwd: Schema.optional(Schema.String.annotations({ description: "Working directory (default: the computer's home, /home/agent)" })),
      env: Schema.optional(Env),
      tty: Schema.optional(Schema.Boolean.annotations({ description: "Run in a real pseudo-terminal" })),
      background: Schema.optional(Schema.Boolean.annotations({ description: "Return immediately; the process runs in the background" })),
      timeoutMs: Schema.optional(NonNegativeInt.annotations({
        description: `How long to wait before returning with the process still running (default ${settings.spawnTimeoutMs}, capped at ${settings.maxTimeoutMs})`
      })),
      cols: Schema.optional(Size.annotations({ description: `Terminal columns (tty only, default ${settings.cols})` })),
      rows: Schema.optional(Size.annotations({ description: `Terminal rows (tty only, default ${settings.rows})` })),
      maxBytes: MaxBytes,
      ...ComputerFields
    }),
    output: ProcessResult,
    annotations: annotations("Start a process", false, false, false),
    handle: (input, context) =>
      Effect.flatMap(Processes, (processes) => processes.spawn(context.session, input, context.progress)).pipe(
        Effect.map((result) => ({ ...result, pid: result.id }))
      )
  }),
  Tool.make({
    name: "ps",
    description: "List running and recently finished processes (id, command, computer, cwd, tty, status, exit code, " +
      `signal, start and end times, and why it ended). The ${settings.maxFinished} most recent finished processes stay listed.`,
    input: Schema.Struct({
      computer_id: Schema.optional(Schema.String.annotations({ description: "Only this computer's processes" })),
      status: Schema.optional(ProcessStatus.annotations({ description: "Only processes with this status" }))
    }),
    output: Schema.Struct({ processes: Schema.Array(ProcessInfo) }),
    annotations: annotations("List processes", true, false, true),
    handle: (input, context) =>
      Effect.gen(function*() {
        const processes = yield* Processes
        const computers = yield* Computers
        const all = yield* processes.list(input)
        const visible = yield* Effect.filter(all, (info) => computers.canAccess(context.session, info.computer_id))
        return { processes: visible }
      })
  }),
  Tool.make({
    name: "stdin",
    description: `Send input to a process (TTY or pipe). ${describeEscapes} Set eof=true to close stdin ` +
      "(a pipe) or send Ctrl-D (a TTY) after the input. Read the result with stdout or wait.",
    input: Schema.Struct({
      id: Id,
      input: Schema.optionalWith(Schema.String.annotations({ description: "Text to send, with escapes" }), { default: () => "" }),
      eof: Schema.optionalWith(Schema.Boolean.annotations({ description: "Close stdin after the input" }), { default: () => false }),
      computer_id: OnComputer
    }),
    output: Schema.Struct({ id: Schema.String, bytes: Schema.Number, eof: Schema.Boolean }),
    annotations: annotations("Send input", false, false, false),
    handle: (input, context) =>
      onComputer(input.id, input.computer_id, context.session).pipe(
        Effect.zipRight(Effect.flatMap(Processes, (processes) => processes.stdin(input.id, input.input, input.eof)))
      )
  }),
  Tool.make({
    name: "stdout",
    description: "View process output. For a TTY process, returns the rendered terminal screen (and scrollback if " +
      "asked). Otherwise returns stdout and stderr: by default their last `lines` lines (default 100); pass " +
      "stdoutCursor/stderrCursor (the `next` of an earlier read) to get only what came since. Omitted bytes are " +
      "marked and counted.",
    input: Schema.Struct({
      id: Id,
      lines: Schema.optional((Int.pipe(Schema.between(1, 100_000))).annotations({ description: "Last N lines (default 100 when no cursor is given)" })),
      stdoutCursor: Schema.optional(NonNegativeInt.annotations({ description: "Read stdout from this byte offset" })),
      stderrCursor: Schema.optional(NonNegativeInt.annotations({ description: "Read stderr from this byte offset" })),
      maxBytes: MaxBytes,
      scrollback: Schema.optional(Schema.Boolean.annotations({ description: "TTY: include lines that scrolled off the screen" })),
      computer_id: OnComputer
    }),
    output: ReadResult,
    annotations: annotations("Read output", true, false, true),
    handle: (input, context) =>
      Effect.zipRight(onComputer(input.id, input.computer_id, context.session), Effect.flatMap(Processes, (processes) =>
        processes.read(input.id, {
          stdoutCursor: input.stdoutCursor,
          stderrCursor: input.stderrCursor,
          lines: input.lines ?? (input.stdoutCursor === undefined && input.stderrCursor === undefined ? 100 : undefined),
          maxBytes: input.maxBytes,
          scrollback: input.scrollback
        })))
  }),
  Tool.make({
    name: "kill",
    description: "Send a signal to a process and its whole process group (default SIGTERM; also SIGKILL, SIGINT, " +
      "SIGHUP, … or a number). Reports the process status shortly after.",
    input: Schema.Struct({
      id: Id,
      signal: Schema.optional(Schema.String.annotations({ description: "Signal name or number (default SIGTERM)" })),
      computer_id: OnComputer
    }),
    output: Schema.Struct({
      id: Schema.String,
      signal: Schema.String,
      status: ProcessStatus,
      exitCode: Schema.NullOr(Schema.Number),
      exitSignal: Schema.NullOr(Schema.String)
    }),
    annotations: annotations("Signal a process", false, true, false),
    handle: (input, context) =>
      Effect.zipRight(onComputer(input.id, input.computer_id, context.session), Effect.flatMap(Processes, (processes) => processes.kill(input.id, input.signal)))
  }),
  Tool.make({
    name: "wait",
    description: "Wait for a process: until it exits (default), until its output matches `pattern` (a regular " +
      "expression), or until it has been quiet (no output) for `quietMs` — whichever comes first, bounded by " +
      `timeoutMs (default 30000, max ${settings.maxTimeoutMs}). Cancelling the call ends the wait, not the process.`,
    input: Schema.Struct({
      id: Id,
      pattern: Schema.optional(Schema.String.annotations({ description: "Regular expression to look for in the output" })),
      quietMs: Schema.optional((Int.pipe(Schema.greaterThan(0))).annotations({ description: "Return once no output came for this long" })),
      timeoutMs: Schema.optional(NonNegativeInt.annotations({ description: "Longest wait in ms" })),
      computer_id: OnComputer
    }),
    output: Schema.Struct({
      id: Schema.String,
      reason: Schema.Literal("exited", "matched", "quiet", "timeout"),
      status: ProcessStatus,
      exitCode: Schema.NullOr(Schema.Number),
      signal: Schema.NullOr(Schema.String),
      match: Schema.optional(Schema.String),
      waitedMs: Schema.Number
    }),
    annotations: annotations("Wait for a process", true, false, false),
    handle: (input, context) =>
      Effect.zipRight(onComputer(input.id, input.computer_id, context.session), Effect.flatMap(Processes, (processes) => processes.wait(input, context.progress)))
  }),
  Tool.make({
    name: "sandbox_exec",
    description: execDescription(settings),
    input: Schema.Struct({
      command: Schema.optional(Schema.String.annotations({ description: `Shell command line (run with ${settings.shell} -c)` })),
      args: Schema.optional((Schema.Array(Schema.String)).annotations({ description: "argv to run directly, without a shell (instead of command)" })),
      stdin: Schema.optional(Schema.String.annotations({ description: "Text piped to the command's stdin, then EOF" })),
      working_directory: Schema.optional(Schema.String.annotations({ description: "Absolute working directory (default /home/agent)" })),
      timeout: Schema.optional((Int.pipe(Schema.greaterThanOrEqualTo(1))).annotations({
        description: `Timeout in seconds (default ${settings.timeout})`
      })),
      env: Schema.optional(Env),
      ...ComputerFields
    }),
    output: Schema.Struct({
      computer_id: Schema.String,
      temporary: Schema.Boolean,
      stdout: Schema.String,
      stderr: Schema.String,
      exit_code: Schema.Number,
      exec_duration_ms: Schema.Number,
      timed_out: Schema.Boolean,
      truncated: Schema.Boolean,
      stdout_bytes: Schema.Number,
      stderr_bytes: Schema.Number
    }),
    annotations: annotations("Run a command", false, true, false),
    handle: (input, context) => Effect.flatMap(Processes, (processes) => processes.exec(context.session, input, context.progress))
  })
]
