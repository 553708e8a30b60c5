/**
 * Every flag of `kilntainers`, in help order. To add a flag: declare it with a `Flag` constructor
 * in the group's module under `flags/` (its `KILNTAINERS_*` variable, help line and checks come
 * with it), then read it in `ToSettings.ts`.
 */
import type * as Flag from "./Flag.js"
import { e2bFlags, flyFlags, modalFlags } from "./flags/CloudFlags.js"
import { dockerFlags, hostFlags } from "./flags/ContainerFlags.js"
import { coreFlags, httpFlags } from "./flags/CoreFlags.js"
import { egressFlags } from "./flags/EgressFlags.js"
import { kubernetesFlags } from "./flags/KubernetesFlags.js"
import { mountFlags } from "./flags/MountFlags.js"
import { processFlags } from "./flags/ProcessFlags.js"
import { tracingFlags } from "./flags/TracingFlags.js"
import { wasmFlags } from "./flags/WasmFlags.js"

export const flagTable = {
  ...coreFlags,
  ...httpFlags,
  ...tracingFlags,
  ...egressFlags,
  ...mountFlags,
  ...dockerFlags,
  ...hostFlags,
  ...flyFlags,
  ...e2bFlags,
  ...modalFlags,
  ...kubernetesFlags,
  ...wasmFlags,
  ...processFlags
}

export type FlagTable = typeof flagTable
export type FlagKey = keyof FlagTable

/** The value of every flag, typed after its declaration. */
export type FlagValues = { readonly [K in FlagKey]: Flag.ValueOf<FlagTable[K]> }


export type Source = { readonly _tag: "CommandLine" } | { readonly _tag: "Variable"; readonly name: string } | {
  readonly _tag: "Default"
}

export const allFlags: ReadonlyArray<readonly [FlagKey, Flag.AnyFlag]> = Object.entries(flagTable) as Array<
  [FlagKey, Flag.AnyFlag]
>
