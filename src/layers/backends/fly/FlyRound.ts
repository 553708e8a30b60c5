/**
 * One round of a computer's exec budget, as data: the operations queued since the last round
 * (start, stdin, EOF, signal, cleanup) and a report of every followed process, encoded into the
 * argv and stdin of one ROUND exec (FlyScripts.ts), and its answer decoded. Pure: no I/O, tested
 * on its own.
 */
import * as Either from "effect/Either"
import * as Scripts from "./FlyScripts.js"

export type Op =
  | { readonly _tag: "Start"; readonly dir: string; readonly spec: string; readonly meta: string }
  | { readonly _tag: "Write"; readonly dir: string; readonly wid: string; readonly data: Uint8Array }
  | { readonly _tag: "Close"; readonly dir: string }
  | { readonly _tag: "Signal"; readonly dir: string; readonly signal: string }
  | { readonly _tag: "Cleanup"; readonly dir: string }

export interface ReportRequest {
  readonly dir: string
  readonly outOffset: number
  readonly errOffset: number
}

/** One process's state as the round saw it. */
export interface Report {
  readonly runnerAlive: boolean
  readonly groupAlive: boolean
  /** The process's status, when the runner recorded it. */
  readonly status: number | undefined
  /** The runner's own status, when the supervisor recorded it (137: killed with its group by SIGKILL). */
  readonly runnerStatus: number | undefined
  readonly outSize: number
  readonly errSize: number
  readonly pid: number | undefined
  readonly pgid: number | undefined
  readonly fail: string | undefined
  /** Its handle in the machine, once the round that started it allocated one. */
  readonly handle: number | undefined
  /** Signals any server sent it (names without SIG): a status of 128+n is then that signal. */
  readonly signals: ReadonlyArray<string>
  /** Where `out` and `err` start: past the offsets asked when those bytes fell out of retention. */
  readonly outStart: number
  readonly errStart: number
  readonly out: Buffer
  readonly err: Buffer
}

export interface Supervisor {
  readonly alive: boolean
  readonly boot: string | undefined
  readonly version: string | undefined
}

export interface RoundResult {
  readonly supervisor: Supervisor
  /** One per op, in order: undefined when done, the reason when it failed. */
  readonly ops: ReadonlyArray<string | undefined>
  /** One per report request, in order. */
  readonly reports: ReadonlyArray<Report>
}

/** The `argv` file of a start: `set -- cwd nEnv K=V… argv…`, every word quoted. */
export const startSpec = (spec: { readonly cwd: string; readonly env: Readonly<Record<string, string>>; readonly argv: ReadonlyArray<string> }) => {
  const env = Object.entries(spec.env).map(([key, value]) => `${key}=${value}`)
  return `set -- ${[spec.cwd, String(env.length), ...env, ...spec.argv].map(Scripts.shellQuote).join(" ")}\n`
}

/** What an op does, as the verb phrase of a failure ("cannot …"). */
export const describe = (op: Op): string => {
  switch (op._tag) {
    case "Start":
      return "start the process"
    case "Write":
      return "write to stdin"
    case "Close":
      return "close stdin"
    case "Signal":
      return `send ${op.signal}`
    case "Cleanup":
      return "clean up after the process"
  }
}

/** The bytes a round sends for an op (what counts against the per-round input cap). */
export const opInputBytes = (op: Op): number =>
  op._tag === "Write" ? op.data.byteLength : op._tag === "Start" ? Buffer.byteLength(op.spec) : 0

/** The argv (after `/bin/sh -c ROUND kt`) and stdin of a round. */
export const encode = (
  ops: ReadonlyArray<Op>,
  reports: ReadonlyArray<ReportRequest>,
  options: { readonly cap: number; readonly waitTicks: number; readonly headBytes: number; readonly tailBytes: number }
): { readonly args: Array<string>; readonly stdin: string | undefined } => {
  const blobs: Array<string> = []
  const blob = (data: Uint8Array | string) => {
    blobs.push(Buffer.from(data).toString("base64"))
    return String(blobs.length)
  }
  const args: Array<string> = []
  for (const op of ops) {
    switch (op._tag) {
      case "Start":
        args.push("S", op.dir, blob(op.spec), blob(op.meta))
        break
      case "Write":
        args.push("W", op.dir, op.wid, blob(op.data))
        break
      case "Close":
        args.push("C", op.dir)
        break
      case "Signal":
        args.push("K", op.dir, op.signal.replace(/^SIG/, ""))
        break
      case "Cleanup":
        args.push("X", op.dir)
        break
    }
  }
  for (const report of reports) args.push("R", report.dir, String(report.outOffset), String(report.errOffset))
  return {
    args: [String(options.cap), String(options.waitTicks), String(options.headBytes), String(options.tailBytes), String(blobs.length), ...args],
    stdin: blobs.length === 0 ? undefined : `${blobs.join("\n")}\n`
  }
}

const int = (text: string | undefined): number | undefined => {
  if (text === undefined || !/^\d+$/.test(text.trim())) return undefined
  return Number(text.trim())
}

const word = (text: string | undefined) => (text === undefined || text === "-" || text === "" ? undefined : text)

/** Decodes a round's stdout for `opCount` ops and `reportCount` reports; Left with what was wrong. */
export const decode = (stdout: string, opCount: number, reportCount: number): Either.Either<RoundResult, string> => {
  const lines = stdout.split("\n")
  let i = 0
  const supervisor = decodeSupervisor(lines[i++])
  if (supervisor === undefined) return Either.left(`no supervisor line in ${JSON.stringify(stdout.slice(0, 200))}`)
  const ops: Array<string | undefined> = []
  for (let n = 0; n < opCount; n++) {
    const line = lines[i++]
    if (line === "A") ops.push(undefined)
    else if (line !== undefined && line.startsWith("A ")) ops.push(Buffer.from(line.slice(2), "base64").toString("utf8") || "failed")
    else return Either.left(`answer ${n + 1} of ${opCount} is ${JSON.stringify(line?.slice(0, 100))}`)
  }
  const reports: Array<Report> = []
  for (let n = 0; n < reportCount; n++) {
    const report = decodeReport(lines, i)
    if (report === undefined) {
      return Either.left(`report ${n + 1} of ${reportCount} is malformed: ${JSON.stringify(lines.slice(i, i + 4).join("\n").slice(0, 200))}`)
    }
    reports.push(report)
    i += 4
  }
  return Either.right({ supervisor, ops, reports })
}

export const decodeSupervisor = (line: string | undefined): Supervisor | undefined => {
  const head = /^S ([01]) (\S+) (\S+)$/.exec(line ?? "")
  return head ? { alive: head[1] === "1", boot: word(head[2]), version: word(head[3]) } : undefined
}

/** The REPORT at `lines[i]` (four lines), or undefined when it is not one. */
export const decodeReport = (lines: ReadonlyArray<string>, i: number): Report | undefined => {
  const p = /^P ([01]) ([01]) (\S+) (\S+) (\d+) (\d+) (\S+) (\S+) (\S+) (\S+) (\d+) (\d+)$/.exec(lines[i] ?? "")
  const f = lines[i + 1]
  const o = lines[i + 2]
  const e = lines[i + 3]
  if (!p || f === undefined || o === undefined || e === undefined || !/^F ?/.test(f) || !/^O ?/.test(o) || !/^E ?/.test(e)) return undefined
  const failText = f.slice(2)
  return {
    runnerAlive: p[1] === "1",
    groupAlive: p[2] === "1",
    status: int(p[3]),
    runnerStatus: int(p[4]),
    outSize: Number(p[5]),
    errSize: Number(p[6]),
    pid: int(p[7]),
    pgid: int(p[8]),
    fail: failText === "" ? undefined : Buffer.from(failText, "base64").toString("utf8"),
    handle: int(p[9]),
    signals: (word(p[10]) ?? "").split(",").filter((name) => name !== ""),
    outStart: Number(p[11]),
    errStart: Number(p[12]),
    out: Buffer.from(o.slice(2), "base64"),
    err: Buffer.from(e.slice(2), "base64")
  }
}
