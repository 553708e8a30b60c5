// The server's CPU while a guest floods the stderr of its sandbox's pid 1 (issue 19): one server
// (the built CLI over stdio MCP, host backend), one computer whose guest takes pid 1's stderr
// (pidfd_getfd) and writes 64 KiB blocks into it for S seconds, retrying after every error; the
// server's user+system CPU over that time against the same time idle, from /proc/<pid>/stat.
//   npx vite-node bench/pid1-flood.ts [S]          (default 10; after npm run build)
//   KILNTAINERS_TEST_BIN=<other checkout>/dist/bin/kilntainers.mjs npx vite-node bench/pid1-flood.ts
import { readFileSync } from "node:fs"
import { startServer } from "../test/support/McpHarness.js"

const seconds = Number(process.argv[2] ?? 10)
const TICKS = 100 // USER_HZ on Linux

const FLOOD = `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(438, os.pidfd_open(1), 2, 0)
block, wrote, errors, end = b"x" * 65536, 0, 0, time.time() + ${seconds}
while time.time() < end:
    try:
        wrote += os.write(fd, block)
    except OSError:
        errors += 1
print(wrote, errors)
`

const cpuTicks = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return Number(fields[11]) + Number(fields[12]) // utime, stime
}
const percent = (ticks: number) => `${((100 * ticks) / (TICKS * seconds)).toFixed(1)}%`
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const server = await startServer(["--backend", "host", "--log-level", "warning"])
const pid = server.pid!
const ready = await server.call("sandbox_exec", { command: "true", computer_id: "flood" })
if (ready.isError) throw new Error(ready.text)

const idleStart = cpuTicks(pid)
await sleep(seconds * 1000)
const idle = cpuTicks(pid) - idleStart

const floodStart = cpuTicks(pid)
const flood = await server.call("sandbox_exec", { args: ["python3", "-c", FLOOD], computer_id: "flood", timeout: seconds + 60 })
const flooded = cpuTicks(pid) - floodStart
const [wrote = "?", errors = "?"] = String(flood.structured?.stdout ?? "").trim().split(" ")

console.log(`server CPU over ${seconds} s: idle ${percent(idle)}, during the flood ${percent(flooded)}`)
console.log(`the guest wrote ${(Number(wrote) / 2 ** 20).toFixed(0)} MiB through pid 1's stderr (${errors} writes refused)`)
await server.client.close()
