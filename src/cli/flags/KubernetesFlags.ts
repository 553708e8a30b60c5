/** The flags of the Kubernetes backend (agent-sandbox Sandboxes through SandboxClaims), listed by --help-all. */
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

const kubernetes = defaultSettings.kubernetes
const group = "kubernetes backend options"

export const kubernetesFlags = {
  k8sKubeconfig: Flag.optionalText("k8s-kubeconfig", {
    group,
    metavar: "PATH",
    alsoFrom: ["KUBECONFIG"],
    backends: ["kubernetes"], more: true,
    shownDefault: "$KUBECONFIG, ~/.kube/config, or the pod's service account",
    help: "kubeconfig of the cluster, found as kubectl finds it"
  }),
  k8sContext: Flag.optionalText("k8s-context", { group, metavar: "CONTEXT", backends: ["kubernetes"], more: true, shownDefault: "the current context", help: "kubeconfig context" }),
  k8sNamespace: Flag.optionalText("k8s-namespace", {
    group,
    metavar: "NAMESPACE",
    backends: ["kubernetes"], more: true,
    shownDefault: "the context's namespace",
    help: "Namespace of the computers' SandboxClaims"
  }),
  k8sTemplate: Flag.optionalText("k8s-template", {
    group,
    metavar: "NAME",
    backends: ["kubernetes"], more: true,
    shownDefault: "kilntainers, made from the flags below",
    help: "An existing SandboxTemplate to claim computers from"
  }),
  k8sImage: Flag.text("k8s-image", { group, default: kubernetes.image, backends: ["kubernetes"], more: true, help: "Image of the template kilntainers makes" }),
  k8sRuntimeClass: Flag.optionalText("k8s-runtime-class", {
    group,
    metavar: "NAME",
    backends: ["kubernetes"], more: true,
    help: "RuntimeClass of the pods (gvisor, kata); must exist in the cluster"
  }),
  k8sCpu: Flag.optionalText("k8s-cpu", { group, metavar: "QUANTITY", backends: ["kubernetes"], more: true, help: "CPU of each pod, requested and limited (500m, 2)" }),
  k8sMemory: Flag.optionalText("k8s-memory", { group, metavar: "QUANTITY", backends: ["kubernetes"], more: true, help: "Memory of each pod, requested and limited (512Mi, 2Gi)" }),
  k8sNodeSelector: Flag.pairs("k8s-node-selector", { group, backends: ["kubernetes"], more: true, help: "Node selector of the pods, repeatable (key=value)" }),
  k8sWarmPool: Flag.integer("k8s-warm-pool", {
    group,
    default: kubernetes.warmPool,
    min: 0,
    backends: ["kubernetes"], more: true,
    help: "Ready Sandboxes kept in a SandboxWarmPool of the template, for warm starts"
  })
}
