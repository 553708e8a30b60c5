/**
 * What the server asked one agent connection and what it watches, so that FrameDecoder can check
 * the agent's answers against it: each tag is answered once, by a frame of its kind (a listing by its
 * records, then LIST_END); a process's output, EXIT and CLOSED come only while the connection watches
 * it, with offsets that never go back, one EXIT, CLOSED after it (which ends the watch); UNWATCHED
 * only for an UNWATCH sent, and the process's frames in between are dropped. Each agent-side method
 * answers a violation's reason, or undefined.
 */

type Asked =
  | { readonly kind: "spawn" }
  | { readonly kind: "watch"; readonly handle: number; readonly stdout: number; readonly stderr: number }
  | { readonly kind: "read"; readonly from: number; readonly most: number }
  | { readonly kind: "list" }
  | { readonly kind: "step" }

interface Watch {
  stdout: number
  stderr: number
  exited: boolean
}

export class AnswerBook {
  private readonly asked = new Map<number, Asked>()
  private readonly watches = new Map<number, Watch>()
  private readonly unwatching = new Map<number, number>()

  // ---- what the server did ----

  /** A request with this tag was sent. */
  expect(tag: number, asked: Asked): void {
    this.asked.set(tag, asked)
  }

  /** An UNWATCH was sent: the process's frames are dropped until its UNWATCHED. */
  unwatch(handle: number): void {
    this.unwatching.set(handle, (this.unwatching.get(handle) ?? 0) + 1)
  }

  /** Whether this connection watches the process now (and is not letting go of it). */
  watched(handle: number): boolean {
    return this.watches.has(handle) && !this.unwatching.has(handle)
  }

  /** Whether an UNWATCH of the process is still unanswered. */
  unwatchPending(handle: number): boolean {
    return this.unwatching.has(handle)
  }

  // ---- what the agent says ----

  /** Whether the process's frames reach the handler. */
  delivers(handle: number): boolean {
    return this.watched(handle)
  }

  private take(tag: number, kind: Asked["kind"], name: string): Asked | string {
    const asked = this.asked.get(tag)
    if (asked === undefined || asked.kind !== kind) return `${name} for tag ${tag}, which asked ${asked === undefined ? "nothing" : `a ${asked.kind}`}`
    this.asked.delete(tag)
    return asked
  }

  answered(tag: number, kind: Asked["kind"], name: string): string | undefined {
    const asked = this.take(tag, kind, name)
    return typeof asked === "string" ? asked : undefined
  }

  listed(tag: number): string | undefined {
    return this.asked.get(tag)?.kind === "list" ? undefined : `PROC for tag ${tag}, which asked no listing`
  }

  started(tag: number, handle: number): string | undefined {
    const asked = this.take(tag, "spawn", "STARTED")
    if (typeof asked === "string") return asked
    if (this.watches.has(handle) || this.unwatching.has(handle)) return `STARTED for tag ${tag} with p${handle}, which is watched already`
    this.watches.set(handle, { stdout: 0, stderr: 0, exited: false })
    return undefined
  }

  watching(tag: number, handle: number): string | undefined {
    const asked = this.take(tag, "watch", "WATCHING")
    if (typeof asked === "string") return asked
    if (asked.kind !== "watch" || asked.handle !== handle) return `WATCHING for tag ${tag} with p${handle}, which was not asked`
    if (this.watches.has(handle) || this.unwatching.has(handle)) return `WATCHING for tag ${tag}: p${handle} is watched already`
    this.watches.set(handle, { stdout: asked.stdout, stderr: asked.stderr, exited: false })
    return undefined
  }

  failed(tag: number): string | undefined {
    const asked = this.asked.get(tag)
    if (asked?.kind !== "watch" && asked?.kind !== "read") return `FAILED for tag ${tag}, which asked ${asked === undefined ? "nothing" : `a ${asked.kind}`}`
    this.asked.delete(tag)
    return undefined
  }

  readResult(tag: number, start: number, total: number, length: number): string | undefined {
    const asked = this.take(tag, "read", "READ_RESULT")
    if (typeof asked === "string") return asked
    if (asked.kind !== "read" || start < Math.min(asked.from, total) || length > asked.most) {
      return `READ_RESULT for tag ${tag} with ${length} bytes from ${start}, not what was asked`
    }
    return undefined
  }

  output(handle: number, stream: "stdout" | "stderr", offset: number, length: number): string | undefined {
    if (this.unwatching.has(handle)) return undefined
    const watch = this.watches.get(handle)
    if (watch === undefined) return `${stream.toUpperCase()} for p${handle}, which this connection does not watch`
    if (offset < watch[stream]) return `${stream.toUpperCase()} for p${handle} at offset ${offset}, before ${watch[stream]}`
    watch[stream] = offset + length
    return undefined
  }

  exit(handle: number, stdout: number, stderr: number): string | undefined {
    if (this.unwatching.has(handle)) return undefined
    const watch = this.watches.get(handle)
    if (watch === undefined) return `EXIT for p${handle}, which this connection does not watch`
    if (watch.exited) return `a second EXIT for p${handle}`
    watch.exited = true
    // What fell out of the store before it was sent is skipped.
    watch.stdout = Math.max(watch.stdout, stdout)
    watch.stderr = Math.max(watch.stderr, stderr)
    return undefined
  }

  closed(handle: number): string | undefined {
    const watch = this.watches.get(handle)
    if (this.unwatching.has(handle)) {
      this.watches.delete(handle)
      return undefined
    }
    if (watch === undefined) return `CLOSED for p${handle}, which this connection does not watch`
    if (!watch.exited) return `CLOSED for p${handle} before its EXIT`
    this.watches.delete(handle)
    return undefined
  }

  unwatched(handle: number): string | undefined {
    const pending = this.unwatching.get(handle)
    if (pending === undefined) return `UNWATCHED for p${handle}, which was not unwatched`
    if (pending > 1) this.unwatching.set(handle, pending - 1)
    else {
      this.unwatching.delete(handle)
      this.watches.delete(handle)
    }
    return undefined
  }
}
