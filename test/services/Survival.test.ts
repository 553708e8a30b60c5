import { assert, describe, it } from "@effect/vitest"
import { capabilities as docker } from "../../src/layers/backends/docker/DockerBackend.js"
import { capabilities as e2b } from "../../src/layers/backends/e2b/E2BBackend.js"
import { capabilities as fly } from "../../src/layers/backends/fly/FlyBackend.js"
import { capabilities as host } from "../../src/layers/backends/host/HostBackend.js"
import { capabilities as kubernetes } from "../../src/layers/backends/kubernetes/KubernetesBackend.js"
import { capabilities as modal } from "../../src/layers/backends/modal/ModalBackend.js"
import { moduleCapabilities, toolsetCapabilities } from "../../src/layers/backends/wasm/WasmBackend.js"
import { capabilitiesWithout, survivalOf } from "../../src/services/Backend.js"

describe("what computer_list says outlives the server (serverExit)", () => {
  it("every backend whose computers hold their processes: they run on, and any later server lists and follows them", () => {
    for (const [capabilities, name] of [[host, "host"], [docker, "docker"], [fly, "fly"], [e2b, "e2b"], [modal, "modal"], [kubernetes, "kubernetes"]] as const) {
      assert.isTrue(capabilities.heldProcesses, name)
      assert.strictEqual(
        survivalOf(capabilities, name),
        "A permanent computer keeps its files, and its processes and their output run on in it after this server ends, and any later server lists and follows them; a temporary one ends with its session."
      )
    }
  })

  it("WASM and toolset: files as saved after each process ends; processes and their output end with the server", () => {
    assert.strictEqual(
      survivalOf(toolsetCapabilities, "toolset"),
      "A permanent computer keeps its files as saved after each process ends (in the state directory); its processes and their output end with this server."
    )
    assert.strictEqual(survivalOf(moduleCapabilities, "wasm"), survivalOf(toolsetCapabilities, "toolset"))
  })

  it("a backend with permanent computers that do not hold their processes: files kept, processes end with the server", () => {
    assert.strictEqual(
      survivalOf(capabilitiesWithout({ heldProcesses: false }), "x"),
      "A permanent computer keeps its files; its processes and their output end with this server."
    )
  })

  it("a backend without permanent computers says nothing survives", () => {
    assert.strictEqual(survivalOf(capabilitiesWithout({ persistence: false }), "x"), "Nothing: every computer ends with this server.")
  })
})
