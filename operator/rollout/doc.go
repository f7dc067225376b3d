// Package rollout proves spec.wait and health against workloads that roll
// out for real: kube-scheduler and kube-controller-manager on kwok's fake
// nodes (testenv.WithWorkloads), with the operator's reconciler running.
// It holds tests only.
package rollout
