/**
 * A small client of the Fly Machines REST API (`https://api.machines.dev/v1/apps/{app}/machines`)
 * on @effect/platform's HttpClient: bearer token (Redacted, never logged or put in a message),
 * Schema-decoded answers, a bounded timeout per request, and retries with exponential backoff and
 * jitter on 429 (honouring Retry-After) and on 5xx / transport failures, a bounded number of times.
 * A request that times out is not retried: the caller gets a clear error at once.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import type { HttpClientResponse } from "@effect/platform"
import type { Redacted } from "effect"
import { Data, Duration, Effect, Schedule, Schema } from "effect"

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
    metadata: Schema.optional(Schema.NullOr(Metadata))
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

/** A failed API call: what was attempted, the HTTP status (none for transport failures), the API's message. */
export class FlyApiError extends Data.TaggedError("FlyApiError")<{
  readonly what: string
  readonly status: number | undefined
  readonly detail: string
  readonly retryAfterMs: number | undefined
  readonly timedOut: boolean
}> {
  get retryable(): boolean {
    return !this.timedOut && (this.status === undefined || this.status === 429 || this.status >= 500)
  }
  get description(): string {
    return `${this.what}: ${this.status === undefined ? "" : `HTTP ${this.status}: `}${this.detail}`
  }
}

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
}

interface Call<A, I> {
  readonly what: string
  readonly method: "GET" | "POST" | "DELETE"
  /** Under /v1/apps/{app}/machines. */
  readonly path: string
  readonly query?: ReadonlyArray<readonly [string, string]>
  readonly body?: unknown
  readonly schema: Schema.Schema<A, I>
  readonly timeoutMs?: number
}

const parseRetryAfter = (value: string | undefined): number | undefined => {
  if (value === undefined) return undefined
  const seconds = Number(value.trim())
  if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000
  const date = Date.parse(value)
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now())
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

    const failure = (what: string, response: HttpClientResponse.HttpClientResponse) =>
      response.text.pipe(
        Effect.orElseSucceed(() => ""),
        Effect.flatMap((text) => {
          const body = decodeErrorBody(text)
          const said = body._tag === "Some" ? (body.value.error ?? body.value.message ?? text) : text
          return Effect.fail(new FlyApiError({
            what,
            status: response.status,
            detail: said.trim().slice(0, 1000) || "(no message)",
            retryAfterMs: parseRetryAfter(response.headers["retry-after"]),
            timedOut: false
          }))
        })
      )

    const retrySchedule = Schedule.exponential(Duration.millis(options.retryBaseMs), 2).pipe(
      Schedule.jittered,
      Schedule.zipRight(Schedule.identity<FlyApiError>()),
      Schedule.modifyDelay((error, delay) =>
        error.retryAfterMs === undefined
          ? delay
          : Duration.max(delay, Duration.millis(Math.min(error.retryAfterMs, options.maxRetryAfterMs)))
      ),
      Schedule.intersect(Schedule.recurs(options.maxRetries))
    )

    const call = <A, I>(spec: Call<A, I>): Effect.Effect<A, FlyApiError> => {
      const timeoutMs = spec.timeoutMs ?? options.requestTimeoutMs
      let request = HttpClientRequest.make(spec.method)(`${base}${spec.path}`).pipe(
        HttpClientRequest.bearerToken(options.token),
        HttpClientRequest.acceptJson
      )
      if (spec.query) request = HttpClientRequest.setUrlParams(request, spec.query)
      if (spec.body !== undefined) request = HttpClientRequest.bodyUnsafeJson(request, spec.body)
      const attempt = client.execute(request).pipe(
        Effect.mapError((error) =>
          new FlyApiError({ what: spec.what, status: undefined, detail: transportDetail(error), retryAfterMs: undefined, timedOut: false })
        ),
        Effect.flatMap((response) =>
          response.status >= 200 && response.status < 300
            ? response.json.pipe(
              Effect.orElseSucceed(() => ({})),
              Effect.flatMap(Schema.decodeUnknown(spec.schema)),
              Effect.mapError((error) =>
                new FlyApiError({
                  what: spec.what,
                  status: response.status,
                  detail: `unexpected answer: ${error.message.slice(0, 500)}`,
                  retryAfterMs: undefined,
                  timedOut: false
                })
              )
            )
            : failure(spec.what, response)
        ),
        Effect.timeoutFail({
          duration: Duration.millis(timeoutMs),
          onTimeout: () =>
            new FlyApiError({
              what: spec.what,
              status: undefined,
              detail: `no answer from the Fly API at ${options.apiUrl} within ${Math.round(timeoutMs / 100) / 10} s`,
              retryAfterMs: undefined,
              timedOut: true
            })
        }),
        Effect.tapError((error) =>
          error.retryable ? Effect.logDebug(`fly backend: ${error.description}; retrying`) : Effect.void
        )
      )
      return Effect.retry(attempt, { schedule: retrySchedule, while: (error) => error.retryable })
    }

    const Ok = Schema.Unknown
    const machinePath = (id: string) => `/${encodeURIComponent(id)}`

    return {
      list: (metadata: Readonly<Record<string, string>>) =>
        call({
          what: "list machines",
          method: "GET",
          path: "",
          query: Object.entries(metadata).map(([key, value]) => [`metadata.${key}`, value] as const),
          schema: Schema.Array(Machine)
        }),
      get: (id: string) => call({ what: `get machine ${id}`, method: "GET", path: machinePath(id), schema: Machine }),
      create: (body: unknown) => call({ what: "create a machine", method: "POST", path: "", body, schema: Machine }),
      /** true when the state was reached, false on the API's 408 (not yet). */
      wait: (id: string, state: string, timeoutSeconds: number, instanceId?: string) =>
        call({
          what: `wait for machine ${id} to be ${state}`,
          method: "GET",
          path: `${machinePath(id)}/wait`,
          query: [
            ["state", state],
            ["timeout", String(timeoutSeconds)],
            ...(instanceId === undefined ? [] : [["instance_id", instanceId] as const])
          ],
          schema: Ok,
          timeoutMs: timeoutSeconds * 1000 + options.requestTimeoutMs
        }).pipe(
          Effect.as(true),
          Effect.catchIf((error) => error.status === 408, () => Effect.succeed(false))
        ),
      start: (id: string) => call({ what: `start machine ${id}`, method: "POST", path: `${machinePath(id)}/start`, schema: Ok }),
      stop: (id: string) => call({ what: `stop machine ${id}`, method: "POST", path: `${machinePath(id)}/stop`, body: {}, schema: Ok }),
      restart: (id: string) =>
        call({ what: `restart machine ${id}`, method: "POST", path: `${machinePath(id)}/restart`, schema: Ok }),
      destroy: (id: string) =>
        call({ what: `destroy machine ${id}`, method: "DELETE", path: machinePath(id), query: [["force", "true"]], schema: Ok }),
      setMetadata: (id: string, key: string, value: string) =>
        call({
          what: `set metadata ${key} of machine ${id}`,
          method: "POST",
          path: `${machinePath(id)}/metadata/${encodeURIComponent(key)}`,
          body: { value },
          schema: Ok
        }),
      exec: (id: string, command: ReadonlyArray<string>, timeoutSeconds: number, stdin?: string) =>
        call({
          what: `exec in machine ${id}`,
          method: "POST",
          path: `${machinePath(id)}/exec`,
          body: { command, timeout: timeoutSeconds, ...(stdin === undefined ? {} : { stdin }) },
          schema: ExecResult,
          timeoutMs: timeoutSeconds * 1000 + options.requestTimeoutMs
        })
    }
  })

export type FlyApi = Effect.Effect.Success<ReturnType<typeof make>>
