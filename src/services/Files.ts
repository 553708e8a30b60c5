import type * as Effect from "effect/Effect"
import * as Context from "effect/Context"
import type { ProcessError } from "../domain/Errors.js"

export interface FileReadInput {
  readonly path: string
  readonly encoding?: "utf8" | "base64" | undefined
  readonly maxBytes?: number | undefined
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
}

export interface FileReadResult {
  readonly computer_id: string
  readonly path: string
  readonly size: number
  readonly encoding: "utf8" | "base64"
  readonly content: string
  readonly truncated: boolean
}

export interface FileWriteInput {
  readonly path: string
  readonly content: string
  readonly encoding?: "utf8" | "base64" | undefined
  readonly append?: boolean | undefined
  readonly mode?: string | undefined
  readonly computer_id?: string | undefined
  readonly temporary?: boolean | undefined
}

export interface FileWriteResult {
  readonly computer_id: string
  readonly path: string
  readonly bytes: number
}

/** Files inside a computer: read and written by the computer itself, so paths cannot escape it. */
export class Files extends Context.Tag("kilntainers/services/Files")<Files, {
  readonly read: (session: string, input: FileReadInput) => Effect.Effect<FileReadResult, ProcessError>
  readonly write: (session: string, input: FileWriteInput) => Effect.Effect<FileWriteResult, ProcessError>
}>() {}
