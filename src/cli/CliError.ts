import * as Schema from "effect/Schema"

/** The command line cannot be read (unknown flag, missing or malformed value): exit code 2, as argparse. */
export class UsageError extends Schema.TaggedError<UsageError>()("UsageError", {
  message: Schema.String
}) {}

/** The command line was read but the configuration is refused (a value out of range, flags that
 * contradict each other, a shell or state directory that cannot work): exit code 1, as Kilntainers. */
export class ConfigRefused extends Schema.TaggedError<ConfigRefused>()("ConfigRefused", {
  message: Schema.String
}) {}
