/**
 * How a computer is known at Modal: the sandbox's name and its tags, encoded and decoded here only.
 *
 * Names: Modal's object names are at most 64 characters of [A-Za-z0-9-_.] (the SDK refuses longer
 * ones before calling). A computer id is up to 63 characters, so `kilntainer-<id>` can reach 74:
 * ids that fit keep that readable name; longer ones keep a prefix of the id and end with 12 hex
 * digits of the id's SHA-256, which keeps the name a pure function of the id (found again by
 * name) and unique in practice. The full id is always in the `kilntainers-computer-id` tag, and a
 * sandbox is only taken as a computer's when that tag matches, so even a hash collision could not
 * hand one computer another's sandbox.
 *
 * Tags: the computer's ComputerMetadata as ComputerMetadata.ts encodes it in the dashed style
 * (kilntainers=true, kilntainers-computer-id, kilntainers-temporary, kilntainers-image,
 * kilntainers-created, kilntainers-instance, the owner, the create nonce), plus one of Modal's own:
 * kilntainers-ends, the ISO time at which Modal ends the sandbox (its timeout counts from creation,
 * so its end of life is known from the start; absent on sandboxes made before it was recorded), and
 * kilntainers-agent-key, the key of the sandbox's agent (ModalAgent.ts; absent on sandboxes made
 * before the sandbox held its processes).
 */
import * as Option from "effect/Option"
import { createHash } from "node:crypto"
import { type ComputerMetadata, fromLabels, MARKER, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import type { Instance, Query } from "../../../services/Backend.js"

export const NAME_PREFIX = "kilntainer-"
/** Modal's limit on object names (sandboxes, apps). */
export const MAX_NAME_LENGTH = 64
const NAME_CHARSET = /^[a-zA-Z0-9\-_.]+$/
const APP_ID = /^ap-[a-zA-Z0-9]{22}$/
const HASH_LENGTH = 12

/** A valid Modal object name (the SDK's own rule: length, charset, not an App id). */
export const validObjectName = (name: string) =>
  name.length > 0 && name.length <= MAX_NAME_LENGTH && NAME_CHARSET.test(name) && !APP_ID.test(name)

/** The sandbox name of a computer. */
export const sandboxName = (id: string): string => {
  const plain = `${NAME_PREFIX}${id}`
  if (plain.length <= MAX_NAME_LENGTH) return plain
  const hash = createHash("sha256").update(id).digest("hex").slice(0, HASH_LENGTH)
  const keep = MAX_NAME_LENGTH - NAME_PREFIX.length - 1 - HASH_LENGTH
  return `${NAME_PREFIX}${id.slice(0, keep).replace(/-+$/, "")}-${hash}`
}

/** Modal's own tag: when Modal ends the sandbox (ISO time). */
export const ENDS_TAG = `${MARKER}-ends`

/** The key of the sandbox's agent (64 hex digits): servers read it through Modal's API, the guest cannot. */
export const AGENT_KEY_TAG = `${MARKER}-agent-key`

/** The tags of a new sandbox (with its agent's key). */
export const tagsFor = (metadata: ComputerMetadata, endsAt: number, agentKey: string): Record<string, string> => ({
  ...toLabels("dashed", metadata),
  [ENDS_TAG]: new Date(endsAt).toISOString(),
  [AGENT_KEY_TAG]: agentKey
})

/** The agent's key in a sandbox's tags; none on a sandbox made by an older kilntainers. */
export const agentKeyOf = (tags: Readonly<Record<string, string>>): Option.Option<string> =>
  Option.liftPredicate(tags[AGENT_KEY_TAG] ?? "", (key) => /^[0-9a-f]{64}$/.test(key))

/** A running sandbox of ours as an Instance; none for a sandbox without our tags. */
export const instanceFrom = (sandboxId: string, tags: Readonly<Record<string, string>>): Option.Option<Instance> =>
  Option.map(fromLabels("dashed", tags), (metadata): Instance => {
    const ends = Date.parse(tags[ENDS_TAG] ?? "")
    return { providerId: sandboxId, metadata, state: "running", ...(Number.isNaN(ends) ? {} : { endsAt: ends }) }
  })

/** The tags that select our sandboxes (all, one computer's, or one kind). */
export const tagSelector = (query: Query): Record<string, string> => selector("dashed", query)
