// Preloaded into a server under measurement (NODE_OPTIONS="--expose-gc --import <this file>"): on
// SIGUSR2 it collects garbage and writes process.memoryUsage() as JSON to $KT_HEAP_REPORT. It writes
// nothing to stdout (the MCP protocol's in stdio mode). Bench-only.
import { writeFileSync } from "node:fs"

process.on("SIGUSR2", () => {
  globalThis.gc?.()
  globalThis.gc?.()
  writeFileSync(process.env.KT_HEAP_REPORT, JSON.stringify(process.memoryUsage()))
})
