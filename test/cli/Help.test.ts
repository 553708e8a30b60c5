import { assert, beforeAll, it } from "vitest"
import { allFlags } from "../../src/cli/FlagTable.js"
import { describeIf } from "../support/Requirements.js"
import { built, runCli } from "./CliRunner.js"

describeIf(built, "a built CLI (npm run build)")("kilntainers --help", () => {
  let help = ""
  let all = ""
  beforeAll(async () => {
    const [short, long] = await Promise.all([runCli(["--help"]), runCli(["--help-all"])])
    assert.strictEqual(short.code, 0, short.stderr)
    assert.strictEqual(long.code, 0, long.stderr)
    help = short.stdout
    all = long.stdout
  })

  it("is short, plain text and fits 100 columns when piped", () => {
    const lines = help.trimEnd().split("\n")
    assert.isAtMost(lines.length, 100)
    assert.notMatch(help, /\u001b\[/, "no ANSI escape codes")
    for (const line of [...lines, ...all.split("\n")]) assert.isAtMost(line.length, 100, line)
    assert.match(lines[0]!, /^usage: kilntainers /)
  })

  it("is grouped like Kilntainers' argparse help", () => {
    for (const group of [
      "core options:",
      "tool description options:",
      "http options:",
      "docker backend options:",
      "host backend options:",
      "fly backend options:",
      "e2b backend options:",
      "modal backend options:",
      "wasm backend options:"
    ]) {
      assert.include(help, `\n${group}\n`)
    }
    const order = ["core options:", "tool description options:", "http options:", "docker backend options:"].map((g) => help.indexOf(g))
    assert.deepStrictEqual(order, [...order].sort((a, b) => a - b))
  })

  it("shows the defaults Kilntainers' tests look for", () => {
    // Kilntainers' test_cli_integration.py looks for its default image, now the computer image's base.
    assert.include(help.replace(/\s+/g, " "), "the default is built once from debian:bookworm-slim")
    assert.include(help, "(default: kilntainers-computer:bookworm)")
    assert.include(help, "(default: /bin/bash)")
    assert.include(help, "(default: 120)")
    assert.include(help, "--network, --no-network")
  })

  it("lists each flag once: Kilntainers' in --help, every one in --help-all", () => {
    const occurrences = (text: string, name: string) => text.split("\n").filter((line) => new RegExp(`^  (-h, )?${name}[ ,]|^  ${name}$`).test(line)).length
    for (const [, flag] of allFlags) {
      assert.strictEqual(occurrences(all, `--${flag.name}`), 1, `--help-all lists --${flag.name} once`)
      assert.strictEqual(occurrences(help, `--${flag.name}`), flag.more ? 0 : 1, `--help and --${flag.name}`)
    }
    const hidden = allFlags.filter(([, flag]) => flag.more).length
    assert.include(help, `--help-all lists ${hidden} more options.`)
    assert.include(all, "\nprocess options:\n")
    assert.strictEqual(help.split("\n").filter((line) => line.startsWith("  --log-level")).length, 1)
  })

  it("--completions prints each shell's script, naming every option and the image command", async () => {
    for (const [shell, opening] of [["bash", "function _kilntainers_bash_completions()"], ["zsh", "#compdef kilntainers"], ["fish", "complete -c kilntainers"]]) {
      const run = await runCli(["--completions", shell!])
      assert.strictEqual(run.code, 0, run.stderr)
      assert.include(run.stdout, opening!, shell)
      for (const [, flag] of allFlags) assert.include(run.stdout, flag.name, `${shell} completes --${flag.name}`)
      assert.include(run.stdout, "image", shell)
    }
    const bad = await runCli(["--completions", "powershell"])
    assert.strictEqual(bad.code, 2)
    assert.strictEqual(bad.stdout, "")
  })

  it("answers before any flag is checked", async () => {
    const run = await runCli(["--backend", "nonsense", "--port", "99999", "-h"])
    assert.strictEqual(run.code, 0)
    assert.strictEqual(run.stdout, help)
    assert.strictEqual(run.stderr, "")
  })
})
