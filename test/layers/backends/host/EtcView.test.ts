import { assert, describe, it } from "@effect/vitest"
import { existsSync } from "node:fs"
import { etcArgs } from "../../../../src/layers/backends/host/EtcView.js"

/** The /etc paths the arguments make visible, bound or written. */
const visible = (args: ReadonlyArray<string>) => {
  const paths: Array<string> = []
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--ro-bind" || args[i] === "--symlink" || args[i] === "--kt-data") {
      paths.push(args[i] === "--kt-data" ? args[i + 1]! : args[i + 2]!)
      i += 2
    }
  }
  return paths
}

describe("EtcView", () => {
  it("never shows the host's secrets or credential-bearing configuration, whatever this host has", () => {
    const paths = visible(etcArgs({ hostname: "c1", network: true, accounts: "synthesised" }))
    for (const secret of ["shadow", "gshadow", "shadow-", "ssh", "ssl/private", "sudoers", "machine-id", "subuid", "pip.conf", "npmrc", "gitconfig", "netrc", "environment", "security", "pam.d"]) {
      assert.notInclude(paths, `/etc/${secret}`)
      assert.isFalse(paths.some((path) => path.startsWith(`/etc/${secret}/`)), secret)
    }
    if (existsSync("/etc/ssl/certs")) assert.include(paths, "/etc/ssl/certs")
    if (existsSync("/etc/ld.so.cache")) assert.include(paths, "/etc/ld.so.cache")
  })

  it("writes the guest's accounts, hosts and name service; the host's resolv.conf only with the network", () => {
    const args = etcArgs({ hostname: "c1", network: false, accounts: "synthesised" })
    const data = (path: string) => args[args.indexOf(path, args.indexOf("--kt-data")) + 1]
    assert.match(data("/etc/passwd")!, /^agent:x:1000:1000:agent:\/home\/agent:\/bin\/bash$/m)
    assert.notMatch(data("/etc/passwd")!, /cloudsdk|daemon|www-data/)
    assert.match(data("/etc/group")!, /^agent:x:1000:$/m)
    assert.match(data("/etc/hosts")!, /^127\.0\.1\.1\tc1$/m)
    assert.strictEqual(data("/etc/hostname"), "c1\n")
    assert.match(data("/etc/nsswitch.conf")!, /^passwd: files$/m)
    assert.notInclude(visible(args), "/etc/resolv.conf")
    if (existsSync("/etc/resolv.conf")) assert.include(visible(etcArgs({ hostname: "c1", network: true, accounts: "synthesised" })), "/etc/resolv.conf")
  })
})
