// Preview URLs on Fly: the ports of --fly-preview-port are declared as machine services when the
// machine is made, each computer on public ports of its own (Fly's proxy balances one public port
// between every machine that serves it), computer_expose answers `https://<app>.fly.dev:<port>/`,
// a port not declared is a clear error, and a services request Fly would refuse fails in the fake.
import { assert, it } from "@effect/vitest"
import { Effect, Either, Layer, Random } from "effect"
import { beforeEach } from "vitest"
import * as FlyBackend from "../../../../src/layers/backends/fly/FlyBackend.js"
import * as FlyPreviews from "../../../../src/layers/backends/fly/FlyPreviews.js"
import * as Runtime from "../../../../src/layers/Runtime.js"
import { Computers } from "../../../../src/services/Computers.js"
import { Previews } from "../../../../src/services/Previews.js"
import { Settings } from "../../../../src/services/Settings.js"
import type { FlyFake } from "../../../support/FlyFake.js"
import { machinesServing } from "../../../support/FlyFakeServices.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"
import { APP, metadata, options, post, useFake, withBackend } from "./FlyTestSupport.js"

const runtime = (fake: FlyFake, previewPorts: ReadonlyArray<number>) =>
  Runtime.layer(Settings.make({ killGraceMs: 500 }), FlyBackend.layer(options(fake.url, { previewPorts })), `fly-previews-${process.pid}`)

const withRuntime = <A, E>(fake: FlyFake, previewPorts: ReadonlyArray<number>, body: Effect.Effect<A, E, Computers | Previews>) =>
  Effect.scoped(Effect.flatMap(Layer.build(runtime(fake, previewPorts)), (context) => Effect.provide(body, context)))

describeIf(bwrapWorks, "bubblewrap (the Fly fake runs commands in it)")("Fly preview URLs", () => {
  const current = useFake()
  let fake: FlyFake
  beforeEach(() => {
    fake = current()
    fake.rateLimit = undefined
  })

  it.live("each computer serves the declared ports on public ports of its own; expose answers the app's URL of one", () =>
    withRuntime(fake, [3000, 8000], Effect.gen(function*() {
      const computers = yield* Computers
      const previews = yield* Previews
      const first = yield* computers.create("s1", { computer_id: "pv-one", temporary: true })
      const second = yield* computers.create("s1", { computer_id: "pv-two", temporary: true })
      const machineOf = (id: string) => fake.machines.get(id)!
      const one = machineOf(yield* first.providerId)
      const two = machineOf(yield* second.providerId)
      const declared = (services: ReadonlyArray<any>) => services.map((service) => [service.protocol, service.internal_port, service.autostop, service.autostart, service.ports[0].handlers])
      assert.deepStrictEqual(declared(one.config["services"]), [["tcp", 3000, "off", false, ["tls", "http"]], ["tcp", 8000, "off", false, ["tls", "http"]]])
      const publicOf = (machine: typeof one) => (machine.config["services"] as ReadonlyArray<any>).map((service) => service.ports[0].port as number)
      const ports = [...publicOf(one), ...publicOf(two)]
      assert.strictEqual(new Set(ports).size, 4, "no public port is shared between computers")
      for (const port of ports) assert.isTrue(port >= FlyPreviews.PUBLIC_FIRST && port <= FlyPreviews.PUBLIC_LAST)

      const info = yield* previews.expose("s1", { computer_id: "pv-two", port: 8000, lifetime_s: 600 })
      const url = new URL(info.url)
      assert.strictEqual(url.protocol, "https:")
      assert.strictEqual(url.hostname, `${APP}.fly.dev`)
      assert.deepStrictEqual(machinesServing(fake.machines.values(), Number(url.port)).map((machine) => machine.id), [two.id], "Fly's proxy sends the URL to that computer only")
      assert.match(info.note ?? "", /fly serves this URL while the computer runs; expiry and unexpose cannot revoke it/)

      const undeclared = yield* Effect.flip(previews.expose("s1", { computer_id: "pv-one", port: 5173 }))
      assert.strictEqual(undeclared._tag, "InvalidInput")
      assert.strictEqual(undeclared.message, "port 5173 has no Fly service on this machine: ports are served when the machine is made (--fly-preview-port; this computer's: 3000, 8000)")
      const stranger = yield* Effect.flip(previews.expose("s2", { computer_id: "pv-one", port: 3000 }))
      assert.strictEqual(stranger._tag, "AccessDenied")
      yield* previews.unexpose("s1", info.url)
    })), 90_000)

  it.live("public ports another machine of the app serves are not given out again", () =>
    withRuntime(fake, [3000], Effect.gen(function*() {
      // A machine of the app that is not kilntainers' serves every port of the range but one.
      const services = Array.from({ length: FlyPreviews.PUBLIC_LAST - FlyPreviews.PUBLIC_FIRST }, (_, i) => ({
        protocol: "tcp",
        internal_port: 80,
        ports: [{ port: FlyPreviews.PUBLIC_FIRST + i, handlers: ["http"] }]
      }))
      const other = yield* Effect.promise(() => post(fake.url, "", { name: "someone-else", config: { image: FlyBackend.DEFAULT_IMAGE, services } }))
      const computers = yield* Computers
      const computer = yield* computers.create("s1", { computer_id: "pv-last", temporary: true })
      const machine = fake.machines.get(yield* computer.providerId)!
      assert.deepStrictEqual(machine.config["services"].map((service: any) => service.ports[0].port), [FlyPreviews.PUBLIC_LAST])
      fake.machines.get(other.id)!.vm.stop()
      fake.machines.delete(other.id)
    })), 90_000)

  it.live("two servers of one app that pick the same public port at the same moment never share it: the clash is removed", () =>
    Effect.gen(function*() {
      const opts = options(fake.url, { previewPorts: [3000] })
      const both = yield* withBackend(opts, (first) =>
        withBackend(opts, (second) =>
          Effect.gen(function*() {
            // Both list the app before either creates (the list calls are held), from the same place in the range.
            fake.delayNext(2, 1_500, new RegExp(`^GET /v1/apps/${APP}/machines$`))
            const create = (backend: typeof first, id: string) =>
              Effect.either(backend.create(metadata(id, true)).pipe(Effect.withRandom(Random.make("same start"))))
            return yield* Effect.all([create(first, "pv-race-a"), create(second, "pv-race-b")], { concurrency: 2 })
          })
        ))
      const won = both.filter(Either.isRight)
      assert.isAtMost(won.length, 1)
      for (const lost of both.filter(Either.isLeft)) {
        assert.match(lost.left.message, /another machine of app kt-test took public port \d+ at the same moment; try again/)
      }
      const live = fake.live().filter((machine) => machine.name.startsWith("kilntainer-pv-race"))
      assert.strictEqual(live.length, won.length, "a machine whose port clashed is removed")
      for (const machine of live) {
        for (const service of machine.config["services"]) assert.lengthOf(machinesServing(fake.machines.values(), service.ports[0].port), 1)
      }
      for (const machine of live) fake.destroyFromOutside(machine.id)
    }), 90_000)

  it.live("without --fly-preview-port a machine has no services, and expose names the flag", () =>
    withRuntime(fake, [], Effect.gen(function*() {
      const computers = yield* Computers
      const previews = yield* Previews
      const computer = yield* computers.create("s1", { computer_id: "pv-none", temporary: true })
      assert.isUndefined(fake.machines.get(yield* computer.providerId)!.config["services"])
      const refused = yield* Effect.flip(previews.expose("s1", { computer_id: "pv-none", port: 8000 }))
      assert.match(refused.message, /port 8000 has no Fly service on this machine.*--fly-preview-port; this computer's: none/)
    })), 60_000)

  it("the fake refuses services Fly would refuse", async () => {
    const create = (services: unknown) =>
      fetch(`${fake.url}/v1/apps/${APP}/machines`, {
        method: "POST",
        headers: { authorization: `Bearer ${"fo1_super-secret-test-token-0123456789"}`, "content-type": "application/json" },
        body: JSON.stringify({ config: { image: FlyBackend.DEFAULT_IMAGE, services }, skip_launch: true })
      }).then(async (response) => [response.status, ((await response.json()) as { error: string }).error] as const)
    assert.deepStrictEqual(await create([{ protocol: "tcp", ports: [{ port: 443, handlers: ["tls", "http"] }] }]), [400, "invalid_argument: services[0].internal_port must be a port from 1 to 65535"])
    assert.deepStrictEqual(await create([{ internal_port: 3000, ports: [{ port: 443 }] }]), [400, "invalid_argument: services[0].protocol must be tcp or udp"])
    assert.deepStrictEqual(await create([{ protocol: "tcp", internal_port: 3000, ports: [{ port: 443, handlers: ["https"] }] }]), [400, "invalid_argument: services[0].ports[0].handlers must be among tls, http, proxy_proto, pg_tls, edge_http"])
    assert.deepStrictEqual(await create([{ protocol: "tcp", internal_port: 3000, ports: [] }]), [400, "invalid_argument: services[0] needs at least one port"])
    assert.deepStrictEqual(
      await create([{ protocol: "tcp", internal_port: 3000, ports: [{ port: 20000, handlers: ["http"] }] }, { protocol: "tcp", internal_port: 8000, ports: [{ port: 20000, handlers: ["http"] }] }]),
      [400, "invalid_argument: services: public port tcp/20000 is given twice"]
    )
  })
})
