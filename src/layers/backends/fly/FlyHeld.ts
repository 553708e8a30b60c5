/**
 * A Fly machine's processes as any server reaches them (HeldProcesses): the supervisor keeps
 * each one's directory (FlyScripts.ts) — its handle, allocated in the machine by the round that
 * started it, its record (command, cwd, start and end on the machine's clock, status, signals
 * sent), a note, and each stream's output trimmed to a head and a tail on the machine's disk — so
 * a server that did not start a process lists it (one exec), reads any retained range (one exec
 * per piece) and follows it through its own rounds from any offset (`attach`).
 */
import * as Effect from "effect/Effect"
import type { ProviderError } from "../../../domain/Errors.js"
import type { HeldProcess, HeldProcesses } from "../../../services/Backend.js"
import type { FlyApi } from "./FlyApi.js"
import { flyError, toProviderError } from "./FlyError.js"
import * as FlyProcess from "./FlyProcess.js"
import * as Round from "./FlyRound.js"
import * as Scripts from "./FlyScripts.js"

/** Bytes each stream keeps in the machine by default: a quarter from its start, the rest from its end. */
export const RETAIN_BYTES = 32 * 1024 * 1024

export const retention = (retainBytes: number) => {
  const headBytes = Math.floor(retainBytes / 4)
  return { headBytes, tailBytes: retainBytes - headBytes }
}

/** One process as LIST shows it: its record and where it lives. */
export interface Listed {
  readonly dir: string
  readonly record: HeldProcess
  /** What LIST saw of it (no output): a follower starts from this observation. */
  readonly report: Round.Report
}

const NO_SIZE = { cols: 0, rows: 0 } as const

const ms = (text: string | undefined): number | undefined => (text !== undefined && /^\d+$/.test(text) ? Number(text) : undefined)

/** Decodes LIST's answer; a string says what was wrong. */
export const decodeList = (stdout: string): { readonly boot: string | undefined; readonly processes: ReadonlyArray<Listed> } | string => {
  const lines = stdout.split("\n")
  const supervisor = Round.decodeSupervisor(lines[0])
  if (supervisor === undefined) return `no supervisor line in ${JSON.stringify(stdout.slice(0, 200))}`
  const processes: Array<Listed> = []
  for (let i = 1; i < lines.length && lines[i] !== ""; i += 8) {
    const head = /^H (\d+) (\S+)$/.exec(lines[i] ?? "")
    const meta = lines[i + 1]
    const note = lines[i + 2]
    const times = /^T (\S+) (\S+)$/.exec(lines[i + 3] ?? "")
    const report = Round.decodeReport(lines, i + 4)
    if (!head || meta === undefined || !meta.startsWith("M") || note === undefined || !note.startsWith("N") || !times || !report) {
      return `a process record is malformed: ${JSON.stringify(lines.slice(i, i + 8).join("\n").slice(0, 200))}`
    }
    let said: { command?: unknown; cwd?: unknown } = {}
    try {
      said = JSON.parse(Buffer.from(meta.slice(2), "base64").toString("utf8")) as typeof said
    } catch {
      // A record written by hand or cut short: the process is still listed, without its command.
    }
    const exit = FlyProcess.exitOf(report)
    const startedAt = ms(times[1]) ?? 0
    processes.push({
      dir: head[2]!,
      report,
      record: {
        handle: Number(head[1]),
        pid: report.pid ?? 0,
        command: typeof said.command === "string" ? said.command : "",
        cwd: typeof said.cwd === "string" ? said.cwd : "",
        tty: false,
        size: NO_SIZE,
        exit: exit ?? (report.fail === undefined ? undefined : { exitCode: 127, signal: null }),
        closed: (exit !== undefined && !report.groupAlive) || report.fail !== undefined,
        note: Buffer.from(note.slice(2), "base64").toString("utf8"),
        startedAt,
        endedAt: exit === undefined ? undefined : (ms(times[2]) ?? startedAt),
        totals: { stdout: report.outSize, stderr: report.errSize }
      }
    })
  }
  return { boot: supervisor.boot, processes }
}

/** The record a start writes for every server that lists the process. */
export const meta = (command: string, cwd: string): string => JSON.stringify({ command, cwd })

export interface HeldOptions {
  readonly api: FlyApi
  readonly machineId: string
  readonly boot: string
  readonly retainBytes: number
  readonly execTimeoutSeconds: number
  /** The connection's followed processes, by directory: an attached one joins its rounds. */
  readonly followed: Map<string, FlyProcess.Followed>
  readonly writer: string
  readonly operations: FlyProcess.Operations
  /** Why the connection cannot follow any more, once it ended. */
  readonly closed: () => ProviderError | undefined
}

export const make = (options: HeldOptions): HeldProcesses => {
  const { api, machineId } = options
  // Once the connection ended (the machine lost, or closed) every call fails at once, not after the API's retries.
  const exec = (operation: string, script: string, args: ReadonlyArray<string>) =>
    Effect.suspend(() => {
      const closed = options.closed()
      return closed === undefined ? Effect.void : Effect.fail(closed)
    }).pipe(Effect.zipRight(api.exec(machineId, ["/bin/sh", "-c", script, "kt", ...args], { timeoutSeconds: options.execTimeoutSeconds }).pipe(
      // A caller's bound cuts the call short even where it runs uninterruptibly (the kernel asks why a process ended so).
      Effect.interruptible,
      Effect.mapError((error) => toProviderError(error, operation)),
      Effect.flatMap((answer) =>
        answer.exit_code === 0
          ? Effect.succeed(answer.stdout ?? "")
          : flyError(operation, answer.exit_code === 4 ? "NotFound" : "Failed", (answer.stderr ?? "").trim() || `exit code ${answer.exit_code}`)
      )
    )))

  const { followed } = options
  /** This connection follows the process in `dir` (named `handle`), or one with that handle. */
  const following = (handle: number, dir?: string) => {
    const known = dir === undefined ? undefined : followed.get(dir)
    if (known !== undefined) known.handle ??= handle
    return known !== undefined || [...followed.values()].some((process) => process.handle === handle)
  }

  /** Follows a listed process from the given offsets, in the connection's rounds, for the Scope (its end lets go). */
  const follow = ({ dir, record, report }: Listed, from: { readonly stdout: number; readonly stderr: number }) =>
    Effect.gen(function*() {
      const closed = options.closed()
      if (closed !== undefined) return yield* closed
      const process = FlyProcess.make(dir, options.writer, from, record.handle)
      yield* Effect.acquireRelease(Effect.sync(() => followed.set(dir, process)), () => Effect.sync(() => FlyProcess.letGo(followed, process)))
      // What the list saw is an observation: one that ended and was read to its end ends now, not a round later.
      yield* FlyProcess.deliver(process, FlyProcess.observe(process, report))
      yield* options.operations.wake
      return FlyProcess.handle(process, options.operations)
    })

  const listAll = Effect.gen(function*() {
    const operation = `list the processes of machine ${machineId}`
    const decoded = decodeList(yield* exec(operation, Scripts.LIST, []))
    if (typeof decoded === "string") return yield* flyError(operation, "Protocol", `unexpected answer: ${decoded}`)
    if (decoded.boot !== options.boot) return yield* flyError(operation, "Unavailable", `machine ${machineId} restarted; its processes ended`)
    // A process this connection started in a round whose report it has not seen yet is followed already.
    for (const { dir, record } of decoded.processes) following(record.handle, dir)
    return decoded.processes
  })

  const attach = (handle: number, from: { readonly stdout: number; readonly stderr: number }) =>
    Effect.gen(function*() {
      const listed = (yield* listAll).find((one) => one.record.handle === handle)
      if (listed === undefined) return yield* flyError(`follow process p${handle}`, "NotFound", `it is not in machine ${machineId} any more`)
      const process = yield* follow(listed, from)
      return { process, held: listed.record }
    })

  const read = (handle: number, stream: "stdout" | "stderr", from: number, most: number) =>
    Effect.gen(function*() {
      const operation = `read the ${stream} of process p${handle}`
      const stdout = yield* exec(operation, Scripts.READ, [String(handle), stream === "stdout" ? "out" : "err", String(from), String(most)])
      const [head, data = ""] = stdout.split("\n")
      const said = /^R (\d+) (\d+)$/.exec(head ?? "")
      if (!said) return yield* flyError(operation, "Protocol", `unexpected answer: ${JSON.stringify(stdout.slice(0, 100))}`)
      return { start: Number(said[1]), total: Number(said[2]), data: Buffer.from(data, "base64") }
    })

  return {
    boot: options.boot,
    retention: retention(options.retainBytes),
    list: Effect.map(listAll, (processes) => processes.map((one) => one.record)),
    attach,
    read,
    note: (handle, text) => Effect.ignore(exec(`note why process p${handle} ends`, Scripts.NOTE, [String(handle), text])),
    following: (handle) => following(handle)
  }
}
