/**
 * The Previews service: the previews of this server start (signed tokens, see PreviewToken.ts),
 * their lifetimes and their open connections, and the preview listener (PreviewServer.ts) when
 * `--preview-port` is set, beside whichever MCP transport runs.
 *
 * A preview is bound to the computer it was made for (its incarnation, not only its name: a new
 * computer under the same id is not exposed) and to the session that made it, whose access rules
 * apply to every request. Its lifetime is a fiber that sleeps on the Clock until the preview expires;
 * revoking interrupts it. Either way its open connections (WebSockets included) are closed.
 *
 * On a cloud that serves a computer's ports itself (E2B hosts, Modal tunnels: `Connection.publicUrl`)
 * the URL is the provider's, needs no `--preview-port`, and is recorded here with the same session
 * rules, lifetime, unexpose and audit; but the provider keeps serving it while the computer runs, so
 * expiry and unexpose only forget it (the answer's `note` says so).
 *
 * The HTTP server mounts the terminal page (`/terminal…`) here when the listener runs, so a signed
 * terminal link opens on the preview origin, never on /mcp's.
 */
import * as Clock from "effect/Clock"
import * as Effect from "effect/Effect"
import * as FiberMap from "effect/FiberMap"
import * as Layer from "effect/Layer"
import { ComputerNotFound, InvalidInput, Unsupported } from "../../domain/Errors.js"
import { AuditLog } from "../../services/AuditLog.js"
import { Backend } from "../../services/Backend.js"
import { Computers } from "../../services/Computers.js"
import { type ExposeRequest, type NodeHandler, type PreviewInfo, Previews, type PreviewTarget } from "../../services/Previews.js"
import { Settings } from "../../services/Settings.js"
import * as PreviewServer from "./PreviewServer.js"
import * as PreviewToken from "./PreviewToken.js"

interface Entry {
  readonly info: PreviewInfo
  readonly session: string
  readonly incarnation: number
  readonly expiresSec: number
  readonly token: string
  /** The provider's own URL: not served (nor verified) here. */
  readonly hosted: boolean
  /** Closers of its open connections. */
  readonly connections: Set<() => void>
}

const PATH = /^\/p\/([^/?#]+)/

export const make = Effect.gen(function*() {
  const settings = (yield* Settings).preview
  const computers = yield* Computers
  const backend = yield* Backend
  const audit = yield* AuditLog
  const key = PreviewToken.newKey()
  const entries = new Map<string, Entry>()
  const lifetimes = yield* FiberMap.make<string>()
  let origin: string | undefined

  /** Ends a preview: refused from now on, its connections closed. */
  const end = (id: string, event: "unexposed" | "expired") =>
    Effect.suspend(() => {
      const entry = entries.get(id)
      if (entry === undefined) return Effect.void
      entries.delete(id)
      for (const close of entry.connections) close()
      entry.connections.clear()
      return audit.record({ type: "preview", event, session: entry.session, computer: entry.info.computer_id, preview: id, port: entry.info.port })
    })

  const expose = (session: string, request: ExposeRequest) =>
    Effect.gen(function*() {
      if (!backend.capabilities.previews) return yield* new Unsupported({ backend: backend.name, feature: "preview URLs" })
      const lifetime = request.lifetime_s ?? settings.defaultLifetimeSec
      if (!Number.isInteger(lifetime) || lifetime < 1 || lifetime > settings.maxLifetimeSec) {
        return yield* new InvalidInput({ message: `lifetime_s must be a whole number of seconds from 1 to ${settings.maxLifetimeSec}` })
      }
      const computer = yield* computers.get(session, request.computer_id)
      const hosted = yield* computer.publicUrl(request.port)
      if (hosted === undefined && origin === undefined) {
        return yield* new InvalidInput({ message: "preview URLs need the server started with --preview-port" })
      }
      const now = yield* Clock.currentTimeMillis
      const expiresSec = Math.ceil(now / 1000) + lifetime
      const id = PreviewToken.newId()
      const token = PreviewToken.sign(key, { id, computer: computer.id, incarnation: computer.incarnation, port: request.port, expiresSec })
      const info: PreviewInfo = {
        preview_id: id,
        url: hosted ?? `${origin}/p/${token}/`,
        computer_id: computer.id,
        port: request.port,
        expires_at: new Date(expiresSec * 1000).toISOString(),
        ...(hosted === undefined ? {} : { note: `${backend.name} serves this URL while the computer runs; expiry and unexpose cannot revoke it` })
      }
      entries.set(id, { info, session, incarnation: computer.incarnation, expiresSec, token, hosted: hosted !== undefined, connections: new Set() })
      yield* FiberMap.run(lifetimes, id, Effect.sleep(expiresSec * 1000 - now).pipe(Effect.zipRight(end(id, "expired"))))
      yield* audit.record({ type: "preview", event: "exposed", session, computer: computer.id, preview: id, port: request.port })
      return info
    })

  const unexpose = (session: string, idOrUrl: string) =>
    Effect.gen(function*() {
      const token = PATH.exec(idOrUrl.replace(/^[a-z]+:\/\/[^/]+/i, ""))?.[1]
      const byUrl = [...entries.values()].find((entry) => entry.session === session && entry.hosted && entry.info.url === idOrUrl)
      const id = byUrl?.info.preview_id ?? (token === undefined ? idOrUrl : (PreviewToken.parse(token)?.id ?? token))
      const entry = entries.get(id)
      // Another session's preview is as unknown as one that never was.
      if (entry === undefined || entry.session !== session) {
        return yield* new InvalidInput({ message: `no preview '${idOrUrl.slice(0, 200)}' of this session (revoked, expired, or never made)` })
      }
      yield* FiberMap.remove(lifetimes, id)
      yield* end(id, "unexposed")
    })

  const refuse = (reason: string, computer = "-", preview?: string) =>
    Effect.zipRight(audit.record({ type: "preview", event: "refused", computer, preview, reason }), Effect.fail(reason))

  const verify = (path: string): Effect.Effect<PreviewTarget, string> =>
    Effect.gen(function*() {
      const token = PATH.exec(path)?.[1]
      const parsed = token === undefined ? undefined : PreviewToken.parse(token)
      if (parsed === undefined) return yield* refuse("not a preview URL")
      const entry = entries.get(parsed.id)
      if (entry === undefined || entry.hosted) return yield* refuse("unknown, revoked or expired preview")
      const { computer_id: computer, port } = entry.info
      const fields = { id: parsed.id, computer, incarnation: entry.incarnation, port, expiresSec: parsed.expiresSec }
      if (!PreviewToken.check(key, fields, parsed.signature) || parsed.expiresSec !== entry.expiresSec) {
        return yield* refuse("bad signature", computer, parsed.id)
      }
      if ((yield* Clock.currentTimeMillis) >= entry.expiresSec * 1000) return yield* refuse("expired", computer, parsed.id)
      const open: PreviewTarget["open"] = Effect.flatMap(
        computers.get(entry.session, computer),
        (handle): PreviewTarget["open"] =>
          handle.incarnation === entry.incarnation ? handle.openPort(port) : Effect.fail(new ComputerNotFound({ id: computer }))
      )
      return { id: parsed.id, computer, port, prefix: `/p/${token}`, open }
    })

  const track = (id: string, close: () => void) =>
    Effect.sync(() => {
      const entry = entries.get(id)
      if (entry === undefined || entry.connections.size >= settings.maxConnections) return undefined
      entry.connections.add(close)
      return () => void entry.connections.delete(close)
    })

  const terminal: { handler: NodeHandler | undefined } = { handler: undefined }
  const mountTerminal = (handler: NodeHandler) =>
    Effect.acquireRelease(Effect.sync(() => void (terminal.handler = handler)), () => Effect.sync(() => void (terminal.handler = undefined)))

  const service = Previews.of({ expose, unexpose, verify, track, origin: Effect.sync(() => origin), mountTerminal })
  if (settings.port !== undefined) {
    const port = yield* PreviewServer.serve({ host: settings.host, port: settings.port, maxBodyBytes: settings.maxBodyBytes, terminal }, service)
    origin = `http://${settings.host.includes(":") ? `[${settings.host}]` : settings.host}:${port}`
    yield* Effect.logInfo(`preview URLs at ${origin}/p/… (computer_expose)`)
  }
  return service
})

/** Previews over the runtime's Computers; the listener runs for the life of the layer. */
export const layer = Layer.scoped(Previews, make)
