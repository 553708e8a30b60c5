/**
 * Issue 19, item 7: a setuid-root file planted in a mounted host directory. The guest copies a
 * shell into the mount and gives it the setuid and setgid bits every way it can (chmod, install -m,
 * open with a mode, mkdir); no file with either bit may appear on the host, on any backend. Nor may
 * a setuid file the directory already holds keep its bits once a guest rewrote it — not even a
 * root guest on Docker (`--docker-run-flag=--user=0`), whose CAP_FSETID would keep them: the agent
 * drops that capability wherever it refuses setid files. On Docker a container that cannot run the
 * agent (its root read-only) gets no processes at all with a writable mount: Engine exec would
 * refuse nothing.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { chmodSync, chownSync } from "node:fs"
import { join } from "node:path"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, type Project, setidFiles, sh, startServer, type Target, targets } from "./SharedDirectory.js"

const PLANT = [
  "cd ~/app",
  "cp /bin/sh r && chmod 4755 r; echo chmod=$?",
  "chmod g+s r; echo chmodg=$?",
  "install -m 4755 /bin/sh r2; echo install=$?",
  "python3 -c \"import os; os.close(os.open('r3', os.O_CREAT | os.O_WRONLY, 0o4755))\"; echo open=$?",
  "python3 -c \"import os; os.mkdir('d', 0o6775)\"; echo mkdir=$?",
  "ls -l"
].join("; ")

/** Rewrites the setuid file the project already holds with a shell, keeping its mode if the kernel lets it. */
const REWRITE = "cat /bin/sh > ~/app/kept/tool; echo write=$?; ls -l ~/app/kept/tool"

/** A project with a setuid (and setgid) file in it, owned by `uid` (its owner's by default). */
const withSetidFile = (target: Target, uid?: number) => {
  const project = makeProject(target, { "a.txt": "a\n", "kept/tool": "#!/bin/sh\necho the operator's tool\n" })
  const tool = join(project.project, "kept", "tool")
  if (uid !== undefined) chownSync(tool, uid, uid)
  chmodSync(tool, 0o6755)
  assert.lengthOf(setidFiles(project.project), 1)
  return project
}

describeIf(requirementsMet, requirements)("setuid and setgid files through a writable mount", () => {
  for (const target of targets) {
    describe(target.name, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(target, { "a.txt": "a\n" })
        server = await startServer(target, ["--mount", `${project.project}:/home/agent/app`])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("none appears on the host, and the refusals say so", async () => {
        const planted = await sh(server, computerId("setid"), PLANT)
        assert.include(planted.stdout, "chmod=1\n", planted.all)
        assert.deepStrictEqual(setidFiles(project.project), [])
      }, 180_000)
    })

    describe(`${target.name}: a setuid file already in the mount`, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = withSetidFile(target)
        server = await startServer(target, ["--mount", `${project.project}:/home/agent/app`])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("loses its bits when a computer rewrites it", async () => {
        const rewritten = await sh(server, computerId("kept"), REWRITE)
        assert.include(rewritten.stdout, "write=0\n", rewritten.all)
        assert.deepStrictEqual(setidFiles(project.project), [])
      }, 180_000)
    })
  }

  // A root guest holds the container's capabilities, CAP_FSETID among them unless the agent drops it.
  for (const target of targets.filter((one) => one.backend === "docker")) {
    describe(`${target.name}, the guest root (--docker-run-flag=--user=0)`, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = withSetidFile(target, 0)
        server = await startServer(target, ["--mount", `${project.project}:/home/agent/app`, "--docker-run-flag=--user=0"])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("plants nothing, and a setuid-root file it rewrites loses its bits", async () => {
        const id = computerId("root")
        const planted = await sh(server, id, `id -u; ${PLANT}`)
        assert.match(planted.stdout, /^0\n/, planted.all)
        assert.include(planted.stdout, "chmod=1\n", planted.all)
        const rewritten = await sh(server, id, REWRITE)
        assert.include(rewritten.stdout, "write=0\n", rewritten.all)
        assert.deepStrictEqual(setidFiles(project.project), [])
      }, 180_000)
    })
  }

  for (const docker of targets.filter((target) => target.backend === "docker")) {
    describe(`${docker.name}, a container that cannot run the agent`, () => {
      let project: Project
      let server: HostServer
      beforeAll(async () => {
        project = makeProject(docker, { "a.txt": "a\n" })
        server = await startServer(docker, [
          "--mount", `${project.project}:/home/agent/app`,
          "--docker-run-flag=--read-only", "--docker-run-flag=--tmpfs=/home/agent", "--docker-run-flag=--tmpfs=/tmp"
        ])
      }, 120_000)
      afterAll(async () => {
        await server?.close()
        project?.remove()
      })

      it("runs nothing with a writable mount, and so plants nothing", async () => {
        const result = await server.call("sandbox_exec", { command: PLANT, computer_id: computerId("noagent"), timeout: 60 })
        assert.isTrue(result.isError, `processes ran without the agent: ${result.text}`)
        assert.include(result.text, "only through the agent")
        assert.deepStrictEqual(setidFiles(project.project), [])
      }, 180_000)
    })
  }
})
