// Package workloadtest proves the workload test bed of testenv
// (testenv.WithWorkloads): Deployments, StatefulSets, DaemonSets and Jobs
// roll out through the real kube-scheduler and kube-controller-manager on
// kwok's fake nodes. It holds tests only.
package workloadtest
