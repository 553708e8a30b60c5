import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, assert, beforeAll, it } from "vitest"
import { execFile, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createServer } from "node:net"
import { dockerWorks, TEST_IMAGE } from "../support/Docker.js"
import { root, waitFor } from "../support/McpHarness.js"
import { describeIf } from "../support/Requirements.js"

// The server image as a team runs it: compose.yaml builds the Dockerfile (on a Node.js base made
// locally by scripts/node-base-image.sh: no registry), `compose up` starts it with a token, the
// MCP tools are used over HTTP through the published port, and `compose down -v` must leave nothing
// of the project behind, nor any computer the server made.

/** `docker compose` (v2) when the engine's CLI has it, else Debian's `docker-compose` (v1). */
const composeCommand = ((): ReadonlyArray<string> | undefined => {
  if (spawnSync("docker", ["compose", "version"], { stdio: "ignore" }).status === 0) return ["docker", "compose"]
  if (spawnSync("docker-compose", ["version"], { stdio: "ignore" }).status === 0) return ["docker-compose"]
  return undefined
})()

const SERVER_IMAGE = "kilntainers-test/server:latest"

const sh = (command: string, args: ReadonlyArray<string>, options: { env?: NodeJS.ProcessEnv; timeout?: number } = {}) => {
  const result = spawnSync(command, args, { cwd: root, encoding: "utf8", env: options.env ?? process.env, timeout: options.timeout ?? 60_000 })
  return { status: result.status, stdout: result.stdout ?? "", stderr: result.stderr ?? "", output: `${result.stdout ?? ""}${result.stderr ?? ""}` }
}
/** For the long steps (image builds, compose up and down): the test worker's event loop keeps running. */
const shAsync = (command: string, args: ReadonlyArray<string>, options: { env?: NodeJS.ProcessEnv; timeout?: number } = {}) =>
  new Promise<{ status: number | null; stdout: string; output: string }>((resolve) => {
    execFile(command, [...args], { cwd: root, env: options.env ?? process.env, timeout: options.timeout ?? 60_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      const status = error === null ? 0 : typeof error.code === "number" ? error.code : null
      resolve({ status, stdout, output: `${stdout}${stderr}${error !== null && status === null ? String(error) : ""}` })
    })
  })
const docker = (...args: ReadonlyArray<string>) => sh("docker", args)
const lines = (text: string) => text.split("\n").map((line) => line.trim()).filter((line) => line.length > 0)

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.on("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))))
    })
  })

describeIf(dockerWorks && composeCommand !== undefined, `a Docker engine with ${TEST_IMAGE}, and docker compose (Debian: docker-compose)`)(
  "the server image (Dockerfile, compose.yaml)",
  () => {
    const project = `ktpackage${process.pid}`
    const token = randomBytes(24).toString("hex")
    let url = ""
    let port = 0
    let env: NodeJS.ProcessEnv = {}
    let down = false
    const compose = (...args: ReadonlyArray<string>) => shAsync(composeCommand![0]!, [...composeCommand!.slice(1), "-p", project, ...args], { env, timeout: 900_000 })
    const projectLeft = () => ({
      containers: lines(docker("ps", "-aq", "--filter", `label=com.docker.compose.project=${project}`).stdout),
      networks: lines(docker("network", "ls", "-q", "--filter", `label=com.docker.compose.project=${project}`).stdout),
      volumes: lines(docker("volume", "ls", "-q", "--filter", `label=com.docker.compose.project=${project}`).stdout)
    })
    /** The server's container, and its hostname (recorded as owner-host on every computer it makes). */
    const server = () => {
      const id = lines(docker("ps", "-q", "--filter", `label=com.docker.compose.project=${project}`, "--filter", "label=com.docker.compose.service=kilntainers").stdout)
      assert.lengthOf(id, 1, "one server container")
      return { id: id[0]!, hostname: docker("inspect", "-f", "{{.Config.Hostname}}", id[0]!).stdout.trim() }
    }
    const computersOf = (ownerHost: string) =>
      lines(docker("ps", "-a", "--format", "{{.Names}}", "--filter", "label=kilntainers=true", "--filter", `label=kilntainers.owner-host=${ownerHost}`).stdout)

    const connect = async () => {
      const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token}` } } })
      const client = new Client({ name: "kilntainers-image-test", version: "1.0.0" })
      await client.connect(transport)
      const call = async (name: string, args: Record<string, unknown>) => {
        const result = await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 })
        return { isError: result.isError === true, structured: result.structuredContent as any, text: JSON.stringify(result.content) }
      }
      return { client, transport, call }
    }

    beforeAll(async () => {
      // The Node base is made from the tests' own Debian image, whatever its tag.
      const base = await shAsync("bash", ["scripts/node-base-image.sh"], { env: { ...process.env, KILNTAINERS_DEBIAN_IMAGE: TEST_IMAGE }, timeout: 600_000 })
      assert.strictEqual(base.status, 0, base.output)
      console.error(`image test: base ${base.stdout.trim()}`)
      port = await freePort()
      url = `http://127.0.0.1:${port}/mcp`
      env = {
        ...process.env,
        KILNTAINERS_AUTH_TOKEN: token,
        KILNTAINERS_NODE_IMAGE: base.stdout.trim(),
        KILNTAINERS_SERVER_IMAGE: SERVER_IMAGE,
        KILNTAINERS_PUBLISH_PORT: String(port),
        KILNTAINERS_IMAGE: TEST_IMAGE
      }
      const up = await compose("up", "-d", "--build")
      assert.strictEqual(up.status, 0, up.output)
      console.error(`image test: compose up done (project ${project}, port ${port})`)
      const healthy = await waitFor(() => fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2_000) }).then((r) => r.ok, () => false), 90_000)
      assert.isTrue(healthy, `the server did not answer /healthz:\n${(await compose("logs", "--tail", "50")).output}`)
    }, 900_000)

    afterAll(async () => {
      if (!down && env.KILNTAINERS_AUTH_TOKEN !== undefined) await compose("down", "-v", "--timeout", "30")
    }, 120_000)

    it("answers /healthz and refuses /mcp without the token, through the published port only on loopback", async () => {
      const health = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(10_000) })
      assert.strictEqual(health.status, 200)
      assert.strictEqual((await health.json()).status, "ok")
      const denied = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } }),
        signal: AbortSignal.timeout(10_000)
      })
      assert.strictEqual(denied.status, 401)
      const ports = docker("port", server().id, "8435/tcp").stdout.trim()
      assert.strictEqual(ports, `127.0.0.1:${port}`)
      assert.notInclude((await compose("logs")).output, token)
    })

    it("runs processes on computers of the host's engine, through the agent the image ships", async () => {
      const { client, call } = await connect()
      try {
        const { tools } = await client.listTools()
        assert.includeMembers(tools.map((t) => t.name), ["sandbox_exec", "spawn", "stdout", "wait", "kill", "file_write", "file_read", "computer_list"])
        const exec = await call("sandbox_exec", { command: "echo from-the-image; cat /etc/debian_version; echo $HOME" })
        assert.isFalse(exec.isError, exec.text)
        assert.match(exec.structured.stdout, /^from-the-image\n\d+[.\d]*\n\/home\/agent\n$/)
        const computer = `kilntainer-${exec.structured.computer_id}`
        assert.include(computersOf(server().hostname), computer)

        // The agent copied into the computer is the server image's own helper, as its manifest records.
        const manifests = docker("exec", server().id, "sh", "-c", "cat /app/native/build/manifest.json 2>/dev/null || cat /app/prebuilt/manifest.json")
        const platform = process.arch === "arm64" ? "linux-arm64" : "linux-x64"
        const expected = JSON.parse(manifests.stdout).platforms[platform].files["kt-agent"].sha256
        const inside = docker("exec", computer, "sha256sum", "/.kilntainers/kt-agent")
        assert.strictEqual(inside.stdout.split(" ")[0], expected, inside.output)

        const spawned = await call("spawn", { command: "for i in 1 2 3; do echo tick $i; sleep 0.2; done; sleep 300", background: true })
        assert.isFalse(spawned.isError, spawned.text)
        const waited = await call("wait", { id: spawned.structured.pid, pattern: "tick 3", timeoutMs: 20_000 })
        assert.isFalse(waited.isError, waited.text)
        const output = await call("stdout", { id: spawned.structured.pid })
        assert.include(JSON.stringify(output.structured), "tick 3")
        const killed = await call("kill", { id: spawned.structured.pid, signal: "SIGKILL" })
        assert.isFalse(killed.isError, killed.text)

        const written = await call("file_write", { path: "notes/hello.txt", content: "written over HTTP\n" })
        assert.isFalse(written.isError, written.text)
        const read = await call("file_read", { path: "/home/agent/notes/hello.txt" })
        assert.include(JSON.stringify(read.structured), "written over HTTP")
      } finally {
        await client.close()
      }
    })

    it("keeps two sessions' computers apart, and removes a session's temporary computer when it ends", async () => {
      const a = await connect()
      const b = await connect()
      try {
        const ca = (await a.call("sandbox_exec", { command: "hostname" })).structured.computer_id
        const cb = (await b.call("sandbox_exec", { command: "hostname" })).structured.computer_id
        assert.notStrictEqual(ca, cb)
        const listed = (await b.call("computer_list", {})).structured.computers.map((c: { computer_id: string }) => c.computer_id)
        assert.notInclude(listed, ca)
        assert.include(computersOf(server().hostname), `kilntainer-${ca}`)
        await a.transport.terminateSession()
        assert.isTrue(await waitFor(() => !computersOf(server().hostname).includes(`kilntainer-${ca}`), 30_000), `kilntainer-${ca} is still there`)
        assert.include(computersOf(server().hostname), `kilntainer-${cb}`)
      } finally {
        await a.client.close().catch(() => undefined)
        await b.client.close()
      }
    })

    it("compose down -v stops the server, which removes its computers, and leaves nothing of the project", async () => {
      const open = await connect()
      const id = (await open.call("sandbox_exec", { command: "true" })).structured.computer_id
      const { hostname } = server()
      assert.include(computersOf(hostname), `kilntainer-${id}`)
      const before = projectLeft()
      assert.lengthOf(before.containers, 1)
      assert.isAtLeast(before.networks.length + before.volumes.length, 2, "the project's network and state volume exist")
      // The session is still open: the server removes the computer when it is told to stop.
      const result = await compose("down", "-v", "--timeout", "30")
      down = true
      assert.strictEqual(result.status, 0, result.output)
      await open.client.close().catch(() => undefined)
      assert.deepStrictEqual(projectLeft(), { containers: [], networks: [], volumes: [] })
      assert.deepStrictEqual(computersOf(hostname), [])
      const answered = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(5_000) }).then(() => true, () => false)
      assert.isFalse(answered, "something still answers on the port")
    }, 120_000)
  }
)
