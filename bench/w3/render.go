package w3

import (
	"fmt"
	"maps"
)

// renderGo is render.star in plain Go: the floor of what the transform
// costs without an interpreter.
func renderGo(ns string, p map[string]any) []map[string]any {
	name, team := p["name"].(string), p["team"].(string)
	replicas, port := p["replicas"].(int), p["port"].(int)
	labels := map[string]any{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": team}
	meta := func(n string) map[string]any {
		return map[string]any{"name": n, "namespace": ns, "labels": labels}
	}
	data := map[string]any{}
	for k, v := range p["config"].(map[string]any) {
		data[k] = fmt.Sprint(v)
	}
	selector := map[string]any{"matchLabels": maps.Clone(labels)}
	return []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name)},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name + "-config"), "data": data},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name), "spec": map[string]any{
			"replicas": replicas, "selector": selector,
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{
				"serviceAccountName": name,
				"containers": []any{map[string]any{
					"name": name, "image": p["image"],
					"ports":     []any{map[string]any{"name": "http", "containerPort": port, "protocol": "TCP"}},
					"envFrom":   []any{map[string]any{"configMapRef": map[string]any{"name": name + "-config"}}},
					"resources": map[string]any{"limits": map[string]any{"cpu": "500m", "memory": "256Mi"}},
				}},
			}},
		}},
		{"apiVersion": "v1", "kind": "Service", "metadata": meta(name), "spec": map[string]any{
			"selector": labels, "ports": []any{map[string]any{"name": "http", "port": 80, "targetPort": "http"}},
		}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(name + "-reader"),
			"rules": []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"get", "list", "watch"}}}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(name + "-reader"),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name + "-reader"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": ns}}},
		{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(name), "spec": map[string]any{
			"podSelector": selector, "policyTypes": []any{"Ingress"},
			"ingress": []any{map[string]any{"ports": []any{map[string]any{"port": port}}}},
		}},
		{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(name), "spec": map[string]any{
			"minAvailable": 1, "selector": selector,
		}},
		{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta(name), "spec": map[string]any{
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
			"minReplicas":    replicas, "maxReplicas": replicas * 4,
		}},
		{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta(name), "spec": map[string]any{
			"hard": map[string]any{"pods": fmt.Sprint(replicas * 8)},
		}},
	}
}
