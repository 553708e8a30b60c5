/**
 * The disk quota of a WASM computer (`--wasm-max-disk`): file contents plus `INODE_BYTES` for
 * every name (file, directory, link), so a million empty files reach it too.
 *
 * Writers run in several threads at once (a shell worker and its tool workers, for every process
 * of the computer), so the count lives in shared memory: a `BigInt64Array` of
 * `[used, limit]`. A writer *reserves* what a write adds before it writes (`reserve`, a
 * compare-and-swap that fails rather than pass the limit: ENOSPC) and also counts it in its
 * process's cell. The server recounts when it applies the changes (ComputerFs.ts): `used` moves by
 * what really changed minus what was reserved, and what a killed process had reserved is given back.
 */

/** What one name costs, beyond its contents. */
export const INODE_BYTES = 1024

/** The default `--wasm-max-disk`. */
export const DEFAULT_MAX_DISK_BYTES = 256 * 1024 * 1024

/** The error a write past the quota gets, as programs print it. */
export const ENOSPC_TEXT = "No space left on device"

/** `[used, limit]` of one computer. */
export const makeQuota = (limit: number, used: number): BigInt64Array => {
  const cells = new BigInt64Array(new SharedArrayBuffer(16))
  cells[0] = BigInt(used)
  cells[1] = BigInt(limit)
  return cells
}

/** One process's reservations not yet settled by the server. */
export const makeReservedCell = (): BigInt64Array => new BigInt64Array(new SharedArrayBuffer(8))

/**
 * Takes `bytes` of the quota for a write, or returns false (nothing taken) when it would pass the
 * limit. The same algorithm is in the tool worker (ToolWorker.ts).
 */
export const reserve = (quota: BigInt64Array, reserved: BigInt64Array, bytes: number): boolean => {
  if (bytes <= 0) return true
  const amount = BigInt(bytes)
  for (;;) {
    const used = Atomics.load(quota, 0)
    if (used + amount > Atomics.load(quota, 1)) return false
    if (Atomics.compareExchange(quota, 0, used, used + amount) === used) {
      Atomics.add(reserved, 0, amount)
      return true
    }
  }
}

