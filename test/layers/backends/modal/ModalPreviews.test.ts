// Preview URLs on Modal, through the kernel over the real SDK and the gRPC fake: the ports of
// --modal-preview-port are declared at sandbox creation (`encryptedPorts`), computer_expose answers
// the sandbox's tunnel of one (SandboxGetTunnels), a port not declared is a clear error, and
// unexpose forgets the URL.
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as ModalBackend from "../../../../src/layers/backends/modal/ModalBackend.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Previews } from "../../../../src/services/Previews.js"
import { Settings } from "../../../../src/services/Settings.js"
import { backendOptions, fakeWorks, ModalFake } from "../../../support/ModalFake.js"
import { describeIf } from "../../../support/Requirements.js"

let fake: ModalFake
beforeAll(async () => {
  fake = await ModalFake.start()
})
afterAll(() => fake.close())

const runtime = (previewPorts: ReadonlyArray<number>) =>
  Runtime.layer(
    Settings.make({ killGraceMs: 500 }),
    ModalBackend.layer(backendOptions(fake, { appName: "kilntainers-previews", previewPorts }))
  )

let counter = 0
const computerId = (what: string) => `p${process.pid}-${what}-${counter++}`

describeIf(fakeWorks, "bubblewrap and nsenter (the Modal fake runs commands in them)")("Modal preview URLs", () => {
  it.live("expose answers the tunnel of a declared port; an undeclared port is refused; unexpose forgets it", () =>
    Effect.gen(function*() {
      const computers = yield* Computers
      const previews = yield* Previews
      const id = computerId("tunnel")
      const computer = yield* computers.create("s1", { computer_id: id, temporary: true })
      const sandboxId = yield* computer.providerId
      const created = [...fake.callsOf("SandboxCreate"), ...fake.callsOf("SandboxCreateV2")]
        .find((request) => request["definition"]?.["name"] !== undefined && JSON.stringify(request).includes(id))
      assert.deepStrictEqual(
        created?.["definition"]?.["openPorts"]?.["ports"]?.map((spec: Record<string, unknown>) => [spec["port"], spec["unencrypted"]]),
        [[8000, false], [3000, false]],
        "declared at creation as TLS tunnels"
      )

      const info = yield* previews.expose("s1", { computer_id: id, port: 3000, lifetime_s: 600 })
      assert.strictEqual(info.url, `https://${sandboxId.toLowerCase()}-3000.modal.fake.invalid/`)
      assert.match(info.note ?? "", /cannot revoke/)

      const undeclared = yield* Effect.flip(previews.expose("s1", { computer_id: id, port: 5173 }))
      assert.strictEqual(undeclared._tag, "InvalidInput")
      assert.match(undeclared.message, /port 5173 has no Modal tunnel.*--modal-preview-port.*3000, 8000/)
      const stranger = yield* Effect.flip(previews.expose("s2", { computer_id: id, port: 3000 }))
      assert.strictEqual(stranger._tag, "AccessDenied")

      yield* previews.unexpose("s1", info.url)
      const again = yield* Effect.flip(previews.unexpose("s1", info.preview_id))
      assert.match(again.message, /revoked, expired, or never made/)
    }).pipe(Effect.provide(runtime([8000, 3000])), Effect.scoped), 60_000)

  it.live("without --modal-preview-port no port has a tunnel, and expose says which flag declares one", () =>
    Effect.gen(function*() {
      const computers = yield* Computers
      const previews = yield* Previews
      const id = computerId("none")
      yield* computers.create("s1", { computer_id: id, temporary: true })
      const refused = yield* Effect.flip(previews.expose("s1", { computer_id: id, port: 8000 }))
      assert.match(refused.message, /port 8000 has no Modal tunnel.*--modal-preview-port; this computer's: none/)
    }).pipe(Effect.provide(runtime([])), Effect.scoped), 60_000)
})
