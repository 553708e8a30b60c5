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

const APP = "kilntainers-conformance"

conformance("modal", {
  backend: () => ModalBackend.layer(backendOptions(fake, { appName: APP, watchIntervalMs: 500 })),
  available: fakeWorks,
  requirement: "bubblewrap and nsenter (the Modal fake runs commands in them)",
  // The built CLI on the same fake (the SDK reads MODAL_SERVER_URL; a loopback one is plain gRPC): read
  // when a case runs, once the fake has its port.
  get cli() {
    return {
      args: ["--backend", "modal", "--modal-token-id", fake.tokenId, "--modal-token-secret", fake.tokenSecret, "--modal-app-name", APP],
      env: { MODAL_SERVER_URL: fake.url }
    }
  }
})
