/**
 * What a caller may ask of the Processes service: one Schema per input, with every check of it.
 * An input is decoded once, at the boundary — the MCP tools decode a client's arguments with these
 * Schemas (described for clients in `mcp/ProcessTools.ts`), a library caller with `decodeInput` —
 * and the service takes the decoded value and checks nothing again. Decoding also does the parsing
 * a check needs anyway, so that nothing is parsed twice: a wait pattern is compiled, stdin escapes
 * become bytes, a signal becomes its name.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as JSONSchema from "effect/JSONSchema"
import * as ParseResult from "effect/ParseResult"
import * as Schema from "effect/Schema"
import * as ArgumentErrors from "../domain/ArgumentErrors.js"
import { computerIdProblem } from "../domain/ComputerIds.js"
import { nulProblem } from "../domain/CString.js"
import { envProblem } from "../domain/Environment.js"
import { InvalidInput } from "../domain/Errors.js"
import * as Pattern from "../domain/Pattern.js"
import { normalizeSignal } from "../domain/Signals.js"
import { parseStdinEscapes } from "../domain/StdinEscapes.js"

/** The most stdin one sandbox_exec call takes. */
export const maxExecStdinBytes = 8 * 1024 * 1024

/** A string that becomes a C string: no NUL (`name` says which in the message). */
const CString = (name: string) => Schema.String.pipe(Schema.filter((value) => nulProblem(name, value)))

export const Int = (min: number, max?: number) =>
  max === undefined
    ? Schema.Number.pipe(Schema.int(), Schema.greaterThanOrEqualTo(min))
    : Schema.Number.pipe(Schema.int(), Schema.between(min, max))

/** A computer's id (the slug rule). */
export const ComputerId = Schema.String.pipe(Schema.filter((id) => computerIdProblem(id)))

export const Env = Schema.Record({ key: Schema.String, value: Schema.String }).pipe(Schema.filter((env) => envProblem(env)))

/** A `wait`/`spawn` pattern: compiled as it is decoded (the empty pattern is none). */
const PatternSource = Schema.transformOrFail(
  Schema.String,
  Schema.UndefinedOr(Schema.declare((value: unknown): value is Pattern.Pattern =>
    typeof value === "object" && value !== null && "find" in value && "source" in value
  )),
  {
    strict: true,
    decode: (source, _, ast) => {
      if (source === "") return ParseResult.succeed(undefined)
      const compiled = Pattern.compile(source)
      return Either.isLeft(compiled) ? ParseResult.fail(new ParseResult.Type(ast, source, compiled.left)) : ParseResult.succeed(compiled.right)
    },
    encode: (pattern) => ParseResult.succeed(pattern?.source ?? "")
  }
)

/** What an agent types for stdin, escapes and all: its bytes once decoded. */
const StdinText = Schema.transformOrFail(Schema.String, Schema.Uint8ArrayFromSelf, {
  strict: true,
  decode: (text, _, ast) => {
    const bytes = parseStdinEscapes(text)
    return Either.isLeft(bytes) ? ParseResult.fail(new ParseResult.Type(ast, text, bytes.left)) : ParseResult.succeed(bytes.right)
  },
  encode: (bytes) => ParseResult.succeed(new TextDecoder().decode(bytes))
})

/** A signal by name or number (`INT`, `sigint`, `2`): its name once decoded. */
const Signal = Schema.transformOrFail(Schema.String, Schema.String, {
  strict: true,
  decode: (text, _, ast) => {
    const name = normalizeSignal(text)
    return Either.isLeft(name) ? ParseResult.fail(new ParseResult.Type(ast, text, name.left)) : ParseResult.succeed(name.right)
  },
  encode: ParseResult.succeed
})

const encoder = new TextEncoder()

/** sandbox_exec's stdin: its UTF-8 bytes (none for the empty text), at most `maxExecStdinBytes`. */
const ExecStdin = Schema.transformOrFail(Schema.String, Schema.UndefinedOr(Schema.Uint8ArrayFromSelf), {
  strict: true,
  decode: (text, _, ast) => {
    if (text === "") return ParseResult.succeed(undefined)
    const bytes = encoder.encode(text)
    return bytes.length > maxExecStdinBytes
      ? ParseResult.fail(new ParseResult.Type(ast, text, `stdin is larger than ${maxExecStdinBytes} bytes; write a file instead`))
      : ParseResult.succeed(bytes)
  },
  encode: (bytes) => ParseResult.succeed(bytes === undefined ? "" : new TextDecoder().decode(bytes))
})

const ComputerFields = {
  computer_id: Schema.optional(ComputerId),
  temporary: Schema.optional(Schema.Boolean)
}

/** A process's handle, and (optional, checked when given) its computer: every input after spawn names one. */
const Pid = Schema.String
const OnComputer = Schema.optional(ComputerId)

const MaxBytes = Schema.optional(Int(1))

export const SpawnInput = Schema.Struct({
  command: Schema.String.pipe(Schema.filter((command) =>
    command.trim() === "" ? "command must not be empty" : nulProblem("command", command)
  )),
  cwd: Schema.optional(CString("cwd")),
  env: Schema.optional(Env),
  tty: Schema.optional(Schema.Boolean),
  background: Schema.optional(Schema.Boolean),
  timeoutMs: Schema.optional(Int(0)),
  /** Return as soon as the output matches this pattern (a "ready" line). */
  pattern: Schema.optional(PatternSource),
  /** Keys to type (stdin's escapes) once it starts, or once `pattern` matched: a session in one call. */
  input: Schema.optional(StdinText),
  cols: Schema.optional(Int(2, 1000)),
  rows: Schema.optional(Int(2, 1000)),
  maxBytes: MaxBytes,
  ...ComputerFields
})
export type SpawnInput = typeof SpawnInput.Type

export const ExecInput = Schema.Struct({
  command: Schema.optional(CString("command")),
  args: Schema.optional(Schema.Array(Schema.String).pipe(Schema.filter((args) => {
    for (const [i, arg] of args.entries()) {
      const problem = nulProblem(`args[${i}]`, arg)
      if (problem !== undefined) return problem
    }
    return undefined
  }))),
  stdin: Schema.optional(ExecStdin),
  working_directory: Schema.optional(CString("working_directory").pipe(Schema.filter((cwd) =>
    cwd === "" || cwd.startsWith("/") ? undefined : "working_directory must be an absolute path (start with /)"
  ))),
  timeout: Schema.optional(Schema.Number.pipe(Schema.greaterThanOrEqualTo(1))),
  env: Schema.optional(Env),
  ...ComputerFields
}).pipe(Schema.filter((input) => {
  const command = input.command !== undefined && input.command !== ""
  const args = input.args !== undefined && input.args.length > 0
  if (command && args) return "Cannot provide both command and args: give command (a shell command line) or args (an argv list)"
  if (!command && !args) return "Provide either command (a shell command line) or args (an argv list)"
  return undefined
}))
export type ExecInput = typeof ExecInput.Type

export const ListFilter = Schema.Struct({
  computer_id: Schema.optional(ComputerId),
  status: Schema.optional(Schema.Literal("running", "terminated", "all")),
  /** Most processes to list (newest first among the finished). */
  limit: Schema.optional(Int(1))
})
export type ListFilter = typeof ListFilter.Type

export const StdinInput = Schema.Struct({
  id: Pid,
  /** Text with escapes; its bytes once decoded. */
  input: Schema.optional(StdinText),
  eof: Schema.optional(Schema.Boolean),
  /** How long to wait for the output that follows (settles earlier when it goes quiet). */
  yieldMs: Schema.optional(Int(0)),
  maxBytes: MaxBytes,
  computer_id: OnComputer
}).pipe(Schema.filter((input) =>
  (input.input === undefined || input.input.length === 0) && !input.eof
    ? "input is empty and eof is not set: nothing to send"
    : undefined
))
export type StdinInput = typeof StdinInput.Type

export const ReadInput = Schema.Struct({
  id: Pid,
  lines: Schema.optional(Int(1, 100_000)),
  stdoutCursor: Schema.optional(Int(0)),
  stderrCursor: Schema.optional(Int(0)),
  maxBytes: MaxBytes,
  scrollback: Schema.optional(Schema.Boolean),
  computer_id: OnComputer
})
export type ReadInput = typeof ReadInput.Type

export const KillInput = Schema.Struct({
  id: Pid,
  signal: Schema.optional(Signal),
  computer_id: OnComputer
})
export type KillInput = typeof KillInput.Type

export const WaitInput = Schema.Struct({
  id: Pid,
  pattern: Schema.optional(PatternSource),
  quietMs: Schema.optional(Int(1)),
  timeoutMs: Schema.optional(Int(0)),
  maxBytes: MaxBytes,
  computer_id: OnComputer
})
export type WaitInput = typeof WaitInput.Type

/** A process named by id (and, optionally, its computer): what every input but spawn, exec and list carries. */
export interface ProcessRef {
  readonly id: string
  readonly computer_id?: string | undefined
}

/**
 * Decodes a caller's input with its Schema, once: the boundary of a library caller (MCP decodes a
 * tool's arguments itself). A problem is an InvalidInput in the tools' words:
 * `invalid arguments for spawn: cols must be an integer from 2 to 1000`.
 */
export const decodeInput = <A, I>(name: string, schema: Schema.Schema<A, I>) => {
  const shape = JSONSchema.make(schema) as unknown as Record<string, unknown>
  return (input: I): Effect.Effect<A, InvalidInput> =>
    Schema.decodeUnknown(schema)(input, { errors: "all", onExcessProperty: "error" }).pipe(
      Effect.mapError((error) => new InvalidInput({ message: ArgumentErrors.describe(name, shape, input, error) }))
    )
}
