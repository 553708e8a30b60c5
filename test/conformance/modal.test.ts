import { afterAll } from "vitest"
import * as ModalBackend from "../../src/layers/backends/ModalBackend.js"
import { fakeWorks, ModalFake } from "../support/ModalFake.js"
import { conformance } from "./Conformance.js"

const fake = new ModalFake()
afterAll(() => fake.shutdown())

conformance("modal", {
  backend: () =>
    ModalBackend.layer({
      tokenId: undefined,
      tokenSecret: undefined,
      appName: "kilntainers-conformance",
      image: ModalBackend.DEFAULT_IMAGE,
      cpu: 1,
      memoryMb: 512,
      gpu: undefined,
      region: undefined,
      sandboxTimeoutSec: 3600,
      network: false,
      instanceId: "conformance",
      gateway: fake
    }),
  available: fakeWorks,
  requirement: "bubblewrap and nsenter (the Modal fake runs commands in them)"
})
