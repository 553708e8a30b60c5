/** The flags of the process runtime (spawn, ps, output retention, terminals): kilntainers' own. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

const ms = (name: string, value: number, help: string, min = 0) =>
  Flag.integer(name, { group: "process options", default: value, min, metavar: "MS", more: true, help })
const count = (name: string, value: number, help: string, min: number) =>
  Flag.integer(name, { group: "process options", default: value, min, more: true, help })

export const processFlags = {
  spawnTimeoutMs: ms("spawn-timeout-ms", defaultSettings.spawnTimeoutMs, "spawn's default wait before a process moves to the background"),
  maxTimeoutMs: ms("max-timeout-ms", defaultSettings.maxTimeoutMs, "Longest wait of one call while the client listens to progress notifications", 1),
  maxCallMs: ms("max-call-ms", defaultSettings.maxCallMs, "Longest wait of one call without progress notifications (under clients' 60 s request timeouts)", 1),
  inlineBytes: count("inline-bytes", defaultSettings.inlineBytes, "Most output bytes one tool result carries inline (head and tail kept)", 256),
  stdinYieldMs: ms("stdin-yield-ms", defaultSettings.stdinYieldMs, "stdin's default wait for the output that follows the input"),
  psFinished: count("ps-finished", defaultSettings.psFinished, "Finished processes ps lists by default, beside the running ones", 0),
  maxFinished: count("max-finished", defaultSettings.maxFinished, "Finished processes kept listable (oldest evicted first)", 0),
  headBytes: count("head-bytes", defaultSettings.headBytes, "Output kept from the start of each stream, bytes", 0),
  tailBytes: count("tail-bytes", defaultSettings.tailBytes, "Output kept from the end of each stream, bytes", 1),
  retainBytes: count(
    "retain-bytes",
    defaultSettings.retainBytes,
    "Output a computer keeps of each stream on its own disk (host, docker): a quarter from the start, the rest from the end; any of it readable by cursor, after any server",
    4096
  ),
  cols: count("cols", defaultSettings.cols, "Default terminal columns of TTY processes", 2),
  rows: count("rows", defaultSettings.rows, "Default terminal rows of TTY processes", 2),
  killGraceMs: ms("kill-grace-ms", defaultSettings.killGraceMs, "Time between SIGTERM and SIGKILL when processes are stopped"),
  env: Flag.pairs("env", {
    group: "process options",
    more: true,
    metavar: "NAME=VALUE",
    help: "Set in every process's environment, repeatable"
  })
}
