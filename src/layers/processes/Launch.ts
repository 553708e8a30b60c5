/**
 * How a process starts on a computer: its handle, its working directory (`--workdir`, else the
 * computer's home; a relative one against that), its environment (the defaults, the backend's, the
 * server's `--env`, then the call's own), its audit entries (`process.started` once it runs, before
 * its actor exists, so that the end, which can come at once, always follows it), and its place in
 * the table.
 */
import * as Effect from "effect/Effect"
import { processEnvironment } from "../../domain/Environment.js"
import type { ComputerHandle } from "../../services/Computers.js"
import type { OutputLimit, ProcessHandle } from "../../services/Processes.js"
import { noteSubject } from "../../services/Progress.js"
import type { SettingsShape } from "../../services/Settings.js"
import type * as ProcessAudit from "./ProcessAudit.js"
import type { ProcessTable } from "./ProcessTable.js"

export interface StartRequest {
  /** What the caller asked to run (the audit's and the span's words). */
  readonly command: string
  readonly argv: ReadonlyArray<string>
  readonly cwd: string | undefined
  readonly env: Readonly<Record<string, string>> | undefined
  readonly tty: { readonly cols: number; readonly rows: number } | undefined
  /** Output kept beyond the settings' head and tail (sandbox_exec keeps half its output limit each). */
  readonly retainBytes?: number
  /** Past this many bytes of stdout and stderr together the process is killed (sandbox_exec's --output-limit). */
  readonly outputLimit?: OutputLimit
}

/** The call's cwd; absent: --workdir, else the computer's home; relative: against that. */
export const resolveCwd = (workdir: string | undefined, home: string, cwd: string | undefined) => {
  const base = workdir ?? home
  return cwd === undefined || cwd === "" ? base : cwd.startsWith("/") ? cwd : `${base}/${cwd}`
}

export const make = (options: {
  readonly settings: SettingsShape
  /** The backend's variables for every process (the egress proxy's). */
  readonly environment: Readonly<Record<string, string>> | undefined
  readonly audit: ProcessAudit.ProcessAudit
  readonly table: ProcessTable
}) => {
  const { audit, settings, table } = options
  return (session: string, computer: ComputerHandle, request: StartRequest) =>
    Effect.gen(function*() {
      // Where the computer holds its processes, its handle names the process instead (onStart).
      const id = yield* table.nextId
      const cwd = resolveCwd(settings.workdir, computer.home, request.cwd)
      const audited: ProcessAudit.StartedProcess = {
        session,
        computer: computer.id,
        pid: id,
        command: request.command,
        argv: request.argv,
        cwd,
        tty: request.tty !== undefined,
        shell: request.argv.length === 3 && request.argv[0] === settings.shell && request.argv[1] === "-c"
      }
      const process: ProcessHandle = yield* computer.spawn({
        id,
        command: request.command,
        spec: {
          argv: request.argv,
          cwd,
          env: processEnvironment({
            home: computer.home,
            shell: settings.shell,
            tty: request.tty !== undefined,
            backend: options.environment,
            server: settings.env,
            call: request.env
          }),
          tty: request.tty
        },
        headBytes: Math.max(settings.headBytes, request.retainBytes ?? 0),
        tailBytes: Math.max(settings.tailBytes, request.retainBytes ?? 0),
        mailboxCapacity: settings.mailboxCapacity,
        outputLimit: request.outputLimit,
        onExit: (ended) => Effect.zipRight(table.finished(ended), audit.ended(ended, session)),
        onStart: (pid) => audit.started({ ...audited, pid })
      }).pipe(Effect.tapError((error) => audit.failed(audited, error.message)))
      yield* table.add(process, computer)
      // The call now concerns this process: a task made of it is named after it (Tasks.ts).
      yield* noteSubject(computer.id, process.id)
      return process
    })
}
