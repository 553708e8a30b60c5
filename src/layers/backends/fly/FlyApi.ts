/**
 * A small client of the Fly Machines REST API (`https://api.machines.dev/v1/apps/{app}/machines`)
 * on @effect/platform's HttpClient: bearer token (Redacted, never logged or put in a message),
 * Schema-decoded answers, a bounded timeout per request, and failures as `FlyError`.
 *
 * Every attempt first takes a token from the request budget of its action and machine (see
 * RequestBudget.ts), so we stay within Fly's documented rate limit by design. A 429 empties that
 * bucket until the time in `Retry-After` (or one refill period when the header is absent) and the
 * call is retried; 5xx and transport failures are retried with exponential backoff and jitter,
 * a bounded number of times. A request that times out is not retried: the caller gets a clear
 * error at once.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import type { HttpClientResponse } from "@effect/platform"
import type * as Redacted from "effect/Redacted"
import * as Clock from "effect/Clock"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schedule from "effect/Schedule"
import * as Schema from "effect/Schema"
import { FlyError, reasonOfStatus } from "./FlyError.js"
import type { BudgetKey, RequestBudget } from "./RequestBudget.js"

export const Metadata = Schema.Record({ key: Schema.String, value: Schema.String })

export const Machine = Schema.Struct({
  id: Schema.String,
  name: Schema.optionalWith(Schema.String, { default: () => "" }),
  state: Schema.String,
  region: Schema.optional(Schema.NullOr(Schema.String)),
  instance_id: Schema.optional(Schema.NullOr(Schema.String)),
  created_at: Schema.optional(Schema.NullOr(Schema.String)),
  config: Schema.optional(Schema.NullOr(Schema.Struct({
    image: Schema.optional(Schema.NullOr(Schema.String)),
    metadata: Schema.optional(Schema.NullOr(Metadata)),
    init: Schema.optional(Schema.NullOr(Schema.Struct({ exec: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))) }))),
    services: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({
      internal_port: Schema.optional(Schema.NullOr(Schema.Number)),
      ports: Schema.optional(Schema.NullOr(Schema.Array(Schema.Struct({ port: Schema.optional(Schema.NullOr(Schema.Number)) }))))
    }))))
  })))
})
export type Machine = typeof Machine.Type

export const ExecResult = Schema.Struct({
  stdout: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => "" }),
  stderr: Schema.optionalWith(Schema.NullOr(Schema.String), { default: () => "" }),
  exit_code: Schema.optionalWith(Schema.NullOr(Schema.Number), { default: () => 0 }),
  exit_signal: Schema.optional(Schema.NullOr(Schema.Number))
})
export type ExecResult = typeof ExecResult.Type

const ApiErrorBody = Schema.Struct({ error: Schema.optional(Schema.String), message: Schema.optional(Schema.String) })
const decodeErrorBody = Schema.decodeUnknownOption(Schema.parseJson(ApiErrorBody))

export interface FlyApiOptions {
  readonly apiUrl: string
  readonly app: string
  readonly token: Redacted.Redacted<string>
  /** Longest wait for one answer (exec and wait calls add their own duration). */
  readonly requestTimeoutMs: number
  /** Retries after the first attempt, for 429, 5xx and transport failures. */
  readonly maxRetries: number
  /** First backoff delay; doubles with every retry (with jitter). */
  readonly retryBaseMs: number
  /** The longest Retry-After honoured. */
  readonly maxRetryAfterMs: number
  readonly budget: RequestBudget
}

interface Call<A, I> {
  readonly operation: string
  /** The rate-limited action (exec, get, start, …) and what it is counted per. */
  readonly budget: BudgetKey
  readonly method: "GET" | "POST" | "DELETE"
  /** Under /v1/apps/{app}/machines. */
  readonly path: string
  readonly query?: ReadonlyArray<readonly [string, string]>
  readonly body?: unknown
  readonly schema: Schema.Schema<A, I>
  readonly timeoutMs?: number
  /** The caller already took the first attempt's token from the budget (retries take their own). */
  readonly taken?: boolean
}

/** Seconds or an HTTP date, relative to `now`. */
export const parseRetryAfter = (value: string | undefined, now: number): number | undefined => {
  if (value === undefined || value.trim() === "") return undefined
  const seconds = Number(value.trim())
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

const transportDetail = (error: unknown): string => {
  const cause = (error as { cause?: unknown }).cause
  const inner = cause instanceof Error ? (cause.cause instanceof Error ? `${cause.message} (${cause.cause.message})` : cause.message) : undefined
  const reason = (error as { reason?: unknown }).reason
  return `cannot reach the Fly API${typeof reason === "string" ? ` (${reason})` : ""}${inner ? `: ${inner}` : ""}`
}

export const make = (options: FlyApiOptions) =>
  Effect.gen(function*() {
    const client = yield* HttpClient.HttpClient
    const base = `${options.apiUrl.replace(/\/+$/, "")}/v1/apps/${encodeURIComponent(options.app)}/machines`
    const budget = options.budget

    const failure = (operation: string, response: HttpClientResponse.HttpClientResponse) =>
      Effect.gen(function*() {
        const text = yield* response.text.pipe(Effect.orElseSucceed(() => ""))
        const body = decodeErrorBody(text)
        const said = (body._tag === "Some" ? (body.value.error ?? body.value.message ?? text) : text).trim().slice(0, 1000)
        const now = yield* Clock.currentTimeMillis
        return yield* new FlyError({
          reason: reasonOfStatus(response.status, said),
          operation,
          status: response.status,
          detail: said || "(no message)",
          retryAfterMs: parseRetryAfter(response.headers["retry-after"], now)
        })
      })

    const backoff = Schedule.exponential(Duration.millis(options.retryBaseMs), 2).pipe(
      Schedule.jittered,
      Schedule.zipRight(Schedule.identity<FlyError>()),
      // A 429 already waited in the budget (refused below): no extra backoff on top of it.
      Schedule.modifyDelay((error, delay) => (error.reason === "RateLimited" ? Duration.zero : delay)),
      Schedule.intersect(Schedule.recurs(options.maxRetries))
    )

    const call = <A, I>(spec: Call<A, I>): Effect.Effect<A, FlyError> => {
      const timeoutMs = spec.timeoutMs ?? options.requestTimeoutMs
      let request = HttpClientRequest.make(spec.method)(`${base}${spec.path}`).pipe(
        HttpClientRequest.bearerToken(options.token),
        HttpClientRequest.acceptJson
      )
      if (spec.query) request = HttpClientRequest.setUrlParams(request, spec.query)
      if (spec.body !== undefined) request = HttpClientRequest.bodyUnsafeJson(request, spec.body)
      let first = true
      const send = client.execute(request).pipe(
        Effect.mapError((error) => new FlyError({ reason: "Unavailable", operation: spec.operation, detail: transportDetail(error), cause: error })),
        Effect.flatMap((response) =>
          response.status >= 200 && response.status < 300
            ? response.text.pipe(
              Effect.flatMap((text) => Effect.try(() => (text.trim() === "" ? {} : JSON.parse(text) as unknown))),
              Effect.flatMap(Schema.decodeUnknown(spec.schema)),
              Effect.mapError((error) =>
                new FlyError({
                  reason: "Protocol",
                  operation: spec.operation,
                  status: response.status,
                  detail: `unexpected answer: ${String((error as { message?: unknown }).message ?? error).slice(0, 500)}`,
                  cause: error
                })
              )
            )
            : failure(spec.operation, response)
        ),
        Effect.timeoutFail({
          duration: Duration.millis(timeoutMs),
          onTimeout: () =>
            new FlyError({
              reason: "Timeout",
              operation: spec.operation,
              detail: `no answer from the Fly API at ${options.apiUrl} within ${Math.round(timeoutMs / 100) / 10} s`
            })
        })
      )
      const attempt = Effect.suspend(() => {
        const skip = first && spec.taken === true
        first = false
        return skip ? Effect.void : budget.take(spec.budget)
      }).pipe(
        Effect.andThen(send),
        Effect.tapError((error) =>
          error.reason === "RateLimited"
            ? budget.refused(spec.budget, error.retryAfterMs === undefined ? undefined : Math.min(error.retryAfterMs, options.maxRetryAfterMs))
            : Effect.void
        ),
        Effect.tapError((error) => (error.retryable ? Effect.logDebug(`fly backend: ${error.message}; retrying`) : Effect.void))
      )
      return Effect.retry(attempt, { schedule: backoff, while: (error) => error.retryable })
    }

    const Ok = Schema.Unknown
    const machinePath = (id: string) => `/${encodeURIComponent(id)}`
    const app = (action: string): BudgetKey => ({ action, scope: "app" })
    const machine = (action: string, id: string): BudgetKey => ({ action, scope: id })

    return {
      list: (metadata: Readonly<Record<string, string>>) =>
        call({
          operation: "list machines",
          budget: app("list"),
          method: "GET",
          path: "",
          query: Object.entries(metadata).map(([key, value]) => [`metadata.${key}`, value] as const),
          schema: Schema.Array(Machine)
        }),
      get: (id: string) => call({ operation: `get machine ${id}`, budget: machine("get", id), method: "GET", path: machinePath(id), schema: Machine }),
      create: (body: unknown) =>
        call({ operation: "create a machine", budget: app("create"), method: "POST", path: "", body, schema: Machine }),
      /**
       * true when the state was reached, false on the API's 408 (not yet). Waiting for `stopped`
       * names the instance (`instance_id`, which Fly's docs require for it).
       */
      wait: (id: string, state: string, timeoutSeconds: number, instanceId?: string) =>
        call({
          operation: `wait for machine ${id} to be ${state}`,
          budget: machine("wait", id),
          method: "GET",
          path: `${machinePath(id)}/wait`,
          query: [["state", state], ["timeout", String(timeoutSeconds)], ...(instanceId === undefined ? [] : [["instance_id", instanceId] as const])],
          schema: Ok,
          timeoutMs: timeoutSeconds * 1000 + options.requestTimeoutMs
        }).pipe(
          Effect.as(true),
          Effect.catchIf((error) => error.status === 408, () => Effect.succeed(false))
        ),
      start: (id: string) =>
        call({ operation: `start machine ${id}`, budget: machine("start", id), method: "POST", path: `${machinePath(id)}/start`, schema: Ok }),
      restart: (id: string) =>
        call({ operation: `restart machine ${id}`, budget: machine("restart", id), method: "POST", path: `${machinePath(id)}/restart`, schema: Ok }),
      destroy: (id: string) =>
        call({
          operation: `destroy machine ${id}`,
          budget: machine("destroy", id),
          method: "DELETE",
          path: machinePath(id),
          query: [["force", "true"]],
          schema: Ok
        }),
      setMetadata: (id: string, key: string, value: string) =>
        call({
          operation: `set metadata ${key} of machine ${id}`,
          budget: machine("metadata", id),
          method: "POST",
          path: `${machinePath(id)}/metadata/${encodeURIComponent(key)}`,
          body: { value },
          schema: Ok
        }),
      /** The budget key of a machine's exec calls (for callers that take the token themselves, `taken`). */
      execBudget: (id: string): BudgetKey => machine("exec", id),
      exec: (id: string, command: ReadonlyArray<string>, params: {
        readonly timeoutSeconds: number
        readonly stdin?: string | undefined
        readonly taken?: boolean | undefined
      }) =>
        call({
          operation: `exec in machine ${id}`,
          budget: machine("exec", id),
          method: "POST",
          path: `${machinePath(id)}/exec`,
          body: { command, timeout: params.timeoutSeconds, ...(params.stdin === undefined ? {} : { stdin: params.stdin }) },
          schema: ExecResult,
          timeoutMs: params.timeoutSeconds * 1000 + options.requestTimeoutMs,
          ...(params.taken === undefined ? {} : { taken: params.taken })
        })
    }
  })

export type FlyApi = Effect.Effect.Success<ReturnType<typeof make>>
