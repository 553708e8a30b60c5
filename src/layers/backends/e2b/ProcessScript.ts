/**
 * What envd runs for a process, as text: envd starts `/bin/bash -l -c <script>`, so argv is
 * shell-quoted into a script that makes the process the leader of its own process group (pid ==
 * pgid: it already is when envd made it one, else `exec setsid` in place keeps the pid) and sets
 * exactly the SpawnSpec environment with `env`, then execs argv. Pure.
 */
import type { ExitInfo } from "../../../services/Backend.js"

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/

/** POSIX shell quoting of one word: safe words as they are, else single quotes ('\'' for a quote). */
export const shellQuote = (word: string): string => (SAFE.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`)

/** A command line that runs exactly argv. */
export const shellJoin = (argv: ReadonlyArray<string>): string => argv.map(shellQuote).join(" ")

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/**
 * Stdin for envd older than 0.5.2, which cannot close a process's stdin: a relay between envd's
 * pipe and the process. Each write arrives as one base64 line, and a line "." is the end of input
 * (see `relayLine`, `RELAY_EOF`), so the process sees EOF exactly after the last byte written. The
 * relay reads from a FIFO that it deletes once both ends are open; it ends at EOF, or when envd
 * closes its pipe after the process exits.
 */
const STDIN_RELAY =
  `f=$(mktemp -u "\${TMPDIR:-/tmp}/kt-stdin.XXXXXXXX") && mkfifo -m 600 "$f" || ` +
  `{ echo "kilntainers: cannot make the stdin relay" >&2; exit 126; }; ` +
  // A background job of a non-interactive shell reads /dev/null unless its stdin is redirected: fd 3.
  `exec 3<&0; (trap '' INT QUIT; rm -f "$f"; while IFS= read -r l; do [ "$l" = . ] && break; printf %s "$l" | base64 -d || break; done) ` +
  `<&3 >"$f" 2>/dev/null & exec 3<&-; `

/** The end of input for the relay. */
export const RELAY_EOF = ".\n"

/** One write through the relay. */
export const relayLine = (data: Uint8Array): string => `${Buffer.from(data).toString("base64")}\n`

/**
 * The script envd runs with `bash -l -c`: the process becomes its own process group (pgid = the
 * pid envd reports) and gets exactly `env` on top of the sandbox's, then execs argv.
 */
export const processScript = (
  argv: ReadonlyArray<string>,
  env: Readonly<Record<string, string>>,
  options: { readonly stdinRelay?: boolean } = {}
): string => {
  const assignments = Object.entries(env).filter(([key]) => ENV_NAME.test(key)).map(([key, value]) => shellQuote(`${key}=${value}`))
  // `env` would take a first word containing '=' as an assignment: run such a word through `sh`.
  const program = argv[0]!.includes("=") ? ["sh", "-c", 'exec "$@"', "sh", ...argv] : argv
  const input = options.stdinRelay === true ? ` <"$f"` : ""
  const exec = shellJoin(["env", ...assignments, ...program]) + input
  const relay = options.stdinRelay === true ? STDIN_RELAY : ""
  return `${relay}if [ "$(cut -d' ' -f5 /proc/$$/stat)" = "$$" ]; then exec ${exec}; else exec setsid ${exec}; fi`
}

/** envd only knows SIGKILL and SIGTERM for one pid: other signals go to the group by a command. */
export const signalCommand = (signal: string, pid: number): string =>
  shellJoin([
    "sh",
    "-c",
    `kill -s "$1" -- "-$2" 2>/dev/null || kill -s "$1" "$2" 2>/dev/null; exit 0`,
    "kill",
    signal.replace(/^SIG/, ""),
    String(pid)
  ])

const GO_SIGNALS: Record<string, string> = {
  hangup: "SIGHUP",
  interrupt: "SIGINT",
  quit: "SIGQUIT",
  "illegal instruction": "SIGILL",
  "trace/breakpoint trap": "SIGTRAP",
  aborted: "SIGABRT",
  "bus error": "SIGBUS",
  "floating point exception": "SIGFPE",
  killed: "SIGKILL",
  "user defined signal 1": "SIGUSR1",
  "segmentation fault": "SIGSEGV",
  "user defined signal 2": "SIGUSR2",
  "broken pipe": "SIGPIPE",
  "alarm clock": "SIGALRM",
  terminated: "SIGTERM"
}

/** envd's end event (Go's ProcessState) as ExitInfo. */
export const exitInfo = (end: { readonly exitCode: number; readonly status?: string | undefined }): ExitInfo => {
  const signal = /^signal: (.+?)( \(core dumped\))?$/.exec(end.status ?? "")
  if (signal) return { exitCode: null, signal: GO_SIGNALS[signal[1]!] ?? "SIGKILL" }
  return { exitCode: end.exitCode, signal: null }
}

/** A process whose stream broke without an end event (the sandbox went away). */
export const LOST_EXIT: ExitInfo = { exitCode: null, signal: "SIGKILL" }
