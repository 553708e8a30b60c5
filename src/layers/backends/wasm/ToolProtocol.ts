/**
 * What a tool worker (ToolWorker.ts) and the code that starts it (Runner.ts) say to each other.
 */
import type { Change, VDir } from "./Vfs.js"

export const STDIN_HEADER_BYTES = 16
export const STDIN_CHUNK_BYTES = 64 * 1024
/** Output a worker may have in flight before it waits for the consumer to take it. */
export const OUTPUT_WINDOW_BYTES = 1024 * 1024

/** Where a standard stream of the tool goes: posted messages, a file of the tree, or nothing. */
export type ToolInput = "ring" | "empty" | { readonly file: string }
export type ToolOutput = "post" | "null" | { readonly file: string }

export interface ToolJob {
  readonly module: WebAssembly.Module
  readonly args: ReadonlyArray<string>
  readonly env: ReadonlyArray<string>
  readonly tree: VDir
  readonly ctl: SharedArrayBuffer
  readonly stdin: ToolInput
  readonly stdout: ToolOutput
  /** "stdout": the same descriptor as stdout (`2>&1` to a file). */
  readonly stderr: ToolOutput | "stdout"
  readonly quota: BigInt64Array
  readonly reserved: BigInt64Array
}

export type ToolMessage =
  | { readonly t: "ready" }
  | { readonly t: "out"; readonly fd: 1 | 2; readonly data: Uint8Array; readonly weight: number }
  | { readonly t: "exit"; readonly code: number; readonly changes: ReadonlyArray<Change>; readonly reserved: number; readonly trap?: string }
