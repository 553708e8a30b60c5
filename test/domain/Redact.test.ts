import { assert, describe, it } from "@effect/vitest"
import { COMMAND_CHARS, commandCut, errorSummary, redact } from "../../src/domain/Redact.js"

describe("what of a command a span may carry", () => {
  const masked: ReadonlyArray<readonly [string, string, string]> = [
    ["an assignment to a secret-named variable", "GITHUB_TOKEN=ghx123secret make deploy", "GITHUB_TOKEN=*** make deploy"],
    ["a quoted assignment", `export DB_PASSWORD='s3 cr3t' && run`, "export DB_PASSWORD=*** && run"],
    ["an AWS-style name", "AWS_SECRET_ACCESS_KEY=abc/def+ghi aws s3 ls", "AWS_SECRET_ACCESS_KEY=*** aws s3 ls"],
    ["an option with =", "tool --api-key=k-12345 run", "tool --api-key=*** run"],
    ["an option and its value", "mysql --password hunter2 -h db", "mysql --password *** -h db"],
    ["an Authorization header", `curl -H "Authorization: Bearer abc.def.ghi" https://x`, `curl -H "Authorization: ***" https://x`],
    ["a custom key header", "curl -H 'X-Api-Key: 123456789' https://x", "curl -H 'X-Api-Key: ***' https://x"],
    ["a bare bearer token", "echo Bearer abcdefghijklmnop", "echo Bearer ***"],
    ["a password in a URL", "git clone https://me:pa55word@git.example.com/repo", "git clone https://me:***@git.example.com/repo"],
    ["curl's -u user:password", "curl -u admin:hunter2 https://x", "curl -u admin:*** https://x"],
    ["a GitHub token", "gh auth login ghp_abcdefghijklmnopqrstuvwxyz0123", "gh auth login ***"],
    ["an AWS access key id", "echo AKIAABCDEFGHIJKLMNOP", "echo ***"],
    ["a JWT", "curl -d eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "curl -d ***"]
  ]
  for (const [what, command, expected] of masked) {
    it(`masks ${what}`, () => assert.strictEqual(redact(command), expected))
  }

  it("leaves ordinary commands alone, PATH and PWD included", () => {
    for (const command of ["ls -la /tmp", "PATH=/opt/bin:$PATH make", "cd $PWD && python3 -m http.server 8000", "grep -r token src/"]) {
      assert.strictEqual(redact(command), command)
    }
  })

  it("cuts a long command after masking, so a cut never shows half a secret", () => {
    const long = `${"x".repeat(COMMAND_CHARS - 10)} API_TOKEN=abcdefghijklmnopqrstuvwxyz`
    const cut = commandCut(long)
    assert.strictEqual(cut.length, COMMAND_CHARS + 1)
    assert.isTrue(cut.endsWith("…"))
    assert.notInclude(cut, "abcdef")
    assert.strictEqual(commandCut("echo  a\n\tb"), "echo a b")
  })

  it("an error keeps its tag and first line only: decoding errors list rejected values below", () => {
    const summary = errorSummary("InvalidInput", "invalid arguments for spawn: { readonly cols?: number }\n└─ [\"cols\"]\n   └─ Expected number, actual \"hunter2\"")
    assert.strictEqual(summary, "InvalidInput: invalid arguments for spawn: { readonly cols?: number }")
    assert.strictEqual(errorSummary("Timeout", ""), "Timeout")
    assert.strictEqual(errorSummary("SpawnFailed", "could not start 'API_TOKEN=x1y2z3 run': not found"), "SpawnFailed: could not start 'API_TOKEN=*** run': not found")
  })
})
