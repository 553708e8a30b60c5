import { Either } from "effect"
import { assert, describe, it } from "vitest"
import { parseArgv } from "../../src/cli/ArgvParser.js"
import { allFlags } from "../../src/cli/FlagTable.js"

const flags = allFlags.map(([, flag]) => flag)
const given = (argv: ReadonlyArray<string>) => {
  const parsed = parseArgv(argv, flags)
  if (Either.isLeft(parsed)) throw new Error(parsed.left.message)
  return Object.fromEntries(parsed.right.given)
}
const refused = (argv: ReadonlyArray<string>) => {
  const parsed = parseArgv(argv, flags)
  if (Either.isRight(parsed)) throw new Error(`accepted: ${argv.join(" ")}`)
  return parsed.left.message
}

describe("the command line, read as argparse reads it", () => {
  it("takes --flag value and --flag=value alike", () => {
    assert.deepStrictEqual(given(["--image", "alpine:3"]), { image: ["alpine:3"] })
    assert.deepStrictEqual(given(["--image=alpine:3"]), { image: ["alpine:3"] })
    assert.deepStrictEqual(given(["--tool-instruction-override=a=b"]), { "tool-instruction-override": ["a=b"] })
  })

  it("takes a value that starts with a dash, in both forms", () => {
    assert.deepStrictEqual(given(["--docker-run-flag=--label=x"]), { "docker-run-flag": ["--label=x"] })
    assert.deepStrictEqual(given(["--docker-run-flag", "--read-only"]), { "docker-run-flag": ["--read-only"] })
    assert.deepStrictEqual(given(["--timeout", "-5"]), { timeout: ["-5"] })
  })

  it("refuses a missing value instead of swallowing our next flag", () => {
    assert.include(refused(["--image", "--network"]), "argument --image: expected one argument")
    assert.include(refused(["--image"]), "argument --image: expected one argument")
  })

  it("accumulates repeatable flags in order and lets the last single value win", () => {
    assert.deepStrictEqual(given(["--docker-run-flag", "readonly", "--docker-run-flag", "pids-limit=256"]), {
      "docker-run-flag": ["readonly", "pids-limit=256"]
    })
    assert.deepStrictEqual(given(["--timeout", "5", "--timeout=7"]), { timeout: ["7"] })
  })

  it("reads switches: --network, --no-network, --network=false", () => {
    assert.deepStrictEqual(given(["--network"]), { network: ["true"] })
    assert.deepStrictEqual(given(["--no-network"]), { network: ["false"] })
    assert.deepStrictEqual(given(["--network=false"]), { network: ["false"] })
    assert.include(refused(["--no-network=yes"]), "ignored explicit argument")
    assert.include(refused(["--no-unsafe-no-sandbox"]), "unrecognized argument")
  })

  it("expands unique prefixes and names the candidates of ambiguous ones", () => {
    assert.deepStrictEqual(given(["--trans", "http"]), { transport: ["http"] })
    assert.deepStrictEqual(given(["--fly-reg=ams"]), { "fly-region": ["ams"] })
    const ambiguous = refused(["--fly-c", "1"])
    assert.include(ambiguous, "ambiguous option: --fly-c could match")
    assert.include(ambiguous, "--fly-cpus")
    assert.include(ambiguous, "--fly-cpu-kind")
  })

  it("refuses unknown flags, with a suggestion when one is close, and stray words", () => {
    assert.strictEqual(refused(["--imagee", "x"]), "unrecognized argument: --imagee (did you mean --image?)")
    assert.strictEqual(refused(["serve"]), "unrecognized arguments: serve")
    assert.strictEqual(refused(["-x"]), "unrecognized arguments: -x")
    assert.strictEqual(refused(["--", "x"]), "unrecognized arguments: x")
  })

  it("lets help win over everything else on the line", () => {
    for (const argv of [["-h"], ["--help"], ["--bogus", "--help"], ["--backend", "invalid", "-h"]]) {
      const parsed = parseArgv(argv, flags)
      assert.isTrue(Either.isRight(parsed) && parsed.right.action === "help", argv.join(" "))
    }
    const all = parseArgv(["--help-all", "--help"], flags)
    assert.isTrue(Either.isRight(all) && all.right.action === "help-all")
    const config = parseArgv(["--print-config", "--image", "x"], flags)
    assert.isTrue(Either.isRight(config) && config.right.action === "print-config")
  })
})
