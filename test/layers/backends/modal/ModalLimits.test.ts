import { assert, describe, it } from "@effect/vitest"
import { Option } from "effect"
import type { ComputerMetadata } from "../../../../src/domain/ComputerMetadata.js"
import { invalidCreate, invalidExec, MAX_EXEC_ARGS_BYTES } from "../../../../src/layers/backends/modal/ModalSdk.js"
import { MAX_SPAWN_PAYLOAD_BYTES, payloadProblem, shellWords, wrapperExec } from "../../../../src/layers/backends/modal/ModalWrapper.js"
import {
  agentKeyOf,
  AGENT_KEY_TAG,
  ENDS_TAG,
  instanceFrom,
  MAX_NAME_LENGTH,
  sandboxName,
  tagSelector,
  tagsFor,
  validObjectName
} from "../../../../src/layers/backends/modal/SandboxIdentity.js"

const longest = "a".repeat(30) + "-" + "b".repeat(32) // 63 characters, the longest computer id

describe("sandbox names (Modal: at most 64 characters of [A-Za-z0-9-_.])", () => {
  it("short ids keep the readable name", () => {
    assert.strictEqual(sandboxName("agent-1"), "kilntainer-agent-1")
    assert.strictEqual(sandboxName("x".repeat(53)).length, 64)
    assert.strictEqual(sandboxName("x".repeat(53)), `kilntainer-${"x".repeat(53)}`)
  })

  it("long ids get a prefix and a hash: valid, stable, distinct", () => {
    const name = sandboxName(longest)
    assert.isAtMost(name.length, MAX_NAME_LENGTH)
    assert.isTrue(validObjectName(name), name)
    assert.strictEqual(sandboxName(longest), name, "the same id always has the same name (found again by name)")
    const sibling = longest.slice(0, -1) + "c"
    assert.notStrictEqual(sandboxName(sibling), name, "ids sharing the kept prefix still get different names")
    assert.match(name, /^kilntainer-a{30}-b{9}-[0-9a-f]{12}$/)
    for (let n = 1; n <= 63; n++) assert.isTrue(validObjectName(sandboxName("z".repeat(n))), `id of ${n} characters`)
  })

  it("Modal's name rule, as the SDK has it", () => {
    assert.isTrue(validObjectName("kilntainers"))
    assert.isFalse(validObjectName("x".repeat(65)))
    assert.isFalse(validObjectName("has space"))
    assert.isFalse(validObjectName(""))
    assert.isFalse(validObjectName("ap-" + "A".repeat(22)), "cannot look like an App id")
  })
})

describe("tags", () => {
  const metadata: ComputerMetadata = {
    id: longest,
    temporary: true,
    image: "debian:bookworm-slim",
    created: "2026-11-30T00:00:00.000Z",
    instance: "i-1",
    owner: { host: "h", pid: 42, start: "123" },
    nonce: "n1"
  }
  const endsAt = Date.parse("2026-11-30T01:00:00.000Z")

  it("carry the computer's metadata in the shared encoding, when Modal ends the sandbox, and its agent's key", () => {
    const key = "0123456789abcdef".repeat(4)
    const tags = tagsFor(metadata, endsAt, key)
    assert.strictEqual(tags["kilntainers-computer-id"], longest)
    assert.strictEqual(tags[ENDS_TAG], "2026-11-30T01:00:00.000Z")
    assert.deepStrictEqual(agentKeyOf(tags), Option.some(key))
    const { [AGENT_KEY_TAG]: _key, ...older } = tags
    assert.deepStrictEqual(agentKeyOf(older), Option.none(), "a sandbox of an older kilntainers has no key: its processes stay the server's")
    assert.deepStrictEqual(agentKeyOf({ ...tags, [AGENT_KEY_TAG]: "not-a-key" }), Option.none())
    assert.deepStrictEqual(instanceFrom("sb-1", tags), Option.some({ providerId: "sb-1", metadata, state: "running", endsAt }))
  })

  it("sandboxes tagged before the port are still found: the same keys, end of life included", () => {
    const before = {
      kilntainers: "true",
      "kilntainers-computer-id": "old-one",
      "kilntainers-temporary": "false",
      "kilntainers-image": "python:3.12",
      "kilntainers-instance": "i-0",
      "kilntainers-created": "2026-11-01T00:00:00.000Z",
      "kilntainers-ends": "2026-11-01T01:00:00.000Z"
    }
    assert.deepStrictEqual(instanceFrom("sb-0", before), Option.some({
      providerId: "sb-0",
      metadata: { id: "old-one", temporary: false, image: "python:3.12", created: "2026-11-01T00:00:00.000Z", instance: "i-0" },
      state: "running",
      endsAt: Date.parse("2026-11-01T01:00:00.000Z")
    }))
    const { [ENDS_TAG]: _, ...older } = before
    assert.isUndefined(Option.getOrThrow(instanceFrom("sb-0", older)).endsAt, "no end of life recorded: unknown")
  })

  it("a sandbox without our marker, kind or a valid id is not ours", () => {
    assert.isTrue(Option.isNone(instanceFrom("sb", { owner: "someone" })))
    assert.isTrue(Option.isNone(instanceFrom("sb", { kilntainers: "true" })))
    assert.isTrue(Option.isNone(instanceFrom("sb", { kilntainers: "yes", "kilntainers-computer-id": "x", "kilntainers-temporary": "true" })))
    assert.isTrue(Option.isNone(instanceFrom("sb", { kilntainers: "true", "kilntainers-computer-id": "Not Valid", "kilntainers-temporary": "true" })))
  })

  it("select ours, one computer's, or one kind's", () => {
    assert.deepStrictEqual(tagSelector({}), { kilntainers: "true" })
    assert.deepStrictEqual(tagSelector({ id: "a", temporary: true }), {
      kilntainers: "true",
      "kilntainers-computer-id": "a",
      "kilntainers-temporary": "true"
    })
  })
})

describe("exec sizes (Modal: 64 KiB of arguments per exec)", () => {
  const spec = { argv: ["printenv", "BIG"], cwd: "/home/agent", env: { PATH: "/usr/bin:/bin", BIG: "x".repeat(100_000) } }

  it("the wrapper's arguments are constant; the wrapper, env and argv travel in the exec's environment", () => {
    const exec = wrapperExec(spec, spec.env, "nonce")
    const argBytes = exec.argv.reduce((sum, arg) => sum + Buffer.byteLength(arg), 0)
    assert.isBelow(argBytes, 100)
    assert.isUndefined(invalidExec({ argv: exec.argv, env: exec.env, pty: false }), "Modal would take this exec")
    const pieces = Number(exec.env["KT_AN"])
    assert.isAbove(pieces, 1, "a large payload is cut into several variables")
    const joined = Array.from({ length: pieces }, (_, i) => exec.env[`KT_A${i}`]).join("")
    assert.strictEqual(joined, shellWords(spec, spec.env))
    for (const key of Object.keys(exec.env)) assert.match(key, /^[A-Za-z_][A-Za-z0-9_]*$/)
  })

  it("chunks never split a character outside the BMP", () => {
    const emoji = { ...spec, env: { PATH: "/bin", E: "😀".repeat(40_000) } }
    const exec = wrapperExec(emoji, emoji.env, "n")
    const pieces = Array.from({ length: Number(exec.env["KT_AN"]) }, (_, i) => exec.env[`KT_A${i}`]!)
    for (const piece of pieces) assert.strictEqual(Buffer.from(piece, "utf8").toString("utf8"), piece)
  })

  it("a spawn over the payload limit is refused before calling, with the numbers", () => {
    assert.isUndefined(payloadProblem(spec))
    const big = { ...spec, env: { ...spec.env, BIG: "x".repeat(MAX_SPAWN_PAYLOAD_BYTES) } }
    assert.match(payloadProblem(big) ?? "", /take \d+ bytes .* at most 122880 \(120 KiB/)
  })

  it("the adapter refuses what Modal would: argument size, env names, names and timeouts", () => {
    assert.match(invalidExec({ argv: ["echo", "x".repeat(MAX_EXEC_ARGS_BYTES)], pty: false }) ?? "", /at most 65536/)
    assert.match(invalidExec({ argv: ["true"], env: { "my-var": "1" }, pty: false }) ?? "", /my-var/)
    const request = {
      appName: "kilntainers",
      image: "debian:bookworm-slim",
      cpu: 1,
      memoryMiB: 512,
      gpu: undefined,
      region: undefined,
      timeoutMs: 3_600_000,
      blockNetwork: true,
      name: `kilntainer-${longest}`,
      tags: {}
    }
    assert.match(invalidCreate(request) ?? "", /not a valid Modal sandbox name/)
    assert.isUndefined(invalidCreate({ ...request, name: sandboxName(longest) }))
    assert.match(invalidCreate({ ...request, name: "ok", timeoutMs: 1500 }) ?? "", /whole seconds/)
  })
})
