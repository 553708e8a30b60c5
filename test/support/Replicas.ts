/**
 * Several kilntainers HTTP servers (replicas) over one engine behind Debian's nginx, round-robin:
 * nothing shared but the engine and the token, each replica with its own state directory. nginx
 * runs as this user from a scratch prefix (its own config, pid file and logs), on an ephemeral
 * port the kernel chose, and logs which replica answered each request.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type HttpServerProcess, startHttpServer } from "./McpHarness.js"

export const nginxWorks = spawnSync("nginx", ["-v"], { stdio: "ignore" }).status === 0

/** A port the kernel hands out as ephemeral, free a moment ago (nginx cannot listen on port 0). */
const ephemeralPort = () =>
  new Promise<number>((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => (typeof address === "object" && address !== null ? resolve(address.port) : reject(new Error("no port"))))
    })
  })

export interface Replicas {
  readonly url: string
  readonly replicas: ReadonlyArray<HttpServerProcess>
  /** The replica port that answered each request so far, from nginx's access log. */
  readonly answeredBy: () => ReadonlyArray<number>
  readonly stop: () => Promise<void>
}

export const startReplicas = async (count: number, args: ReadonlyArray<string>, env: Record<string, string>): Promise<Replicas> => {
  const replicas = await Promise.all(Array.from({ length: count }, () => startHttpServer(args, env)))
  const prefix = mkdtempSync(join(tmpdir(), "kt-nginx-"))
  const port = await ephemeralPort()
  writeFileSync(
    join(prefix, "nginx.conf"),
    `pid ${prefix}/nginx.pid;
error_log ${prefix}/error.log warn;
worker_processes 1;
events { worker_connections 256; }
http {
  access_log off;
  log_format upstream '$upstream_addr';
  client_body_temp_path ${prefix}/body;
  proxy_temp_path ${prefix}/proxy;
  fastcgi_temp_path ${prefix}/fastcgi;
  uwsgi_temp_path ${prefix}/uwsgi;
  scgi_temp_path ${prefix}/scgi;
  upstream kilntainers {
${replicas.map((replica) => `    server 127.0.0.1:${replica.port};`).join("\n")}
  }
  server {
    listen 127.0.0.1:${port};
    access_log ${prefix}/upstream.log upstream;
    client_max_body_size 40m;
    location / {
      proxy_pass http://kilntainers;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host 127.0.0.1;
      proxy_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
`
  )
  const nginx: ChildProcess = spawn("nginx", ["-p", prefix, "-c", join(prefix, "nginx.conf"), "-g", "daemon off;"], { stdio: ["ignore", "ignore", "pipe"] })
  let nginxErr = ""
  nginx.stderr!.on("data", (chunk: Buffer) => (nginxErr += chunk.toString()))
  const url = `http://127.0.0.1:${port}/mcp`
  for (let i = 0; ; i++) {
    const up = await fetch(url.replace(/\/mcp$/, "/healthz")).then((r) => r.ok, () => false)
    if (up) break
    if (i > 100 || nginx.exitCode !== null) throw new Error(`nginx did not start: ${nginxErr}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  return {
    url,
    replicas,
    answeredBy: () => {
      const log = readFileSync(join(prefix, "upstream.log"), "utf8")
      return log.split("\n").filter((line) => line !== "").map((line) => Number(line.split(":").pop()))
    },
    stop: async () => {
      nginx.kill("SIGQUIT")
      await Promise.all(replicas.map((replica) => replica.stop()))
    }
  }
}
