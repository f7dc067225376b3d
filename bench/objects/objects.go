// Package objects generates the Kubernetes objects benchmarks run on:
// realistic, and distinct from each other, so that no cache sees the same
// object twice.
package objects

import "fmt"

// Deployment is the i-th of a set of realistic, distinct Deployments.
func Deployment(i int) map[string]any {
	name := fmt.Sprintf("web-%d", i)
	labels := map[string]any{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": fmt.Sprintf("shop-%d", i%7)}
	return map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata": map[string]any{
			"name":        name,
			"namespace":   fmt.Sprintf("team-%d", i%13),
			"labels":      labels,
			"annotations": map[string]any{"manifestsync.dev/policy": "Sync"},
		},
		"spec": map[string]any{
			"replicas": int64(1 + i%5),
			"selector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": name}},
			"strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": "25%", "maxUnavailable": int64(0)}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{
					"serviceAccountName": name,
					"containers": []any{map[string]any{
						"name":  "web",
						"image": fmt.Sprintf("registry.example.com/web:1.%d.%d", i%20, i),
						"args":  []any{"--port=8080", fmt.Sprintf("--id=%d", i)},
						"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080), "protocol": "TCP"}},
						"env": []any{
							map[string]any{"name": "INSTANCE", "value": fmt.Sprint(i)},
							map[string]any{"name": "DB_PASSWORD", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": name + "-db", "key": "password"}}},
						},
						"resources": map[string]any{
							"requests": map[string]any{"cpu": "100m", "memory": "64Mi"},
							"limits":   map[string]any{"cpu": fmt.Sprintf("%dm", 500+i%500), "memory": "256Mi"},
						},
						"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": "http"}, "periodSeconds": int64(5)},
						"volumeMounts":   []any{map[string]any{"name": "config", "mountPath": "/etc/web", "readOnly": true}},
					}},
					"volumes": []any{map[string]any{"name": "config", "configMap": map[string]any{"name": name}}},
				},
			},
		},
	}
}
