/**
 * The command line read as Kilntainers' argparse read it, through the pre-pass and @effect/cli
 * (`readFlags` is what `kilntainers ARGV` resolves, in process), and the pre-pass's own rewriting.
 */
import { assert, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { prepare } from "../../src/cli/ArgvPrePass.js"
import { readFlags } from "../../src/cli/Cli.js"
import * as ServeCommand from "../../src/cli/ServeCommand.js"

/** What the line resolves to with no variables set. */
const read = (argv: ReadonlyArray<string>) =>
  readFlags(argv).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map())))
const refused = (argv: ReadonlyArray<string>) =>
  Effect.map(Effect.either(read(argv)), (result) =>
    Either.isLeft(result) ? { tag: result.left._tag, message: result.left.message } : assert.fail(`accepted: ${argv.join(" ")}`))
const words = (argv: ReadonlyArray<string>) => Either.getOrThrowWith(prepare(argv, ServeCommand.spellings), (error) => new Error(error.message))

describe("the command line, read as argparse reads it", () => {
  it.effect("takes --flag value and --flag=value alike", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* read(["--image", "alpine:3"])).values.image, "alpine:3")
      assert.strictEqual((yield* read(["--image=alpine:3"])).values.image, "alpine:3")
      assert.strictEqual((yield* read(["--tool-instruction-override=a=b"])).values.toolInstructionOverride, "a=b")
      assert.deepStrictEqual((yield* read(["--image", "alpine:3"])).sources.image, { _tag: "CommandLine" })
    }))

  it.effect("takes a value that starts with a dash, in both forms, for repeated options too", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual((yield* read(["--docker-run-flag=--label=x"])).values.dockerRunFlag, ["--label=x"])
      assert.deepStrictEqual((yield* read(["--docker-run-flag", "--read-only"])).values.dockerRunFlag, ["--read-only"])
      const mixed = yield* read(["--docker-run-flag", "--label", "--docker-run-flag=kilntainers-http-test", "--image", "x"])
      assert.deepStrictEqual(mixed.values.dockerRunFlag, ["--label", "kilntainers-http-test"])
      assert.strictEqual(mixed.values.image, "x")
      assert.deepStrictEqual(yield* refused(["--timeout", "-5"]), { tag: "ConfigRefused", message: "--timeout must be at least 1 second (got -5)" })
    }))

  it.effect("refuses a missing value instead of swallowing our next option", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* refused(["--image", "--network"]), { tag: "UsageError", message: "argument --image: expected one argument" })
      assert.deepStrictEqual(yield* refused(["--image"]), { tag: "UsageError", message: "argument --image: expected one argument" })
      assert.deepStrictEqual(yield* refused(["--docker-run-flag"]), { tag: "UsageError", message: "argument --docker-run-flag: expected one argument" })
    }))

  it.effect("accumulates repeatable options in order and lets the last single value win", () =>
    Effect.gen(function*() {
      const flags = yield* read(["--docker-run-flag", "readonly", "--env", "A=1", "--docker-run-flag", "pids-limit=256", "--env=B=2"])
      assert.deepStrictEqual(flags.values.dockerRunFlag, ["readonly", "pids-limit=256"])
      assert.deepStrictEqual(flags.values.env, { A: "1", B: "2" })
      assert.strictEqual((yield* read(["--timeout", "5", "--timeout=7"])).values.timeout, 7)
      assert.strictEqual((yield* read(["--log-level", "debug", "--backend", "host", "--log-level=error"])).values.logLevel, "error")
    }))

  it.effect("reads switches: --network, --no-network, --network=false, the last one winning", () =>
    Effect.gen(function*() {
      assert.isTrue((yield* read(["--network"])).values.network)
      assert.isFalse((yield* read(["--no-network"])).values.network)
      assert.isFalse((yield* read(["--network=false"])).values.network)
      assert.isTrue((yield* read(["--no-network", "--network=yes"])).values.network)
      assert.isFalse((yield* read(["--network", "--no-network"])).values.network)
      assert.deepStrictEqual((yield* read(["--no-network"])).sources.network, { _tag: "CommandLine" })
      assert.include((yield* refused(["--no-network=yes"])).message, "ignored explicit argument")
      assert.include((yield* refused(["--network=maybe"])).message, "argument --network: expected true or false, got 'maybe'")
      assert.include((yield* refused(["--no-unsafe-no-sandbox"])).message, "unrecognized argument")
    }))

  it.effect("expands unique prefixes and names the candidates of ambiguous ones", () =>
    Effect.gen(function*() {
      assert.strictEqual((yield* read(["--trans", "http"])).values.transport, "http")
      assert.strictEqual((yield* read(["--fly-reg=ams"])).values.flyRegion, "ams")
      const ambiguous = (yield* refused(["--fly-c", "1"])).message
      assert.include(ambiguous, "ambiguous option: --fly-c could match")
      assert.include(ambiguous, "--fly-cpus")
      assert.include(ambiguous, "--fly-cpu-kind")
    }))

  it.effect("refuses unknown options, with a suggestion when one is close, and stray words", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* refused(["--imagee", "x"]), { tag: "UsageError", message: "unrecognized argument: --imagee (did you mean --image?)" })
      assert.strictEqual((yield* refused(["serve"])).message, "unrecognized arguments: serve")
      assert.strictEqual((yield* refused(["-x"])).message, "unrecognized arguments: -x")
      assert.strictEqual((yield* refused(["--", "x"])).message, "unrecognized arguments: x")
      assert.strictEqual((yield* read(["--"])).values.transport, "stdio")
    }))

  it.effect("reads a --log-level that comes first, which @effect/cli would take as its built-in", () =>
    Effect.gen(function*() {
      const alone = yield* read(["--log-level", "error"])
      assert.strictEqual(alone.values.logLevel, "error")
      assert.deepStrictEqual(alone.sources.logLevel, { _tag: "CommandLine" })
      const first = yield* read(["--log-level", "debug", "--image", "x"])
      assert.deepStrictEqual([first.values.logLevel, first.values.image], ["debug", "x"])
      assert.include((yield* refused(["--log-level", "trace"])).message, "argument --log-level: invalid choice: 'trace'")
    }))
})

describe("the pre-pass", () => {
  it("lets help win over everything else on the line", () => {
    for (const argv of [["-h"], ["--help"], ["--bogus", "--help"], ["--backend", "invalid", "-h"]]) assert.deepStrictEqual(words(argv), ["--help"])
    assert.deepStrictEqual(words(["--help-all", "--help"]), ["--help-all"])
    const afterDashes = prepare(["--docker-run-flag", "x", "--", "--help"], ServeCommand.spellings)
    assert.isTrue(Either.isLeft(afterDashes) && afterDashes.left.message === "unrecognized arguments: --help")
  })

  it("splits values, expands prefixes, keeps the last single value and puts @effect/cli's built-ins first", () => {
    assert.deepStrictEqual(words(["--trans=http", "--docker-run-flag=--read-only", "--timeout", "5", "--version", "--timeout=7"]), [
      "--version",
      "--transport",
      "http",
      "--docker-run-flag",
      "--read-only",
      "--timeout",
      "7"
    ])
    assert.deepStrictEqual(words(["--network=off", "--completions", "zsh"]), ["--completions", "zsh", "--network", "false"])
  })
})
