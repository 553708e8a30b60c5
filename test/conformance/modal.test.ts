import { afterAll, beforeAll } from "vitest"
import * as ModalBackend from "../../src/layers/backends/modal/ModalBackend.js"
import { backendOptions, fakeWorks, ModalFake } from "../support/ModalFake.js"
import { conformance } from "./Conformance.js"

// The Modal backend on the real `modal` SDK, against the local gRPC fake of Modal.
let fake: ModalFake
beforeAll(async () => {
  fake = await ModalFake.start()
})
afterAll(() => fake.close())

conformance("modal", {
  backend: () => ModalBackend.layer(backendOptions(fake, { appName: "kilntainers-conformance", watchIntervalMs: 500 })),
  available: fakeWorks,
  requirement: "bubblewrap and nsenter (the Modal fake runs commands in them)"
})
