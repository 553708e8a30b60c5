// Appends 1 GiB to an OutputLog in 64 KiB chunks and prints MB/s, beside a baseline run in the
// same process: copying the same chunks into one preallocated 1 MiB buffer (a bare memcpy ring,
// the ceiling for any implementation that copies its input).
//
//   npm run build && node bench/output-log.mjs
//   node bench/output-log.mjs path/to/OutputLog.js   (any compiled copy of src/actors/OutputLog.ts)
import { pathToFileURL } from "node:url"

const modulePath = process.argv[2]
  ? pathToFileURL(process.argv[2]).href
  : new URL("../dist/src/actors/OutputLog.js", import.meta.url).href
const { OutputLog } = await import(modulePath)

const CHUNK = 64 * 1024
const TOTAL = 1024 * 1024 * 1024
const ROUNDS = 3

// 16 MiB of distinct chunks: bigger than the caches, as fresh pipe reads would be
const chunks = Array.from({ length: 256 }, (_, i) => Buffer.alloc(CHUNK, 0x20 + (i % 95)))

const timeIt = (run) => {
  const start = process.hrtime.bigint()
  run()
  const seconds = Number(process.hrtime.bigint() - start) / 1e9
  return TOTAL / 1e6 / seconds
}

const outputLog = () => {
  const log = new OutputLog()
  for (let written = 0, i = 0; written < TOTAL; written += CHUNK, i++) log.append(chunks[i & 255])
  if (log.total !== TOTAL) throw new Error(`total ${log.total} !== ${TOTAL}`)
  // a read at the end, to be sure the work was not for nothing
  if (log.read(TOTAL - 10).text.length !== 10) throw new Error("bad read")
}

const memcpyRing = () => {
  const ring = Buffer.alloc(1024 * 1024)
  let at = 0
  for (let written = 0, i = 0; written < TOTAL; written += CHUNK, i++) {
    ring.set(chunks[i & 255], at)
    at = (at + CHUNK) % ring.length
  }
  if (ring[0] === 0) throw new Error("unreachable")
}

const best = (run) => Math.max(...Array.from({ length: ROUNDS }, () => timeIt(run)))

best(outputLog) // warm up
const subject = best(outputLog)
const baseline = best(memcpyRing)
console.log(`OutputLog.append, 1 GiB in 64 KiB chunks: ${subject.toFixed(0)} MB/s`)
console.log(`baseline (memcpy into a 1 MiB ring):       ${baseline.toFixed(0)} MB/s`)
console.log(`ratio subject/baseline: ${(subject / baseline).toFixed(2)}`)
