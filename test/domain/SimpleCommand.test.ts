import { describe, expect, it } from "vitest"
import { directArgv } from "../../src/domain/SimpleCommand.js"

const bash = (command: string, env: Record<string, string> = {}) => directArgv(["/bin/bash", "-c", command], env)

describe("SimpleCommand.directArgv", () => {
  it("splits plain words of a POSIX shell's -c command", () => {
    expect(bash("ls -la /tmp")).toEqual(["ls", "-la", "/tmp"])
    expect(bash("  python3\tmain.py --port=8080 a,b user@host:1 50% +x ./x ")).toEqual(
      ["python3", "main.py", "--port=8080", "a,b", "user@host:1", "50%", "+x", "./x"]
    )
    expect(directArgv(["/bin/sh", "-c", "npm test"], {})).toEqual(["npm", "test"])
    expect(directArgv(["dash", "-c", "git status"], {})).toEqual(["git", "status"])
  })

  it("keeps the shell for anything a shell reads differently", () => {
    for (
      const command of [
        "echo $HOME", "ls *.txt", "ls ~", "a && b", "a | b", "a; b", "a > f", "a < f", "a &", "(a)", "`a`",
        "a 'b c'", "a \"b\"", "a\\ b", "a # note", "ls {a,b}", "ls [ab]", "a\nb", "!x", "ls ?"
      ]
    ) expect(bash(command), command).toBeUndefined()
  })

  it("keeps the shell for builtins, keywords and assignments", () => {
    for (const command of ["cd /tmp", "echo hi", "export A=1", "FOO=1 env", "exit 3", "pwd", "kill 1", "test -f x", "time ls", "if", "read x", "true x", "false --help"]) {
      expect(bash(command), command).toBeUndefined()
    }
    // the builtin and the program do the same without arguments
    expect(bash("true")).toEqual(["true"])
    expect(bash("false")).toEqual(["false"])
  })

  it("keeps the shell when the environment can define functions or startup files", () => {
    expect(bash("ls", { BASH_ENV: "/x" })).toBeUndefined()
    expect(bash("ls", { ENV: "/x" })).toBeUndefined()
    expect(bash("ls", { "BASH_FUNC_ls%%": "() { echo no; }" })).toBeUndefined()
    expect(bash("ls", { PATH: "/bin" })).toEqual(["ls"])
  })

  it("only for [posix-shell, -c, command]", () => {
    expect(directArgv(["/bin/zsh", "-c", "ls"], {})).toBeUndefined()
    expect(directArgv(["/usr/bin/ksh", "-c", "ls"], {})).toBeUndefined()
    expect(directArgv(["ls", "-la"], {})).toBeUndefined()
    expect(directArgv(["/bin/bash", "-lc", "ls"], {})).toBeUndefined()
    expect(bash("")).toBeUndefined()
    expect(bash("   ")).toBeUndefined()
  })
})
