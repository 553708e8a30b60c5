import { assert, describe, it } from "@effect/vitest"
import { capabilities as docker } from "../../src/layers/backends/docker/DockerBackend.js"
import { capabilities as e2b } from "../../src/layers/backends/e2b/E2BBackend.js"
import { capabilities as fly } from "../../src/layers/backends/fly/FlyBackend.js"
import { capabilities as host } from "../../src/layers/backends/host/HostBackend.js"
import { capabilities as modal } from "../../src/layers/backends/modal/ModalBackend.js"
import { moduleCapabilities, toolsetCapabilities } from "../../src/layers/backends/wasm/WasmBackend.js"
import { capabilitiesWithout, survivalOf } from "../../src/services/Backend.js"

describe("what computer_list says outlives the server (serverExit)", () => {
  it("host and Docker: a permanent computer's processes run on; that a later server does not list them yet is said", () => {
    for (const capabilities of [host, docker]) {
      const said = survivalOf(capabilities, "host")
      assert.match(said, /processes run on in it after this server ends/)
      assert.match(said, /does not list them yet/)
    }
  })

  it("WASM and toolset: files as saved after each process ends; processes and their output end with the server", () => {
    assert.strictEqual(
      survivalOf(toolsetCapabilities, "toolset"),
      "A permanent computer keeps its files as saved after each process ends (in the state directory); its processes and their output end with this server."
    )
    assert.strictEqual(survivalOf(moduleCapabilities, "wasm"), survivalOf(toolsetCapabilities, "toolset"))
  })

  it("the clouds: files kept, processes end with the server", () => {
    for (const [capabilities, name] of [[fly, "fly"], [e2b, "e2b"], [modal, "modal"]] as const) {
      assert.strictEqual(survivalOf(capabilities, name), "A permanent computer keeps its files; its processes and their output end with this server.")
    }
  })

  it("a backend without permanent computers says nothing survives", () => {
    assert.strictEqual(survivalOf(capabilitiesWithout({ persistence: false }), "x"), "Nothing: every computer ends with this server.")
  })
})
