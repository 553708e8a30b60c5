/**
 * Task ids that carry their task: which tool waited on which process of which computer, when, and
 * what its result needs (a wait's cursors, a command's timeout), authenticated with a key every
 * replica derives from the tokens they share and bound to the session (principal and key) that
 * made it. Any replica can so answer a task it never saw, and none accepts an id it did not issue
 * to that very session: an edited, forged or borrowed id fails its check.
 */
import * as Schema from "effect/Schema"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"

/** What a task id says: enough to find the work again and to answer it as its tool would. */
export const Claim = Schema.Struct({
  /** The tool: sandbox_exec, spawn or wait. */
  tool: Schema.Literal("sandbox_exec", "spawn", "wait"),
  computer_id: Schema.String,
  pid: Schema.String,
  /** Clock millis when the call began: its expiry, and a command's timeout and duration count from it. */
  createdAt: Schema.Number,
  /** sandbox_exec: its timeout, in seconds. */
  timeoutSec: Schema.optional(Schema.Number),
  /** spawn and wait: where the result's output begins. */
  cursors: Schema.optional(Schema.Struct({ stdout: Schema.Number, stderr: Schema.Number }))
})
export type Claim = typeof Claim.Type

const decodeClaim = Schema.decodeUnknownOption(Schema.parseJson(Claim))

/** Ids of this form; anything else is a server's own in-memory task (or nothing). */
const prefix = "kt1."

/**
 * The key of a set of servers: derived from their tokens (replicas share them), so that it is the
 * same on each and never the token itself. Without tokens there is nothing shared: a key of this
 * process alone (its tasks are answered by it only).
 */
export const keyFrom = (tokens: ReadonlyArray<string>): Buffer =>
  tokens.length === 0
    ? randomBytes(32)
    : createHmac("sha256", "kilntainers task ids v1").update([...tokens].sort().join("\n")).digest()

const mac = (key: Buffer, session: string, payload: string) => createHmac("sha256", key).update(`${session}\n${payload}`).digest()

/** The id of a task that `session` made. */
export const sign = (key: Buffer, session: string, claim: Claim): string => {
  const payload = Buffer.from(JSON.stringify(claim)).toString("base64url")
  return `${prefix}${payload}.${mac(key, session, payload).toString("base64url")}`
}

/** Whether an id has the form of a carried task (it may still fail its check). */
export const isCarried = (taskId: string) => taskId.startsWith(prefix)

/** The claim of an id issued to `session` by a server with this key, or why it is refused. */
export const open = (key: Buffer, session: string, taskId: string): { readonly claim: Claim } | { readonly refused: string } => {
  const [payload, tag, ...rest] = taskId.slice(prefix.length).split(".")
  if (payload === undefined || tag === undefined || rest.length > 0) return { refused: "it is not a task id this server issues" }
  const expected = mac(key, session, payload)
  const given = Buffer.from(tag, "base64url")
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return { refused: "it was not issued to this session (another principal's or session's, altered, or from servers with other tokens)" }
  }
  const claim = decodeClaim(Buffer.from(payload, "base64url").toString("utf8"))
  return claim._tag === "Some" ? { claim: claim.value } : { refused: "it is not a task id this server issues" }
}
