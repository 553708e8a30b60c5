/** `--print-config`: what the flags and variables resolve to, and where each value came from. */
import * as Redacted from "effect/Redacted"
import type { BackendChoice } from "./BackendChoice.js"
import { allFlags } from "./FlagTable.js"
import type { ResolvedFlags } from "./ResolvedFlags.js"

const shown = (value: unknown): unknown =>
  value === undefined ? null : Redacted.isRedacted(value) ? "<redacted>" : value

/**
 * JSON: `backend` is the backend that would run (`auto` decided), `flags` every flag by name with
 * its `value` and `from` (`command line`, the variable's name, or `default`).
 */
export const printConfig = (resolved: ResolvedFlags, choice: BackendChoice): string => {
  const flags: Record<string, { readonly value: unknown; readonly from: string }> = {}
  for (const [key, flag] of allFlags) {
    const source = resolved.sources[key]
    flags[flag.name] = {
      value: shown(resolved.values[key]),
      from: source._tag === "CommandLine" ? "command line" : source._tag === "Variable" ? source.name : "default"
    }
  }
  return JSON.stringify({ backend: choice.backend, backendReason: choice.reason ?? null, flags }, null, 2) + "\n"
}
