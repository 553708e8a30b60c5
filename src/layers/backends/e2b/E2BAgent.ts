/**
 * The home of an E2B sandbox's processes: kt-agent (the static supervisor the host, Docker and
 * Kubernetes backends run) started as a daemon in the sandbox and reached through envd's own
 * processes (ProcessAgent.ts), so that the sandbox holds its process table, handles, exit records
 * and retained output, whatever server comes and goes.
 *
 * Why this works on E2B (e2b-dev/infra, packages/envd):
 *   - envd starts a command on a context of its own, not the request's ("We do not want the command
 *     to be killed if the request context is cancelled", services/process/start.go): a command
 *     outlives the client that started it, and every command shares one cgroup
 *     (handler/cgroup.go), so nothing ends what a finished command left behind. The agent
 *     (`--daemonize`) goes on in a session of its own once it is ready; its start exits.
 *   - envd keeps no output of a command for a later client (Connect by pid streams only what comes
 *     next), so the output store is the agent's, on the sandbox's disk.
 *   - envd's Start streams the process's stdout as bytes (the SDK's Connect client, EnvdProcess.ts)
 *     and SendInput takes bytes: the connector (`kt-agent --connect`) carries the framed protocol
 *     both ways as it is, with no text framing.
 *   - the agent is copied in by an ordinary command reading its bytes from stdin (as Kubernetes
 *     does), in pieces: no file API is needed.
 *
 * The key: sandbox metadata (AGENT_KEY_METADATA), set by the server at create and readable with the
 * API key only. envd learns only the sandbox's, template's and team's ids from the VM's metadata
 * service (internal/host/mmds.go writes those to /run/e2b and the environment), never the
 * sandbox's metadata, so a guest cannot read the key. The guest of an E2B sandbox may be root
 * there (the default user has sudo), and root can read any process's memory: the key is then no
 * secret inside, and that gains nothing — it only lets a process of the sandbox talk to the
 * sandbox's own agent, which the guest already commands; a forged agent must still prove the key
 * to a server, and a server decodes every frame defensively. The key never leaves that sandbox's
 * record (each sandbox has its own).
 *
 * Its processes get exactly the environment the kernel gives them, plus what envd would have added
 * (--e2b-env and E2B's own `E2B_SANDBOX*` variables): the agent starts them itself.
 *
 * Pauses: ours (restart, the end of the runtime, a release) keep no memory — a cold boot; the agent
 * and its processes are gone, the next connection starts another agent (a new boot: the kernel
 * reports the earlier processes lost). A pause with memory (E2B's default, from outside) brings the
 * same agent back with its processes, still held. A fork from a snapshot (which E2B takes with
 * memory) may carry the parent's agent, under the parent's key: the fork's own key is refused by
 * it, and the fork's processes then run as envd commands (E2BConnection.ts says so in the log).
 */
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"
import type { ProviderError, SpawnFailed } from "../../../domain/Errors.js"
import type { AgentClient, AgentOptions } from "../agent/AgentClient.js"
import * as ProcessAgent from "../agent/ProcessAgent.js"
import { BACKEND } from "./E2BError.js"
import * as EnvdProcess from "./EnvdProcess.js"

/** Where the computer's key is kept: a metadata entry of the sandbox (older sandboxes have none). */
export const AGENT_KEY_METADATA = "kilntainers-agent-key"

/** The agent's directory under the sandbox's home (the default user's: E2B runs commands as it). */
export const agentDir = (home: string) => `${home}/.kilntainers`

export interface AgentContext extends Omit<EnvdProcess.ExecContext, "outputApi"> {
  readonly home: string
  /** The agent's bytes (checked at startup), for a sandbox that has no agent yet. */
  readonly binary: Effect.Effect<Uint8Array, ProviderError>
  /** The agent's options (--retain, --max-finished). */
  readonly args: ReadonlyArray<string>
}

/**
 * The sandbox's agent, attached with `key`: the running one, else copied in, started and
 * attached. Detached when the Scope closes; the agent and its processes run on.
 */
export const open = (
  context: AgentContext,
  key: string,
  options: AgentOptions
): Effect.Effect<AgentClient, ProviderError | SpawnFailed, Scope.Scope> => {
  const host: ProcessAgent.ProcessHost = {
    backend: BACKEND,
    // Only the byte-exact client: the public API decodes output as text, which the frames are not.
    spawn: (spec) => EnvdProcess.exec({ ...context, outputApi: "rpc" }, spec),
    dir: agentDir(context.home),
    cwd: context.home,
    env: {}
  }
  return ProcessAgent.open(host, context.binary, { key, bound: false, args: context.args }, options)
}

/** What envd adds to every command's environment, which the agent's processes would otherwise lack. */
export const sandboxEnv = (
  envs: Readonly<Record<string, string>>,
  sandboxId: string,
  templateId: string
): Record<string, string> => ({ ...envs, E2B_SANDBOX: "true", E2B_SANDBOX_ID: sandboxId, E2B_TEMPLATE_ID: templateId })
