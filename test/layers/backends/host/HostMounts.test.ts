/**
 * The user's own directories in a host computer (--mount, --deny-read, --deny-write): writes land in
 * the host directory owned by its owner, read-only mounts and deny-write paths refuse writes, denied
 * paths are unreadable, nothing else of the host becomes writable, symlinks cannot lead out; a file
 * mount, one directory at two places, a deny-write on a whole mount, and a source removed after the
 * backend started (that start is refused, naming the mount).
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import type { FilesystemPolicy } from "../../../../src/domain/Mounts.js"
import * as HostBackend from "../../../../src/layers/backends/host/HostBackend.js"
import { run } from "../../../support/HostComputer.js"
import { open } from "../../../support/ProviderComputer.js"
import { bwrapWorks, describeIf } from "../../../support/Requirements.js"

const root = mkdtempSync(join(tmpdir(), "kt-host-mounts-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const stateDir = join(root, "state")
const project = join(root, "project")
const docs = join(root, "docs")
const outside = join(root, "outside")
const serverIsRoot = process.getuid?.() === 0
/** The user who owns the project on disk (an ordinary uid when the tests run as root). */
const OWNER = serverIsRoot ? 4321 : process.getuid!()

mkdirSync(join(project, "secret"), { recursive: true })
mkdirSync(join(project, "locked"), { recursive: true })
mkdirSync(docs)
mkdirSync(outside)
writeFileSync(join(project, "a.txt"), "from the host\n")
writeFileSync(join(project, "secret", "key"), "SECRET-KEY\n")
writeFileSync(join(project, "locked", "config"), "fixed\n")
writeFileSync(join(docs, "readme"), "docs\n")
writeFileSync(join(outside, "private.txt"), "OUTSIDE\n")
symlinkSync(outside, join(project, "to-outside"))
if (serverIsRoot) {
  for (const path of [project, join(project, "secret"), join(project, "locked"), join(project, "a.txt"), join(project, "locked", "config")]) {
    chownSync(path, OWNER, OWNER)
  }
  chmodSync(outside, 0o700)
}

const policy: FilesystemPolicy = {
  mounts: [
    { source: project, target: "/home/agent/project", readOnly: false },
    { source: docs, target: "/docs", readOnly: true }
  ],
  // A system file the sandbox shows, and /etc files it writes for the guest (nothing of the host's to hide).
  denyRead: [join(project, "secret"), "/usr/share/common-licenses", "/usr/lib/os-release", "/etc/passwd", "/etc/hostname"],
  denyWrite: [join(project, "locked")]
}

let counter = 0
const computer = () =>
  Effect.gen(function*() {
    const backend = yield* HostBackend.make({ stateDir, network: false, sandbox: "bwrap", filesystem: policy })
    const { connection } = yield* open(backend, `mounts-${process.pid}-${++counter}`)
    return connection
  })

const sh = (script: string) => ["/bin/sh", "-c", script]

describeIf(bwrapWorks, "bubblewrap")("the user's directories in a host computer", () => {
  it.scopedLive("a write lands in the host directory, owned by the directory's owner", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh("cat project/a.txt && echo made > project/new.txt && mkdir -p project/dir/sub && echo x > project/dir/sub/f && id -u && stat -c %u project/a.txt"))
      assert.strictEqual(out.exit?.exitCode, 0, out.stderr)
      assert.strictEqual(out.stdout, "from the host\n1000\n1000\n")
      assert.strictEqual(readFileSync(join(project, "new.txt"), "utf8"), "made\n")
      assert.strictEqual(statSync(join(project, "new.txt")).uid, OWNER)
      assert.strictEqual(statSync(join(project, "dir", "sub", "f")).uid, OWNER)
      assert.strictEqual(statSync(join(project, "dir")).gid, OWNER)
    }), 30_000)

  it.scopedLive("a read-only mount and a deny-write path refuse writes", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh("cat /docs/readme; touch /docs/x; echo no >> project/locked/config; touch project/locked/new; cat project/locked/config"))
      assert.strictEqual(out.stdout, "docs\nfixed\n")
      assert.match(out.stderr, /\/docs\/x.*Read-only file system/)
      assert.match(out.stderr, /locked\/config.*Read-only file system/)
      assert.match(out.stderr, /locked\/new.*Read-only file system/)
      assert.strictEqual(readFileSync(join(project, "locked", "config"), "utf8"), "fixed\n")
    }), 30_000)

  it.scopedLive("denied paths are unreadable, inside a mount and in the system directories", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh("ls -A project/secret; cat project/secret/key; ls -A /usr/share/common-licenses | wc -l; touch project/secret/x"))
      assert.notInclude(out.stdout, "key")
      assert.notInclude(out.stdout + out.stderr, "SECRET-KEY")
      assert.strictEqual(out.stdout.trim(), "0")
      assert.match(out.stderr, /secret\/key: No such file/)
      assert.match(out.stderr, /secret\/x.*Read-only file system/)
    }), 30_000)

  it.scopedLive("a denied file reads as empty, as the README says; the guest's own /etc/passwd stays (issue 23)", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh("wc -c < /usr/lib/os-release; echo x > /usr/lib/os-release; id -un"))
      assert.strictEqual(out.stdout, "0\nagent\n", out.stderr)
      assert.match(out.stderr, /os-release.*(Read-only file system|Permission denied)/)
    }), 30_000)

  it.scopedLive("nothing else of the host becomes writable", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const probe = ["/", "/usr", "/etc", "/opt", "/home", "/docs", "/run"].map((dir) => `touch ${dir}/kt-probe 2>/dev/null && echo WROTE ${dir}`).join("; ")
      const out = yield* run(connection, sh(`${probe}; echo done`))
      assert.strictEqual(out.stdout, "done\n")
    }), 30_000)

  it.scopedLive("symlinks in the mount cannot lead out of it", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh(
        `cat project/to-outside/private.txt; ln -s ${outside} project/made-link; cat project/made-link/private.txt; ` +
          `ln -s / project/root-link; ls project/root-link/ | tr '\\n' ' '`
      ))
      assert.notInclude(out.stdout + out.stderr, "OUTSIDE")
      // The link resolves in the computer's own view: its root, not the host's.
      assert.notInclude(out.stdout, "work")
      assert.include(out.stdout, "home")
    }), 30_000)

  it.scopedLive("a file, one directory at two places, a deny-write on a whole mount; a removed source refuses the start", () =>
    Effect.gen(function*() {
      const extra = join(root, "extra")
      mkdirSync(join(extra, "shared"), { recursive: true })
      writeFileSync(join(extra, "single.txt"), "one file\n")
      writeFileSync(join(extra, "shared", "s.txt"), "shared\n")
      if (serverIsRoot) chownSync(join(extra, "shared"), OWNER, OWNER)
      const gone = join(extra, "gone")
      mkdirSync(gone)
      const backend = yield* HostBackend.make({
        stateDir,
        network: false,
        sandbox: "bwrap",
        filesystem: {
          mounts: [
            { source: join(extra, "single.txt"), target: "/home/agent/single.txt", readOnly: false },
            { source: join(extra, "shared"), target: "/home/agent/one", readOnly: false },
            { source: join(extra, "shared"), target: "/home/agent/two", readOnly: false },
            { source: gone, target: "/home/agent/gone", readOnly: false }
          ],
          denyRead: [],
          denyWrite: [join(extra, "shared")]
        }
      })
      const { connection } = yield* open(backend, `mounts-${process.pid}-${++counter}`)
      const out = yield* run(connection, sh("cat single.txt one/s.txt two/s.txt; touch one/x two/x; echo end"))
      assert.strictEqual(out.stdout, "one file\nshared\nshared\nend\n")
      assert.match(out.stderr, /one\/x.*Read-only file system/)
      assert.match(out.stderr, /two\/x.*Read-only file system/)
      rmSync(gone, { recursive: true })
      const refused = yield* Effect.flip(open(backend, `mounts-${process.pid}-${++counter}`))
      assert.include(String((refused as Error).message), `--mount ${gone}:/home/agent/gone: its host directory was removed`)
    }), 60_000)

  it.scopedLive("no setuid or setgid file can be made in a writable mount", () =>
    Effect.gen(function*() {
      const connection = yield* computer()
      const out = yield* run(connection, sh(
        "cp /bin/true project/t; chmod u+s project/t; echo chmod=$?; chmod g+s project/t; echo chmodg=$?; " +
          "python3 -c \"import os; os.open('project/u', os.O_CREAT|os.O_WRONLY, 0o4755)\" 2>&1 | tail -1; chmod 755 project/t; echo plain=$?"
      ))
      assert.include(out.stdout, "chmod=1\nchmodg=1\n")
      assert.include(out.stdout, "PermissionError")
      assert.include(out.stdout, "plain=0")
      assert.strictEqual(statSync(join(project, "t")).mode & 0o6000, 0)
    }), 30_000)
})
