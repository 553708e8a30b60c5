/**
 * The header line a process wrapper writes first on stdout, before the program's own output: the
 * Docker exec fallback (docker/DockerExec.ts) and Modal's exec both start processes through a small
 * `/bin/sh` wrapper that reports, in band, whether the program could start.
 *
 *   KT<pid>\n          the program is about to run with this pid (inside the computer)
 *   KT<pid> <tty>\n    the same, with its terminal's name ("-" for pipes)
 *   KTE<reason>\n      the program cannot start (command not found, bad working directory)
 *
 * Pure: bytes in, a decision out; the exec paths turn it into events. A line before the header that
 * is not ours (an engine's "OCI runtime exec failed", a profile script) is skipped and kept, bounded,
 * for the error when the process ends without a header. On a terminal the line ends in `\r\n`.
 */

/** Kept of text that is not a header, for the error message. */
const LEFTOVER_LIMIT = 4096

export type HeaderResult =
  /** No complete header line yet: feed more. */
  | { readonly _tag: "Pending" }
  /** `rest`: the bytes after the header line, already the program's output. */
  | { readonly _tag: "Started"; readonly pid: number; readonly tty: string | undefined; readonly rest: Uint8Array }
  | { readonly _tag: "Failed"; readonly reason: string }

const PENDING: HeaderResult = { _tag: "Pending" }
const STARTED = /^KT(\d+)(?: (.*))?$/

/** Reads the header from the start of a wrapper's stdout; feed it until the result is not Pending. */
export class WrapperHeaderDecoder {
  private text: Buffer = Buffer.alloc(0)
  private skipped = ""

  push(chunk: Uint8Array): HeaderResult {
    this.text = this.text.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.text, chunk])
    for (;;) {
      const newline = this.text.indexOf(10)
      if (newline < 0) {
        // A line that long is not our header: keep a bounded prefix for the error.
        if (this.text.length > LEFTOVER_LIMIT) this.text = this.text.subarray(0, LEFTOVER_LIMIT)
        return PENDING
      }
      const line = this.text.subarray(0, newline).toString("utf8").replace(/\r$/, "")
      const rest = this.text.subarray(newline + 1)
      const started = STARTED.exec(line)
      if (started) {
        this.text = Buffer.alloc(0)
        const tty = started[2] === undefined || started[2] === "-" ? undefined : started[2]
        return { _tag: "Started", pid: Number(started[1]), tty, rest }
      }
      if (line.startsWith("KTE")) {
        this.text = Buffer.alloc(0)
        return { _tag: "Failed", reason: line.slice(3) }
      }
      this.skip(line)
      this.text = rest
    }
  }

  /** What arrived without forming a header (for the error when the process ends first), bounded. */
  leftover(): string {
    return [this.skipped, this.text.toString("utf8")].join("\n").trim().slice(0, LEFTOVER_LIMIT)
  }

  private skip(line: string) {
    if (this.skipped.length >= LEFTOVER_LIMIT) return
    this.skipped = `${this.skipped}${this.skipped === "" ? "" : "\n"}${line}`.slice(0, LEFTOVER_LIMIT)
  }
}
