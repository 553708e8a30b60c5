/**
 * Issue 19, item 7: a setuid-root file planted in a mounted host directory. The guest copies a
 * shell into the mount and gives it the setuid and setgid bits every way it can (chmod, install -m,
 * open with a mode, mkdir); no file with either bit may appear on the host, on any backend. On
 * Docker a container that cannot run the agent (its root read-only) gets no processes at all with a
 * writable mount: Engine exec would refuse nothing.
 */
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import type { HostServer } from "./HostServer.js"
import { requirements, requirementsMet } from "./HostServer.js"
import { computerId, makeProject, type Project, setidFiles, sh, startServer, targets } from "./SharedDirectory.js"

const PLANT = [
  "cd ~/app",
  "cp /bin/sh r && chmod 4755 r; echo chmod=$?",
  "chmod g+s r; echo chmodg=$?",
  "install -m 4755 /bin/sh r2; echo install=$?",
  "python3 -c \"import os; os.close(os.open('r3', os.O_CREAT | os.O_WRONLY, 0o4755))\"; echo open=$?",
  "python3 -c \"import os; os.mkdir('d', 0o6775)\"; echo mkdir=$?",
  "ls -l"
].join("; ")

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
  }

  const docker = targets.find((target) => target.backend === "docker")
  if (docker === undefined) return
  describe("docker, a container that cannot run the agent", () => {
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
})
