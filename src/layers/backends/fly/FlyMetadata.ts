/**
 * Our computers on Fly machines: a machine is named `kilntainer-<id>` and carries the kernel's
 * ComputerMetadata as its `config.metadata`, in the dashed label style (`kilntainers=true`,
 * `kilntainers-computer-id=<id>`, …; encoded in ComputerMetadata.ts, the same keys as before). A
 * machine with our name but other metadata, or our metadata under another name, is not ours.
 */
import * as Option from "effect/Option"
import { type ComputerMetadata, fromLabels, labelKey, type LabelStyle, selector, toLabels } from "../../../domain/ComputerMetadata.js"
import type { Machine } from "./FlyApi.js"

export const STYLE: LabelStyle = "dashed"

export const machineName = (id: string) => `kilntainer-${id}`

/** The metadata key of the lease a live server renews. */
export const EXPIRES = labelKey(STYLE, "expires")

/** The machine metadata of a computer. */
export const encode = (metadata: ComputerMetadata): Record<string, string> => toLabels(STYLE, metadata)

/** The `metadata.*` filter of a list call. */
export const filter = (query: { readonly id?: string | undefined; readonly temporary?: boolean | undefined }) => selector(STYLE, query)

/** Our computer on this machine, when it is one of ours (the list filter is not trusted alone). */
export const decode = (machine: Machine): Option.Option<ComputerMetadata> =>
  fromLabels(STYLE, machine.config?.metadata ?? undefined, {
    image: machine.config?.image ?? undefined,
    created: machine.created_at ?? undefined
  }).pipe(Option.filter((metadata) => machine.name === machineName(metadata.id)))
