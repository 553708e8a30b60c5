import { it } from "@effect/vitest"
import { Effect, Exit, Scope, Stream } from "effect"
import * as ModalBackend from "../../../src/layers/backends/ModalBackend.js"
import { Backend } from "../../../src/services/Backend.js"
import { ModalFake } from "../../support/ModalFake.js"
const fake = new ModalFake()
it.live("dbg", () => Effect.gen(function*() {
  const backend = yield* Backend
  const scope = yield* Scope.make()
  const computer = yield* backend.open({ id: "dbg", temporary: true }).pipe(Scope.extend(scope))
  const t0 = Date.now()
  yield* Effect.scoped(Effect.gen(function*() {
    const p = yield* computer.spawn({ argv: ["sh", "-c", "sleep 3 & echo parent done"], cwd: "/home/agent", env: { PATH: "/usr/bin:/bin" } })
    yield* p.events.pipe(Stream.tap((e) => Effect.sync(() => console.log("EV", Date.now() - t0, e._tag, e._tag === "Exit" ? JSON.stringify(e.exit) : JSON.stringify(Buffer.from(e.data).toString())))), Stream.takeUntil((e) => e._tag === "Exit"), Stream.runDrain)
    console.log("exit seen", Date.now() - t0)
  }))
  console.log("closed", Date.now() - t0)
  yield* Scope.close(scope, Exit.void)
  fake.shutdown()
}).pipe(Effect.provide(ModalBackend.layer({ tokenId: undefined, tokenSecret: undefined, appName: "a", image: "i", cpu: 1, memoryMb: 512, gpu: undefined, region: undefined, sandboxTimeoutSec: 60, network: false, instanceId: "x", gateway: fake }))), 30000)
