/**
 * E2B's maximum continuous runtime. A sandbox may run at most the plan's maximum since it was
 * started or last resumed: 1 h on the Base (Hobby) plan, 24 h on Pro. E2B caps every timeout
 * renewal at that point, refuses renewals past it with 400 "Max instance length exceeded", and
 * refuses a create or connect timeout above it with 400 "Timeout cannot be greater than N hours".
 * At the end a sandbox is killed, or paused when it was created with `onTimeout: "pause"` (our
 * permanent computers). Pausing and resuming starts a new period: that is the way to keep the
 * files past the end (running processes end, as with any restart).
 *
 * Sources: e2b.dev/docs/sandbox ("The maximum time sandbox can be kept running without being
 * paused is 24 hours on the Pro Tier, 1 hour on the Base Tier"); e2b-dev/infra
 * packages/api/internal/orchestrator/keep_alive.go (KeepAliveFor, getMaxAllowedTTL) and
 * handlers/sandbox_create.go, sandbox_connect.go.
 *
 * The kernel warns the agent before the end (ComputerActor's `warning`, from `Instance.endsAt`).
 * Pure: times are epoch milliseconds read from `Clock` by the caller.
 */

/** The Base (Hobby) plan's maximum runtime, the default of --e2b-max-runtime. */
export const BASE_PLAN_MAX_RUNTIME_SEC = 3600
/** The Pro plan's maximum runtime. */
export const PRO_PLAN_MAX_RUNTIME_SEC = 24 * 3600

/** When a sandbox started (or resumed) at `startedAtMs` must end. */
export const endsAt = (startedAtMs: number, maxRuntimeSec: number): number => startedAtMs + maxRuntimeSec * 1000

/**
 * How long to ask for at a renewal: the configured timeout, but never past the end of the
 * runtime. Zero or less: the end is reached, and E2B would refuse.
 */
export const renewalMs = (nowMs: number, endsAtMs: number, timeoutMs: number): number => Math.min(timeoutMs, endsAtMs - nowMs)

/** "1 h", "24 h", "90 min", "45 s". */
export const formatDuration = (seconds: number): string => {
  if (seconds >= 3600 && seconds % 3600 === 0) return `${seconds / 3600} h`
  if (seconds >= 60 && seconds % 60 === 0) return `${seconds / 60} min`
  return `${seconds} s`
}

const plan = (maxRuntimeSec: number) =>
  `${formatDuration(maxRuntimeSec)} of continuous running (--e2b-max-runtime; E2B's Base plan allows 1 h, Pro 24 h)`

/** Why a computer was lost at the end of its runtime (the sandbox is `gone` or `paused`). */
export const endReason = (sandboxId: string, state: "gone" | "paused", maxRuntimeSec: number): string =>
  state === "gone"
    ? `its sandbox ${sandboxId} reached the end of its runtime, ${plan(maxRuntimeSec)}, and E2B deleted it with its files`
    : `its sandbox ${sandboxId} reached the end of its runtime, ${plan(maxRuntimeSec)}; E2B paused it and kept its files: ` +
      `computer_restart resumes it (its processes are gone), computer_delete removes it`
