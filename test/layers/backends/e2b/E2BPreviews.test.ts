// Preview URLs on E2B, through the kernel against the fake: computer_expose answers E2B's own host
// of the port (the SDK computes it, `<port>-<sandboxId>.<domain>`; no --preview-port needed), bound
// to the session's access rules, audit-logged, and unexpose forgets it.
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import { AuditLog } from "../../../../src/services/AuditLog.js"
import { Previews } from "../../../../src/services/Previews.js"
import * as E2BFake from "../../../support/E2BFake.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { computerId, kernel, services } from "./E2BTestKit.js"

const started = bwrapWorks ? E2BFake.start({ defaultTimeoutSec: 120 }) : undefined
let fake: E2BFake.E2BFake
beforeAll(async () => {
  if (started) fake = await started
})
afterAll(async () => {
  await fake?.close()
})

const previewEvents = Effect.flatMap(AuditLog, (audit) => audit.recent(undefined, 100)).pipe(
  Effect.map((entries) => entries.flatMap((entry) => (entry.type === "preview" ? [entry.event] : [])))
)

describeIf(bwrapWorks, "bubblewrap (the E2B fake runs commands in it)")("E2B preview URLs", () => {
  it.live("expose answers E2B's host of the port, only to a session that may use the computer; unexpose forgets it", () =>
    Effect.gen(function*() {
      const { computers } = yield* services
      const previews = yield* Previews
      const id = computerId("preview")
      const computer = yield* computers.create("s1", { computer_id: id, temporary: true })
      const sandboxId = yield* computer.providerId

      const info = yield* previews.expose("s1", { computer_id: id, port: 8000, lifetime_s: 600 })
      // The SDK's domain: e2b.app unless E2B_DOMAIN says otherwise.
      assert.strictEqual(info.url, `https://8000-${sandboxId}.${process.env["E2B_DOMAIN"] ?? "e2b.app"}/`)
      assert.deepInclude(info, { computer_id: id, port: 8000 })
      assert.match(info.note ?? "", /cannot revoke/)

      const stranger = yield* Effect.flip(previews.expose("s2", { computer_id: id, port: 8000 }))
      assert.strictEqual(stranger._tag, "AccessDenied")
      const long = yield* Effect.flip(previews.expose("s1", { computer_id: id, port: 8000, lifetime_s: 86_401 }))
      assert.match(long.message, /from 1 to 86400/)

      // Not served by this server: its preview origin refuses the id.
      assert.strictEqual(yield* Effect.flip(previews.verify(`/p/${info.preview_id}.0.${"A".repeat(43)}/`)), "unknown, revoked or expired preview")

      const notHers = yield* Effect.flip(previews.unexpose("s2", info.url))
      assert.match(notHers.message, /no preview .* of this session/)
      yield* previews.unexpose("s1", info.url)
      const again = yield* Effect.flip(previews.unexpose("s1", info.preview_id))
      assert.match(again.message, /revoked, expired, or never made/)
      assert.deepStrictEqual(yield* previewEvents, ["exposed", "refused", "unexposed"])
    }).pipe(Effect.provide(kernel(fake)), Effect.scoped), 60_000)
})
