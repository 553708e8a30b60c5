import { Either } from "effect"
import { assert, it } from "vitest"
import type * as Flag from "../../src/cli/Flag.js"
import { variableOf } from "../../src/cli/Flag.js"
import { allFlags } from "../../src/cli/FlagTable.js"
import { describeIf } from "../support/Requirements.js"
import { built, errorLine, printConfig, runCli } from "./CliRunner.js"

/** A value of the flag's kind that differs from its default and passes its checks. */
const sample = (flag: Flag.AnyFlag): { readonly raw: string; readonly shown: unknown } => {
  const candidates: Record<Flag.Kind, ReadonlyArray<string>> = {
    boolean: ["true"],
    integer: [String((flag.initial ?? 0) + 1), "128"],
    number: ["2.5"],
    choice: (flag.choices ?? []).filter((choice) => choice !== flag.initial),
    list: ["first one\nsecond", "example.com\n*.example.org", "name.test=10.0.0.1", "api.test:X-Key=KEY_VAR", "/sample/a:/b", "8000\n3000"],
    pairs: ["A=1\nB=two=2"],
    secret: ["s3cret"],
    text: ["/sample/value", "3g", "https://api.example.test"]
  }
  for (const raw of candidates[flag.kind]) {
    const words = flag.repeatable ? raw.split("\n") : [raw]
    const decoded = flag.decode(words)
    if (Either.isRight(decoded) && flag.check(decoded.right, "x") === undefined) {
      return { raw, shown: flag.secret ? "<redacted>" : decoded.right }
    }
  }
  throw new Error(`no sample value for --${flag.name}: teach this test its kind`)
}

describeIf(built, "a built CLI (npm run build)")("every flag has its KILNTAINERS_* variable", () => {
  it("reads every flag from its variable when the command line does not give it", async () => {
    const env: Record<string, string> = {}
    const expected: Record<string, unknown> = {}
    for (const [, flag] of allFlags) {
      const { raw, shown } = sample(flag)
      env[variableOf(flag.name)] = raw
      expected[flag.name] = shown
    }
    // The host backend: --backend's sample is "host", so no engine is asked.
    assert.strictEqual(env.KILNTAINERS_BACKEND, "host")
    const config = await printConfig([], env)
    for (const [, flag] of allFlags) {
      const got = config.flags[flag.name]
      assert.isDefined(got, `--${flag.name} is printed`)
      assert.strictEqual(got!.from, variableOf(flag.name), `--${flag.name} comes from its variable`)
      assert.deepStrictEqual(got!.value, expected[flag.name], `--${flag.name}'s value`)
    }
  })

  it("lets the command line win over a variable, for switches too", async () => {
    const config = await printConfig(["--timeout", "9", "--no-network", "--image=alpine:3"], {
      KILNTAINERS_TIMEOUT: "30",
      KILNTAINERS_NETWORK: "true",
      KILNTAINERS_IMAGE: "busybox"
    })
    assert.deepStrictEqual(config.flags.timeout, { value: 9, from: "command line" })
    assert.deepStrictEqual(config.flags.network, { value: false, from: "command line" })
    assert.deepStrictEqual(config.flags.image, { value: "alpine:3", from: "command line" })
  })

  it("reads the providers' own variables after KILNTAINERS_*", async () => {
    const theirs = await printConfig([], {
      FLY_APP_NAME: "their-app",
      FLY_TOKEN: "t1",
      FLY_REGION: "ams",
      E2B_API_KEY: "k",
      MODAL_TOKEN_ID: "i",
      MODAL_TOKEN_SECRET: "s"
    })
    assert.deepStrictEqual(theirs.flags["fly-app"], { value: "their-app", from: "FLY_APP_NAME" })
    assert.deepStrictEqual(theirs.flags["fly-token"], { value: "<redacted>", from: "FLY_TOKEN" })
    assert.deepStrictEqual(theirs.flags["fly-region"], { value: "ams", from: "FLY_REGION" })
    assert.deepStrictEqual(theirs.flags["e2b-api-key"], { value: "<redacted>", from: "E2B_API_KEY" })
    assert.strictEqual(theirs.flags["modal-token-secret"]!.from, "MODAL_TOKEN_SECRET")
    const ours = await printConfig([], { FLY_APP_NAME: "their-app", KILNTAINERS_FLY_APP: "our-app", FLY_API_TOKEN: "a", FLY_TOKEN: "b" })
    assert.deepStrictEqual(ours.flags["fly-app"], { value: "our-app", from: "KILNTAINERS_FLY_APP" })
    assert.strictEqual(ours.flags["fly-token"]!.from, "FLY_API_TOKEN")
  })

  it("takes an empty variable as not set, except a secret, which is refused", async () => {
    const config = await printConfig([], { KILNTAINERS_TIMEOUT: "", KILNTAINERS_IMAGE: "  " })
    assert.deepStrictEqual(config.flags.timeout, { value: 120, from: "default" })
    assert.deepStrictEqual(config.flags.image, { value: "kilntainers-computer:bookworm", from: "default" })
    const blank = await runCli(["--print-config", "--backend", "host"], { env: { KILNTAINERS_AUTH_TOKEN: " \t" } })
    assert.strictEqual(blank.code, 1)
    assert.include(errorLine(blank), "KILNTAINERS_AUTH_TOKEN: must not be empty")
  })

  it("names the variable of a malformed value", async () => {
    const run = await runCli(["--print-config", "--backend", "host"], { env: { KILNTAINERS_PORT: "eighty" } })
    assert.strictEqual(run.code, 1)
    assert.match(errorLine(run), /^kilntainers: error: KILNTAINERS_PORT: invalid int value: 'eighty' \(see 'kilntainers --help'\)$/)
    const range = await runCli(["--print-config", "--backend", "host"], { env: { KILNTAINERS_PORT: "70000" } })
    assert.strictEqual(range.code, 1)
    assert.include(errorLine(range), "KILNTAINERS_PORT must be between 0 and 65535 (got 70000)")
  })
})
