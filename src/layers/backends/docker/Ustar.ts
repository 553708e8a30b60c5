/** Small ustar archives, as the Engine's putArchive takes them (root-owned entries). */

export interface UstarEntry {
  /** The path inside the archive, without a leading slash; a directory's ends with `/`. */
  readonly name: string
  readonly mode: number
  /** A regular file's content; absent for a directory. */
  readonly data?: Buffer | undefined
}

const header = (name: string, size: number, mode: number, type: "0" | "5") => {
  const block = Buffer.alloc(512)
  const field = (value: string, offset: number, length: number) => block.write(value, offset, length, "utf8")
  const octal = (value: number, offset: number, length: number) =>
    field(value.toString(8).padStart(length - 1, "0") + "\0", offset, length)
  field(name, 0, 100)
  octal(mode, 100, 8)
  octal(0, 108, 8)
  octal(0, 116, 8)
  octal(size, 124, 12)
  octal(0, 136, 12)
  block.fill(" ", 148, 156)
  field(type, 156, 1)
  field("ustar\0", 257, 6)
  field("00", 263, 2)
  let sum = 0
  for (const byte of block) sum += byte
  field(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8)
  return block
}

/** The archive of these entries (names of at most 100 bytes). */
export const archive = (entries: ReadonlyArray<UstarEntry>): Buffer =>
  Buffer.concat([
    ...entries.flatMap((entry) =>
      entry.data === undefined
        ? [header(entry.name, 0, entry.mode, "5")]
        : [header(entry.name, entry.data.length, entry.mode, "0"), entry.data, Buffer.alloc((512 - (entry.data.length % 512)) % 512)]
    ),
    Buffer.alloc(1024)
  ])
