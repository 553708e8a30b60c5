/**
 * A rig for attacking the egress proxy's credential injection from the outside, as a guest would:
 * the proxy as `Egress.make` builds it (its audit log in a file) behind a TCP listener that stands
 * for one computer's relay, and upstreams on 127.0.0.1 — plain HTTP and HTTPS with a CA of their
 * own — that echo the credential they receive in every way a careless service might. Clients are
 * real: curl, and a raw TLS client for what curl will not send (another SNI, two Hosts on one
 * connection, an absolute request target). Nothing leaves this machine: every name is pinned to
 * 127.0.0.1 (or answered by a lookup stub). The proxy runs in this process, or (`mode`) in a
 * process of its own (fixtures/egress-proxy.mjs, the built modules) as root or as an unprivileged
 * user, the two ways the security suite runs the server.
 */
import { Effect, Exit, FiberSet, Redacted, Runtime, Scope } from "effect"
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createHttpsServer } from "node:https"
import { type AddressInfo, connect, createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { connect as tlsConnect, type TLSSocket } from "node:tls"
import { fileURLToPath } from "node:url"
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib"
import * as AuditLog from "../../src/layers/AuditLog.js"
import * as CertificateAuthority from "../../src/layers/egress/CertificateAuthority.js"
import * as Egress from "../../src/layers/egress/Egress.js"
import type { Lookup } from "../../src/layers/egress/Upstream.js"
import { defaultSettings } from "../../src/services/Settings.js"
import { dropPrivileges, type Mode, runningAsRoot, underCi, UNPRIVILEGED } from "./HostServer.js"

/** The credential every rig injects: a scheme prefix and a token with both cases in it. */
export const TOKEN = "kt-Sec-9f8E7d6C5b4A-token"
export const SECRET = `Bearer ${TOKEN}`

export interface Seen {
  readonly scheme: "http" | "https"
  /** The SNI the upstream was asked for (https). */
  readonly servername: string | undefined
  readonly url: string
  readonly headers: IncomingMessage["headers"]
}

export interface Upstreams {
  readonly httpPort: number
  readonly httpsPort: number
  readonly caPem: string
  readonly caFile: string
  readonly connections: () => number
  readonly seen: Array<Seen>
}

/** Every way the echoes below write the credential they received (`auth`). */
export const echoes = (auth: string) => {
  const bare = auth.replace(/^\S+\s+/, "")
  const mixed = [...bare].map((char, index) => (index % 2 === 0 ? char.toUpperCase() : char.toLowerCase())).join("")
  return { full: auth, bare, upper: auth.toUpperCase(), lower: bare.toLowerCase(), mixed }
}

const reflectBody = (auth: string) =>
  Object.entries(echoes(auth)).map(([name, value]) => `${name}=${value}`).join("\n") + "\n"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * The upstreams' routes: `/echo` (the request's headers as JSON), `/reflect` (the credential in the
 * status phrase, header names and values, and the body, with and without its prefix, in changed
 * case), `/stream?size=N` (that body in N-byte writes), `/gzip`, `/deflate`, `/br`, `/gzip-br`
 * (compressed although the proxy asked for identity), `/compress` (a coding nobody decodes),
 * `/redirect-http` (to the same host over plain HTTP); anything else `hello <host> <path>`.
 */
const route = (scheme: "http" | "https", ports: () => { http: number }) => async (req: IncomingMessage, res: ServerResponse) => {
  const auth = String(req.headers.authorization ?? "")
  const { bare } = echoes(auth)
  const path = (req.url ?? "/").split("?")[0]
  const body = reflectBody(auth)
  if (path === "/echo") {
    res.setHeader("content-type", "application/json")
    return res.end(JSON.stringify({ scheme, url: req.url, headers: req.headers }))
  }
  if (path === "/reflect") {
    res.setHeader("x-bare", bare)
    res.setHeader("x-upper", auth.toUpperCase())
    res.setHeader("set-cookie", [`session=${bare.toLowerCase()}`, "other=1"])
    if (/^[A-Za-z0-9-]+$/.test(bare)) res.setHeader(`x-${bare}`, "named")
    res.writeHead(200, `OK ${bare}`)
    return res.end(body)
  }
  if (path === "/stream") {
    const size = Number(new URL(req.url ?? "/", "http://x").searchParams.get("size") ?? "1")
    res.writeHead(200, { "content-type": "text/plain" })
    for (let at = 0; at < body.length; at += size) {
      res.write(body.slice(at, at + size))
      await sleep(2)
    }
    return res.end()
  }
  const compressed: Record<string, readonly [string, Buffer]> = {
    "/gzip": ["gzip", gzipSync(body)],
    "/deflate": ["deflate", deflateSync(body)],
    "/br": ["br", brotliCompressSync(body)],
    "/gzip-br": ["gzip, br", brotliCompressSync(gzipSync(body))],
    "/compress": ["compress", Buffer.from(body)]
  }
  const coded = compressed[path ?? ""]
  if (coded !== undefined) {
    res.writeHead(200, { "content-encoding": coded[0], "content-length": coded[1].length })
    return res.end(coded[1])
  }
  if (path === "/redirect-http") {
    const host = String(req.headers.host ?? "").replace(/:\d+$/, "")
    res.writeHead(302, { location: `http://${host}:${ports().http}/landed` })
    return res.end()
  }
  res.end(`hello ${req.headers.host} ${req.url}\n`)
}

const listen = (server: Server) =>
  Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

/** The upstreams, until the Scope closes. */
export const startUpstreams = (dir: string): Effect.Effect<Upstreams, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const ca = yield* CertificateAuthority.make({ dir: join(dir, "upstream-ca") })
    const caFile = join(dir, "upstream-ca.pem")
    writeFileSync(caFile, ca.certificate)
    const runtime = yield* Effect.runtime<never>()
    let connections = 0
    let httpPort = 0
    const seen: Array<Seen> = []
    const handler = (scheme: "http" | "https") => {
      const respond = route(scheme, () => ({ http: httpPort }))
      return (req: IncomingMessage, res: ServerResponse) => {
        const servername = scheme === "https" ? ((req.socket as TLSSocket).servername || undefined) : undefined
        seen.push({ scheme, servername, url: req.url ?? "", headers: req.headers })
        req.resume()
        req.on("end", () => void respond(req, res))
      }
    }
    const http = createHttpServer(handler("http"))
    const https = createHttpsServer({
      SNICallback: (name, done) =>
        Runtime.runPromise(runtime)(ca.leaf(name)).then((context) => done(null, context), (error) => done(error as Error))
    }, handler("https"))
    for (const server of [http, https]) server.on("connection", () => connections++)
    httpPort = yield* listen(http)
    const httpsPort = yield* listen(https)
    return { httpPort, httpsPort, caPem: ca.certificate, caFile, connections: () => connections, seen }
  })

export interface Rig {
  /** The proxy's port: one computer's relay. */
  readonly port: number
  readonly upstreams: Upstreams
  readonly auditPath: string
  /** curl's environment: the proxy variables and the computer's CA bundle. */
  readonly env: Record<string, string>
  readonly close: () => Promise<void>
}

export interface RigOptions {
  readonly allow: ReadonlyArray<string>
  readonly headers?: ReadonlyArray<string>
  readonly pins?: ReadonlyArray<string>
  /** Answers names in place of DNS (only for a proxy in this process). */
  readonly lookup?: Lookup
  /** The proxy in a process of its own, run as root or as an unprivileged user; in this process when unset. */
  readonly mode?: Mode
}

const distSrc = fileURLToPath(new URL("../../dist/src", import.meta.url))
const proxyScript = fileURLToPath(new URL("fixtures/egress-proxy.mjs", import.meta.url))
/** A proxy process needs the built modules (`npm run build`). */
export const proxyProcessAvailable = existsSync(join(distSrc, "layers/egress/Egress.js")) && (runningAsRoot || !underCi)
export const proxyProcessNeeds = "a built checkout (npm run build), and, as root, setpriv (under CI=true, running as root)"

/** The proxy of `options` in a process of its own, as `mode`'s user: its port, until the Scope closes. */
const proxyProcess = (mode: Mode, options: RigOptions, paths: { dir: string; auditPath: string; bundle: string; upstreamCaFile: string }) =>
  Effect.acquireRelease(
    Effect.async<{ child: ChildProcess; port: number }, Error>((resume) => {
      const rules = { allow: options.allow, pins: options.pins ?? [], headers: options.headers ?? [], auditPath: paths.auditPath, stateDir: paths.dir, bundlePath: paths.bundle, upstreamCaFile: paths.upstreamCaFile }
      const command = [...dropPrivileges(mode, "host"), process.execPath, proxyScript, distSrc, JSON.stringify(rules)]
      const child = spawn(command[0]!, command.slice(1), {
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: paths.dir, KT_RIG_SECRET: SECRET },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let said = ""
      const timer = setTimeout(() => child.kill("SIGKILL"), 60_000)
      child.stdout!.on("data", (chunk: Buffer) => {
        said += chunk.toString()
        const port = /kt-egress-proxy-port=(\d+)/.exec(said)
        if (port === null) return
        clearTimeout(timer)
        // The proxy runs as the user it was meant to (setpriv execs node: the pid is the same).
        const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"))?.[1])
        const expected = mode === "unprivileged" && runningAsRoot ? UNPRIVILEGED : process.getuid!()
        resume(uid === expected ? Effect.succeed({ child, port: Number(port[1]) }) : Effect.fail(new Error(`the proxy runs as uid ${uid}, not ${expected}`)))
      })
      child.stderr!.on("data", (chunk: Buffer) => (said += chunk.toString()))
      child.on("exit", (code) => {
        clearTimeout(timer)
        resume(Effect.fail(new Error(`the egress proxy process ended (${code}) before it listened: ${said}`)))
      })
    }),
    ({ child }) =>
      Effect.async<void>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
        const kill = setTimeout(() => child.kill("SIGKILL"), 10_000)
        child.on("exit", () => {
          clearTimeout(kill)
          resume(Effect.void)
        })
        child.kill("SIGTERM")
      })
  ).pipe(Effect.map(({ port }) => port))

/** The proxy in this process: its port, until the Scope closes. */
const proxyHere = (options: RigOptions, paths: { dir: string; auditPath: string; bundle: string }, upstreams: Upstreams) =>
  Effect.gen(function*() {
    const audit = yield* AuditLog.make({ path: paths.auditPath, maxBytes: 1 << 20, keep: 1, secrets: [Redacted.make(SECRET)] })
    const egress = yield* Egress.make({
      settings: {
        ...defaultSettings.egress,
        allowHosts: options.allow,
        resolve: options.pins ?? [],
        headers: (options.headers ?? []).map((rule) => ({ rule, value: Redacted.make(SECRET) })),
        upstreamCaFiles: [upstreams.caFile]
      },
      stateDir: paths.dir,
      audit,
      lookup: options.lookup
    })
    const run = yield* FiberSet.makeRuntime<never>()
    const server = createServer((socket) => void run(egress.serve("attacker", socket)))
    const port = yield* Effect.acquireRelease(
      Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () => Effect.sync(() => server.close())
    )
    writeFileSync(paths.bundle, egress.computer.caBundle)
    return port
  })

/** The proxy with these rules, its upstreams and its audit log; `close` ends them and removes the files. */
export const startRig = async (options: RigOptions): Promise<Rig> => {
  const dir = mkdtempSync(join(tmpdir(), "kt-egress-attack-"))
  const scope = Effect.runSync(Scope.make())
  // The proxy's own files; an unprivileged proxy owns them and reads the upstreams' CA beside them.
  const proxyDir = join(dir, "proxy")
  mkdirSync(proxyDir, { mode: 0o700 })
  if (options.mode === "unprivileged" && runningAsRoot) {
    chmodSync(dir, 0o755)
    chownSync(proxyDir, UNPRIVILEGED, UNPRIVILEGED)
  }
  const auditPath = join(proxyDir, "audit.jsonl")
  const bundle = join(proxyDir, "bundle.pem")
  const built = Effect.gen(function*() {
    const upstreams = yield* startUpstreams(dir)
    const paths = { dir: proxyDir, auditPath, bundle }
    if (options.mode !== undefined && options.lookup !== undefined) return yield* Effect.dieMessage("a lookup stub needs the proxy in this process")
    const port = options.mode === undefined
      ? yield* proxyHere(options, paths, upstreams)
      : yield* proxyProcess(options.mode, options, { ...paths, upstreamCaFile: upstreams.caFile })
    return { upstreams, port }
  })
  const { port, upstreams } = await Effect.runPromise(Scope.extend(built, scope))
  const proxy = `http://127.0.0.1:${port}`
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    // curl reads an international name in the arguments through the locale.
    LANG: "C.UTF-8",
    HTTP_PROXY: proxy,
    http_proxy: proxy,
    HTTPS_PROXY: proxy,
    https_proxy: proxy,
    CURL_CA_BUNDLE: bundle
  }
  return {
    port,
    upstreams,
    auditPath,
    env,
    close: async () => {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

export interface Run {
  readonly code: number
  readonly out: string
  readonly err: string
}

/** curl through the rig's proxy (`-sS`, a deadline); its exit code, stdout and stderr. */
export const curl = (rig: Rig, ...args: ReadonlyArray<string>) =>
  new Promise<Run>((resolve) => {
    execFile("curl", ["-sS", "--max-time", "20", ...args], { env: rig.env, timeout: 30_000, encoding: "latin1" }, (error, out, err) => {
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, out, err })
    })
  })

export interface TunnelOptions {
  /** The CONNECT target, `host:port`. */
  readonly connect: string
  /** The server name to send (SNI); undefined sends none. */
  readonly servername?: string | undefined
  readonly alpn?: ReadonlyArray<string> | undefined
  /** Raw HTTP/1.1 requests, written one after the other on the one TLS connection. */
  readonly requests: ReadonlyArray<string>
}

/**
 * A hostile client: CONNECT through the proxy, then TLS trusting anything (a guest can skip
 * verification), then the requests as written. Everything received until the proxy closes, or
 * the error that ended it.
 */
export const tunnel = (rig: Rig, options: TunnelOptions) =>
  new Promise<string>((resolve) => {
    const socket = connect(rig.port, "127.0.0.1")
    let text = ""
    let done = false
    const finish = (tail = "") => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve(text + tail)
    }
    const timer = setTimeout(() => finish("\n[timed out]"), 15_000)
    socket.on("error", (error) => finish(`\n[error ${error.message}]`))
    socket.write(`CONNECT ${options.connect} HTTP/1.1\r\nHost: ${options.connect}\r\n\r\n`)
    socket.once("data", (head: Buffer) => {
      const answer = head.toString("latin1")
      if (!answer.startsWith("HTTP/1.1 200")) {
        text = answer
        return finish()
      }
      const secure = tlsConnect({
        socket,
        // An address as `host` sends no SNI at all (RFC 6066); `servername` sends the one given.
        host: "127.0.0.1",
        ...(options.servername === undefined ? {} : { servername: options.servername }),
        ...(options.alpn === undefined ? {} : { ALPNProtocols: [...options.alpn] }),
        rejectUnauthorized: false
      })
      secure.on("error", (error) => finish(`\n[tls error ${error.message}]`))
      secure.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")))
      secure.on("end", () => finish())
      secure.on("secureConnect", async () => {
        for (const request of options.requests) {
          secure.write(request)
          // One answer before the next request: a kept-alive connection, not a pipeline.
          const before = text.length
          for (let tries = 0; tries < 200 && text.length === before && !done; tries++) await sleep(25)
          await sleep(100)
        }
        secure.end()
      })
    })
  })

/** The rig's audit entries of type `egress`, once at least `count` of them are on disk (the writer is a background fiber). */
export const auditEntries = async (rig: Rig, count: number): Promise<Array<Record<string, any>>> => {
  const read = () =>
    readFileSync(rig.auditPath, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line) as Record<string, any>)
      .filter((entry) => entry.type === "egress")
  for (let tries = 0; tries < 100 && read().length < count; tries++) await sleep(50)
  return read()
}

/** Whether `text` holds the credential's token in any letter case. */
export const holdsToken = (text: string) => text.toLowerCase().includes(TOKEN.toLowerCase())
