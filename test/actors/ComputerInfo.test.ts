import { assert, describe, it } from "vitest"
import { computerInfo, type ComputerFacts, UNHELD_WARNING } from "../../src/actors/ComputerInfo.js"

const facts = (more: Partial<ComputerFacts>): ComputerFacts => ({
  id: "c1",
  backend: "docker",
  state: "running",
  temporary: false,
  instance: undefined,
  createdAt: 0,
  processes: 0,
  warnBeforeEndMs: undefined,
  ...more
})

describe("a computer's warning", () => {
  it("none for a computer that holds its processes and has no end of life", () => {
    assert.notProperty(computerInfo(facts({}), 1_000), "warning")
    assert.notProperty(computerInfo(facts({ unheld: false }), 1_000), "warning")
  })

  it("a permanent computer without its agent says its processes end with this server", () => {
    assert.strictEqual(computerInfo(facts({ unheld: true }), 1_000).warning, UNHELD_WARNING)
    assert.match(UNHELD_WARNING, /end with this kilntainers server/)
  })

  it("both, when the provider also ends it soon", () => {
    const endsAt = 5 * 60_000
    const instance = { providerId: "p", endsAt, metadata: { image: "i" } } as unknown as ComputerFacts["instance"]
    const warning = computerInfo(facts({ unheld: true, instance }), 0).warning
    assert.strictEqual(
      warning,
      `the provider ends this computer in 5 min (its maximum runtime there); save your work — a permanent computer can be restarted to continue; ${UNHELD_WARNING}`
    )
  })
})
