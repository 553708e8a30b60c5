/**
 * Decoding what the wrapper (ModalWrapper.ts) writes after a process's own output. Pure: bytes in,
 * decisions out; ModalExec.ts turns them into events. (The header it writes first, `KT<pid> <tty>`
 * or `KTE<reason>`, is decoded by WrapperHeader.ts, shared with Docker's exec path.)
 *
 * - The end marker: `\0KTX<nonce>:<code>\0`, written on stdout and (without a TTY) on stderr after
 *   everything the process wrote to each. Output before the marker belongs to the process; output
 *   after it comes from children that outlive it. Only a tail that could be the start of the marker
 *   is held back, so a prompt without a newline is not delayed.
 */

export interface Scanned {
  /** The process's own output, before the marker. */
  readonly before: ReadonlyArray<Uint8Array>
  /** The exit code, when the marker was completed by this chunk. */
  readonly code: number | undefined
  /** Output after the marker (children that outlive the process). */
  readonly after: ReadonlyArray<Uint8Array>
}

/** Finds the end marker in one output stream. */
export class MarkerScanner {
  private readonly prefix: Buffer
  private held: Buffer = Buffer.alloc(0)
  /** The exit code once the marker was seen. */
  code: number | undefined

  constructor(nonce: string) {
    this.prefix = Buffer.from(`\0KTX${nonce}:`)
  }

  push(chunk: Uint8Array): Scanned {
    if (this.code !== undefined) return { before: [], code: undefined, after: [chunk] }
    const data = this.held.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.held, chunk])
    this.held = Buffer.alloc(0)
    const at = data.indexOf(this.prefix)
    if (at >= 0) {
      const before = at > 0 ? [data.subarray(0, at)] : []
      const end = data.indexOf(0, at + this.prefix.length)
      if (end < 0) {
        this.held = data.subarray(at)
        return { before, code: undefined, after: [] }
      }
      this.code = Number(data.subarray(at + this.prefix.length, end).toString("latin1"))
      return { before, code: this.code, after: end + 1 < data.length ? [data.subarray(end + 1)] : [] }
    }
    // Hold back a tail that is a proper prefix of the marker.
    for (let keep = Math.min(this.prefix.length - 1, data.length); keep > 0; keep--) {
      if (data.subarray(data.length - keep).equals(this.prefix.subarray(0, keep))) {
        this.held = data.subarray(data.length - keep)
        return { before: data.length > keep ? [data.subarray(0, data.length - keep)] : [], code: undefined, after: [] }
      }
    }
    return { before: [data], code: undefined, after: [] }
  }

  /** The stream ended: whatever was held is output after all. */
  flush(): ReadonlyArray<Uint8Array> {
    const held = this.held
    this.held = Buffer.alloc(0)
    return held.length > 0 ? [held] : []
  }
}
