// Preloaded into a server under measurement (NODE_OPTIONS="--expose-gc --import <this file>"): on
// SIGUSR2 it writes to $KT_HEAP_REPORT, as JSON, process.memoryUsage() and V8's heap spaces (their
// size and use) before a full collection, then memoryUsage() after two. It writes nothing to stdout
// (the MCP protocol's in stdio mode). With $KT_HEAP_SNAPSHOT set, it then writes a V8 heap snapshot
// there too (for what holds the memory: retainers, by `node --inspect` or a script). Bench-only.
import { readFileSync, writeFileSync } from "node:fs"
import { getHeapSpaceStatistics, writeHeapSnapshot } from "node:v8"

process.on("SIGUSR2", () => {
  const before = process.memoryUsage()
  const spaces = Object.fromEntries(getHeapSpaceStatistics().filter((space) => space.space_size > 0)
    .map((space) => [space.space_name, { size: space.space_size, used: space.space_used_size }]))
  // The resident set by kind (anonymous: V8's heap, malloc, stacks; file: the node binary, libraries).
  const rollup = Object.fromEntries([...readFileSync("/proc/self/smaps_rollup", "utf8").matchAll(/^(Rss|Anonymous|Pss_File|Pss_Anon):\s+(\d+) kB/gm)]
    .map(([, key, kb]) => [key, Number(kb) * 1024]))
  globalThis.gc?.()
  globalThis.gc?.()
  writeFileSync(process.env.KT_HEAP_REPORT, JSON.stringify({ before, rollup, spaces, after: process.memoryUsage() }))
  if (process.env.KT_HEAP_SNAPSHOT) writeHeapSnapshot(process.env.KT_HEAP_SNAPSHOT)
})
