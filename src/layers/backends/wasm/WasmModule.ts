/**
 * Memory limits of a WebAssembly module, read from (and rewritten in) its binary.
 *
 * Worker `resourceLimits` do not bound wasm memory, so the backend bounds it in the module: a module
 * whose *initial* memory is over the cap cannot run and is refused; a module that declares no
 * maximum, or one over the cap, gets its declared maximum lowered to the cap (memory.grow beyond it
 * fails inside the module, which sees an ordinary out-of-memory). Modules that import their memory
 * are refused (nothing here provides one).
 */

const PAGE = 64 * 1024
const MAGIC = [0x00, 0x61, 0x73, 0x6d]

export interface MemoryLimits {
  readonly initialPages: number
  readonly maximumPages: number | undefined
}

export type CapResult =
  | { readonly _tag: "Ok"; readonly bytes: Uint8Array; readonly declared: MemoryLimits; readonly capped: boolean }
  | { readonly _tag: "Refused"; readonly reason: string }

const readLeb = (bytes: Uint8Array, start: number): { readonly value: number; readonly next: number } => {
  let value = 0
  let shift = 0
  let at = start
  for (;;) {
    const byte = bytes[at]
    if (byte === undefined) throw new Error("truncated LEB128")
    at++
    value += (byte & 0x7f) * 2 ** shift
    if ((byte & 0x80) === 0) return { value, next: at }
    shift += 7
    if (shift > 35) throw new Error("LEB128 too long")
  }
}

const writeLeb = (value: number): Array<number> => {
  const out: Array<number> = []
  let rest = value
  do {
    let byte = rest & 0x7f
    rest = Math.floor(rest / 128)
    if (rest !== 0) byte |= 0x80
    out.push(byte)
  } while (rest !== 0)
  return out
}

/** The memory of a module: from its memory section, or from an import. */
const scan = (bytes: Uint8Array) => {
  if (bytes.length < 8 || MAGIC.some((b, i) => bytes[i] !== b)) throw new Error("not a WebAssembly module")
  let at = 8
  let importsMemory = false
  let section: { readonly start: number; readonly end: number; readonly contentStart: number } | undefined
  while (at < bytes.length) {
    const id = bytes[at]!
    const size = readLeb(bytes, at + 1)
    const contentStart = size.next
    const end = contentStart + size.value
    if (id === 2) {
      // import section: module name, field name, kind (2 = memory)
      let p = contentStart
      const count = readLeb(bytes, p)
      p = count.next
      for (let i = 0; i < count.value; i++) {
        const moduleName = readLeb(bytes, p)
        p = moduleName.next + moduleName.value
        const field = readLeb(bytes, p)
        p = field.next + field.value
        const kind = bytes[p++]
        if (kind === 0) p = readLeb(bytes, p).next
        else if (kind === 1) {
          p++ // reftype
          const flags = bytes[p++]!
          p = readLeb(bytes, p).next
          if (flags & 1) p = readLeb(bytes, p).next
        } else if (kind === 2) {
          importsMemory = true
          break
        } else if (kind === 3) p += 2
        else break
      }
    }
    if (id === 5) section = { start: at, end, contentStart }
    at = end
  }
  return { importsMemory, section }
}

/** Reads the declared limits of the module's (first) memory, when it defines one. */
export const memoryLimits = (bytes: Uint8Array): MemoryLimits | undefined => {
  const { section } = scan(bytes)
  if (section === undefined) return undefined
  let p = readLeb(bytes, section.contentStart).next
  const flags = bytes[p++]!
  const initial = readLeb(bytes, p)
  const maximum = flags & 1 ? readLeb(bytes, initial.next).value : undefined
  return { initialPages: initial.value, maximumPages: maximum }
}

/** Checks the module's memory against `maxBytes`, lowering its declared maximum when needed. */
export const capMemory = (bytes: Uint8Array, maxBytes: number): CapResult => {
  let found
  try {
    found = scan(bytes)
  } catch (error) {
    return { _tag: "Refused", reason: `cannot read the module: ${error instanceof Error ? error.message : String(error)}` }
  }
  if (found.importsMemory) return { _tag: "Refused", reason: "the module imports its memory; only modules that define their own memory are supported" }
  const capPages = Math.floor(maxBytes / PAGE)
  const section = found.section
  if (section === undefined) return { _tag: "Ok", bytes, declared: { initialPages: 0, maximumPages: 0 }, capped: false }
  let p = section.contentStart
  const count = readLeb(bytes, p)
  p = count.next
  const flags = bytes[p]!
  if (flags & ~1) return { _tag: "Refused", reason: `unsupported memory (flags ${flags}: shared or 64-bit)` }
  const initial = readLeb(bytes, p + 1)
  const maximum = flags & 1 ? readLeb(bytes, initial.next) : undefined
  const declared = { initialPages: initial.value, maximumPages: maximum?.value }
  if (initial.value > capPages) {
    return {
      _tag: "Refused",
      reason: `the module needs ${(initial.value * PAGE) / 2 ** 20} MiB of memory at start, over the cap of ${maxBytes / 2 ** 20} MiB (--wasm-max-memory)`
    }
  }
  if (maximum !== undefined && maximum.value <= capPages) return { _tag: "Ok", bytes, declared, capped: false }
  // Rewrite the memory section: same count and initial, maximum = the cap.
  const limitsEnd = maximum === undefined ? initial.next : maximum.next
  const content = [
    ...bytes.subarray(section.contentStart, p),
    1,
    ...writeLeb(initial.value),
    ...writeLeb(capPages),
    ...bytes.subarray(limitsEnd, section.end)
  ]
  const rebuilt = new Uint8Array(bytes.length - (section.end - section.start) + 1 + writeLeb(content.length).length + content.length)
  rebuilt.set(bytes.subarray(0, section.start), 0)
  let at = section.start
  rebuilt[at++] = 5
  for (const b of writeLeb(content.length)) rebuilt[at++] = b
  rebuilt.set(content, at)
  at += content.length
  rebuilt.set(bytes.subarray(section.end), at)
  return { _tag: "Ok", bytes: rebuilt, declared, capped: true }
}
