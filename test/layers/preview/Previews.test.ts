/**
 * The Previews service's rules, on the TestClock: a URL verifies only as it was signed, only for its
 * lifetime, only until it is revoked, and only by the session that made it may it be revoked; a
 * computer the session may not use cannot be exposed; every decision is audit-logged. (The proxying
 * itself runs end to end in test/e2e/previews.test.ts.)
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Either, Layer, TestClock } from "effect"
import { AccessDenied, providerError } from "../../../src/domain/Errors.js"
import * as AuditLogLayer from "../../../src/layers/AuditLog.js"
import * as Previews from "../../../src/layers/preview/Previews.js"
import { AuditLog } from "../../../src/services/AuditLog.js"
import { Backend, capabilitiesWithout } from "../../../src/services/Backend.js"
import { type ComputerHandle, Computers } from "../../../src/services/Computers.js"
import { Previews as PreviewsTag } from "../../../src/services/Previews.js"
import { defaultSettings, Settings } from "../../../src/services/Settings.js"

/** One computer, `web`, that only session `a` may use; its port cannot really be opened here. */
const computers = Layer.succeed(Computers, {
  get: (session: string, id: string) =>
    session === "a" && id === "web"
      ? Effect.succeed({
        id,
        incarnation: 1,
        openPort: (port: number) => Effect.fail(providerError("test", `connect to port ${port}`, "Unavailable", "no relay in this test")),
        publicUrl: () => Effect.void
      } as unknown as ComputerHandle)
      : Effect.fail(new AccessDenied({ what: `computer ${id}`, why: "it is another session's" }))
} as unknown as Computers["Type"])

const backend = Layer.succeed(Backend, { name: "test", capabilities: capabilitiesWithout() } as unknown as Backend["Type"])
const settings = Layer.succeed(Settings, { ...defaultSettings, preview: { ...defaultSettings.preview, port: 0 } })
const layer = Previews.layer.pipe(
  Layer.provideMerge(Layer.mergeAll(computers, backend, AuditLogLayer.layer)),
  Layer.provideMerge(settings)
)

const pathOf = (url: string) => new URL(url).pathname
const verdict = (path: string) => Effect.flatMap(PreviewsTag, (previews) => Effect.either(previews.verify(path)))
const events = Effect.flatMap(AuditLog, (audit) => audit.recent(undefined, 100)).pipe(
  Effect.map((entries) => entries.flatMap((entry) => (entry.type === "preview" ? [`${entry.event}${entry.reason ? `: ${entry.reason}` : ""}`] : [])))
)

describe("Previews", () => {
  it.scoped("a URL verifies as signed, for its lifetime only", () =>
    Effect.gen(function*() {
      const previews = yield* PreviewsTag
      const info = yield* previews.expose("a", { computer_id: "web", port: 8000, lifetime_s: 60 })
      const path = pathOf(info.url)
      const verified = yield* verdict(`${path}index.html`)
      assert.isTrue(Either.isRight(verified))
      if (Either.isRight(verified)) {
        assert.strictEqual(verified.right.port, 8000)
        assert.strictEqual(verified.right.prefix, path.slice(0, -1))
        const opened = yield* Effect.either(verified.right.open)
        assert.match(Either.isLeft(opened) ? opened.left.message : "", /no relay in this test/)
      }

      // Any changed part: the signature, the expiry it claims, the id.
      const [id, expires, signature] = path.split("/")[2]!.split(".") as [string, string, string]
      const flipped = signature.slice(0, -1) + (signature.endsWith("A") ? "B" : "A")
      assert.deepStrictEqual(yield* verdict(`/p/${id}.${expires}.${flipped}/`), Either.left("bad signature"))
      const later = (parseInt(expires, 36) + 3600).toString(36)
      assert.deepStrictEqual(yield* verdict(`/p/${id}.${later}.${signature}/`), Either.left("bad signature"))
      const otherId = (id.startsWith("A") ? "B" : "A") + id.slice(1)
      assert.deepStrictEqual(yield* verdict(`/p/${otherId}.${expires}.${signature}/`), Either.left("unknown, revoked or expired preview"))
      assert.deepStrictEqual(yield* verdict("/mcp"), Either.left("not a preview URL"))

      yield* TestClock.adjust("59 seconds")
      assert.isTrue(Either.isRight(yield* verdict(path)))
      yield* TestClock.adjust("2 seconds")
      assert.deepStrictEqual(yield* verdict(path), Either.left("unknown, revoked or expired preview"))
      assert.deepStrictEqual(yield* events, [
        "exposed",
        "refused: bad signature",
        "refused: bad signature",
        "refused: unknown, revoked or expired preview",
        "refused: not a preview URL",
        "expired",
        "refused: unknown, revoked or expired preview"
      ])
    }).pipe(Effect.provide(layer)))

  it.scoped("only the session that made a preview revokes it, by id or URL, and it is refused from then on", () =>
    Effect.gen(function*() {
      const previews = yield* PreviewsTag
      const first = yield* previews.expose("a", { computer_id: "web", port: 8000 })
      const second = yield* previews.expose("a", { computer_id: "web", port: 8001 })
      const stranger = yield* Effect.either(previews.unexpose("b", first.preview_id))
      assert.match(Either.isLeft(stranger) ? stranger.left.message : "", /no preview .* of this session/)
      assert.isTrue(Either.isRight(yield* verdict(pathOf(first.url))))

      let closed = 0
      const release = yield* previews.track(first.preview_id, () => void closed++)
      assert.isDefined(release)
      yield* previews.unexpose("a", first.preview_id)
      yield* previews.unexpose("a", second.url)
      assert.strictEqual(closed, 1, "its open connection was closed")
      assert.isTrue(Either.isLeft(yield* verdict(pathOf(first.url))))
      assert.isTrue(Either.isLeft(yield* verdict(pathOf(second.url))))
      assert.isTrue(Either.isLeft(yield* Effect.either(previews.unexpose("a", first.preview_id))))
    }).pipe(Effect.provide(layer)))

  it.scoped("a computer the session may not use, a lifetime past the maximum and a full preview are refused", () =>
    Effect.gen(function*() {
      const previews = yield* PreviewsTag
      const denied = yield* Effect.either(previews.expose("b", { computer_id: "web", port: 8000 }))
      assert.strictEqual(Either.isLeft(denied) ? denied.left._tag : "", "AccessDenied")
      const long = yield* Effect.either(previews.expose("a", { computer_id: "web", port: 8000, lifetime_s: 86_401 }))
      assert.match(Either.isLeft(long) ? long.left.message : "", /from 1 to 86400/)
      const info = yield* previews.expose("a", { computer_id: "web", port: 8000 })
      for (let n = 0; n < defaultSettings.preview.maxConnections; n++) assert.isDefined(yield* previews.track(info.preview_id, () => {}))
      assert.isUndefined(yield* previews.track(info.preview_id, () => {}))
    }).pipe(Effect.provide(layer)))
})
