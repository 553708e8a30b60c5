/** Sizes as people write them on the command line (`256m`, `1g`, `512KiB`, bytes), and as we print them. */

/**
 * Parses a size such as `256m`, `1g`, `512KiB`, `64b` (`docker run`'s spelling) or a number of bytes;
 * units are powers of 1024. Zero is a size: a caller that needs more says so.
 */
export const parseSize = (text: string): number | undefined => {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])i?)?b?\s*$/i.exec(text)
  if (match === null) return undefined
  const unit = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 }[(match[2] ?? "").toLowerCase()] ?? 1
  const bytes = Math.floor(Number(match[1]) * unit)
  return Number.isSafeInteger(bytes) ? bytes : undefined
}

/** A size for people: `256 MiB`, `1.5 GiB`, `800 bytes`. */
export const formatSize = (bytes: number): string => {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
  let value = bytes
  let unit = 0
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024
    unit++
  }
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[unit]}`
}
