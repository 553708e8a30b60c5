/**
 * What identifies one of our computers at its provider: one Schema, encoded to the provider's flat
 * string labels (Docker labels, Fly metadata, E2B metadata, Modal tags, the host's computer.json)
 * and decoded back in this one place.
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { computerIdPattern } from "./ComputerIds.js"

/** The server process that created (and, while it lives, holds) a computer. */
export const Owner = Schema.Struct({
  /** Host name of the server's machine: liveness can only be checked on the same host. */
  host: Schema.String,
  pid: Schema.Int,
  /** Start time of that process (/proc/<pid>/stat field 22), to tell a reused pid apart. */
  start: Schema.String
})
export type Owner = typeof Owner.Type

export const ComputerMetadata = Schema.Struct({
  id: Schema.String.pipe(Schema.pattern(computerIdPattern)),
  temporary: Schema.Boolean,
  /** The base image (template, module) it was made from: factory reset recreates from this. */
  image: Schema.String,
  /** ISO time of creation. */
  created: Schema.String,
  /** The server instance (a random id per server process) that created it. */
  instance: Schema.String,
  owner: Schema.optional(Owner),
  /** ISO end of the lease a live server keeps renewing (providers where liveness cannot be checked locally). */
  expires: Schema.optional(Schema.String),
  /** One per create call: finds a computer whose create answer was lost. */
  nonce: Schema.optional(Schema.String),
  /** A computer prepared ahead in a warm pool, not yet handed out. */
  pooled: Schema.optional(Schema.Boolean),
  /** Not created by kilntainers (an adopted container): never restarted, reset or removed. Never a label. */
  external: Schema.optional(Schema.Boolean)
})
export type ComputerMetadata = typeof ComputerMetadata.Type

/** How a provider spells label keys: `kilntainers.computer-id` (Docker) or `kilntainers-computer-id`. */
export type LabelStyle = "dotted" | "dashed"

export const MARKER = "kilntainers"

const field = {
  id: "computer-id",
  temporary: "temporary",
  image: "image",
  created: "created",
  instance: "instance",
  ownerHost: "owner-host",
  ownerPid: "owner-pid",
  ownerStart: "owner-start",
  expires: "expires",
  nonce: "create-nonce",
  pooled: "pooled"
} as const

/** The label key of a field in a provider's style. */
export const labelKey = (style: LabelStyle, name: keyof typeof field): string =>
  `${MARKER}${style === "dotted" ? "." : "-"}${field[name]}`

/** Labels that select computers: ours, optionally one id and one kind. */
export const selector = (
  style: LabelStyle,
  filter: { readonly id?: string | undefined; readonly temporary?: boolean | undefined } = {}
): Record<string, string> => ({
  [MARKER]: "true",
  ...(filter.id === undefined ? {} : { [labelKey(style, "id")]: filter.id }),
  ...(filter.temporary === undefined ? {} : { [labelKey(style, "temporary")]: String(filter.temporary) })
})

/** The flat labels of a computer. */
export const toLabels = (style: LabelStyle, metadata: ComputerMetadata): Record<string, string> => {
  const key = (name: keyof typeof field) => labelKey(style, name)
  return {
    [MARKER]: "true",
    [key("id")]: metadata.id,
    [key("temporary")]: String(metadata.temporary),
    [key("image")]: metadata.image,
    [key("created")]: metadata.created,
    [key("instance")]: metadata.instance,
    ...(metadata.owner === undefined ? {} : {
      [key("ownerHost")]: metadata.owner.host,
      [key("ownerPid")]: String(metadata.owner.pid),
      [key("ownerStart")]: metadata.owner.start
    }),
    ...(metadata.expires === undefined ? {} : { [key("expires")]: metadata.expires }),
    ...(metadata.nonce === undefined ? {} : { [key("nonce")]: metadata.nonce }),
    ...(metadata.pooled ? { [key("pooled")]: "true" } : {})
  }
}

const decode = Schema.decodeUnknownOption(ComputerMetadata)

/**
 * The computer described by a provider's labels, or none when they are not ours or not valid (a
 * container that merely shares our name prefix is never taken for ours).
 */
export const fromLabels = (
  style: LabelStyle,
  labels: Readonly<Record<string, string | undefined>> | undefined,
  fallback: { readonly image?: string | undefined; readonly created?: string | undefined } = {}
): Option.Option<ComputerMetadata> => {
  if (labels === undefined || labels[MARKER] !== "true") return Option.none()
  const get = (name: keyof typeof field) => labels[labelKey(style, name)]
  const temporary = get("temporary")
  if (temporary !== "true" && temporary !== "false") return Option.none()
  const pid = Number(get("ownerPid"))
  const host = get("ownerHost")
  return decode({
    id: get("id"),
    temporary: temporary === "true",
    image: get("image") ?? fallback.image ?? "",
    created: get("created") ?? fallback.created ?? "",
    instance: get("instance") ?? "",
    ...(host !== undefined && Number.isInteger(pid) ? { owner: { host, pid, start: get("ownerStart") ?? "" } } : {}),
    ...(get("expires") === undefined ? {} : { expires: get("expires") }),
    ...(get("nonce") === undefined ? {} : { nonce: get("nonce") }),
    ...(get("pooled") === "true" ? { pooled: true } : {})
  })
}
