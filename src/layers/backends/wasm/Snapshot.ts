/**
 * The format of a permanent WASM computer's snapshot: `{"id", "createdAt", "labels", "fs"}`, its
 * header first (the computer's metadata as flat labels, ComputerMetadata.ts) and then the tree as
 * JSON with file contents in base64. Written piece by piece with awaited writes (so a large
 * filesystem never holds the server's thread for long), to a temporary file renamed into place.
 * The header is read alone (`readHeader`), without the tree: finding computers costs a small read
 * per snapshot. Snapshots of earlier versions have no labels: they are permanent computers.
 */
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { open, rename, rm } from "node:fs/promises"
import { dir, shared, type VDir, type VNode } from "./Vfs.js"

export const HOME = "/home/agent"

/** A new computer's tree: an empty /home/agent, /tmp, /bin, and /etc/hostname. */
export const baseImage = (id: string): VDir => {
  const root = dir()
  const make = (path: string) => {
    let node = root
    for (const part of path.split("/").filter(Boolean)) {
      let next = node.entries.get(part)
      if (next === undefined) {
        next = dir()
        node.entries.set(part, next)
      }
      node = next as VDir
    }
    return node
  }
  make(HOME)
  make("/tmp")
  make("/bin")
  make("/etc").entries.set("hostname", { kind: "file", data: shared(new TextEncoder().encode(`${id}\n`)) })
  return root
}

/** Rebuilds a tree from a snapshot's `fs` value; throws when it is damaged. */
export const deserialize = (value: unknown): VNode => {
  if (typeof value !== "object" || value === null) throw new Error("invalid snapshot")
  if ("f" in value && typeof value.f === "string") return { kind: "file", data: shared(Buffer.from(value.f, "base64")) }
  if ("l" in value && typeof value.l === "string") return { kind: "link", target: value.l }
  if ("d" in value && typeof value.d === "object" && value.d !== null) {
    const out = dir()
    for (const [name, child] of Object.entries(value.d)) out.entries.set(name, deserialize(child))
    return out
  }
  throw new Error("invalid snapshot")
}

/** Base64 in slices of this many bytes (a multiple of 3, so the slices join into one string). */
const SLICE = 3 * 256 * 1024

export const SnapshotHeader = Schema.Struct({
  id: Schema.String,
  createdAt: Schema.String,
  labels: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.String }))
})
export type SnapshotHeader = typeof SnapshotHeader.Type

const decodeHeader = Schema.decodeUnknownOption(Schema.parseJson(SnapshotHeader))
const decodeSnapshot = Schema.decodeUnknownOption(Schema.parseJson(Schema.Struct({ ...SnapshotHeader.fields, fs: Schema.Unknown })))

/** Where the tree starts. A string cannot hold it unescaped, so its first occurrence ends the header. */
const FS_KEY = `,"fs":`
/** The most a header is read for: labels are a few hundred bytes. */
const HEADER_BYTES = 16 * 1024

/** The header of the snapshot at `path`, or none when it is damaged; fails when it cannot be read. */
export const readHeader = async (path: string): Promise<Option.Option<SnapshotHeader>> => {
  const file = await open(path, "r")
  try {
    const buffer = Buffer.alloc(HEADER_BYTES)
    const { bytesRead } = await file.read(buffer, 0, HEADER_BYTES, 0)
    const text = buffer.subarray(0, bytesRead).toString("utf8")
    const end = text.indexOf(FS_KEY)
    return end < 0 ? Option.none() : decodeHeader(`${text.slice(0, end)}}`)
  } finally {
    await file.close()
  }
}

/** The header and tree of a snapshot's text, or none when it is damaged. */
export const parseSnapshot = (text: string): Option.Option<{ readonly header: SnapshotHeader; readonly root: VDir }> =>
  Option.flatMap(decodeSnapshot(text), ({ fs, ...header }) => {
    try {
      const root = deserialize(fs)
      return root.kind === "dir" ? Option.some({ header, root }) : Option.none()
    } catch {
      return Option.none()
    }
  })

/** Writes the header and the tree to `path` (through `path.<pid>.tmp`, renamed into place). */
export const writeSnapshot = async (path: string, header: SnapshotHeader, root: VDir): Promise<void> => {
  const tmp = `${path}.${process.pid}.tmp`
  const file = await open(tmp, "w")
  try {
    const out = (text: string) => file.write(text)
    const node = async (value: VNode): Promise<void> => {
      if (value.kind === "link") return void (await out(`{"l":${JSON.stringify(value.target)}}`))
      if (value.kind === "file") {
        await out(`{"f":"`)
        const bytes = value.data
        for (let at = 0; at < bytes.byteLength; at += SLICE) {
          await out(Buffer.from(bytes.buffer, bytes.byteOffset + at, Math.min(SLICE, bytes.byteLength - at)).toString("base64"))
        }
        return void (await out(`"}`))
      }
      await out(`{"d":{`)
      let first = true
      for (const [name, child] of value.entries) {
        await out(`${first ? "" : ","}${JSON.stringify(name)}:`)
        first = false
        await node(child)
      }
      await out("}}")
    }
    await out(`${JSON.stringify(header).slice(0, -1)}${FS_KEY}`)
    await node(root)
    await out("}")
  } finally {
    await file.close()
  }
  await rename(tmp, path).catch(async (error: unknown) => {
    await rm(tmp, { force: true })
    throw error
  })
}
