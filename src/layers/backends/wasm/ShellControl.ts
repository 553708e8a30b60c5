/**
 * The state of a running toolset shell (variables, functions, positional parameters, cwd, last
 * status) and how it is stopped: `exit` unwinds with `ExitSignal`, `return` with `ReturnSignal`; a kill of a pipeline stage or of the
 * process cancels its `Control`, which terminates its tool runs and wakes its sleeps.
 */
import type { Run } from "./Runner.js"
import type { Command } from "./ShellParser.js"

export interface ShellState {
  vars: Map<string, string>
  functions: Map<string, Command>
  /** Function calls in progress (bounded: a runaway recursion ends with an error). */
  depth: number
  exported: Set<string>
  positional: Array<string>
  argv0: string
  cwd: string
  status: number
}

export const cloneState = (state: ShellState): ShellState => ({
  vars: new Map(state.vars),
  functions: new Map(state.functions),
  depth: state.depth,
  exported: new Set(state.exported),
  positional: [...state.positional],
  argv0: state.argv0,
  cwd: state.cwd,
  status: state.status
})

/** `NAME=value` of the exported variables. */
export const environment = (state: ShellState) => {
  const lines: Array<string> = []
  for (const name of state.exported) {
    const value = state.vars.get(name)
    if (value !== undefined) lines.push(`${name}=${value}`)
  }
  return lines
}

export class ExitSignal {
  constructor(readonly code: number) {}
}

/** `return` from a function (or a script). */
export class ReturnSignal {
  constructor(readonly code: number) {}
}

export class Cancelled {}

/** Everything a running shell (or pipeline stage) holds, so a kill ends it all at once. */
export class Control {
  cancelled = false
  readonly runs = new Set<Run>()
  readonly wakers = new Set<() => void>()
  cancel() {
    if (this.cancelled) return
    this.cancelled = true
    for (const run of this.runs) void run.terminate()
    for (const wake of this.wakers) wake()
  }
  check() {
    if (this.cancelled) throw new Cancelled()
  }
}
