import Docker from "dockerode"
import { spawnSync } from "node:child_process"

/** The image the Docker tests use (built locally by scripts/docker-test-image.sh; no registry needed). */
export const TEST_IMAGE = "debian:bookworm-slim"

/** A dockerode client on the default local socket. */
export const docker = () => new Docker({ socketPath: "/var/run/docker.sock" })

/**
 * A Docker engine answers on the default socket and has the test image. Checked synchronously (the
 * result decides which describe blocks run) with a small node child that asks the Engine API.
 */
export const dockerWorks = (() => {
  const probe = `
    const http = require("node:http")
    const get = (path) => new Promise((resolve) => {
      const req = http.get({ socketPath: "/var/run/docker.sock", path, timeout: 1500 }, (res) => { res.resume(); resolve(res.statusCode) })
      req.on("error", () => resolve(0)); req.on("timeout", () => { req.destroy(); resolve(0) })
    })
    get("/_ping").then((ping) => ping === 200 ? get("/images/${encodeURIComponent(TEST_IMAGE)}/json") : 0).then((code) => process.exit(code === 200 ? 0 : 1))
  `
  const result = spawnSync(process.execPath, ["-e", probe], { stdio: "ignore", timeout: 5000 })
  return result.status === 0
})()
